// Unit tests of the Pseudoterminal ↔ Channel adapter with a fake client and channel (no VS Code,
// no gateway).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ChannelListener, ChannelState, ExitStatus, SessionAttachResult, SessionInfo, SessionOpenParams } from '@muxterm/client';
import { SessionTerminal, describeSession, exitCode, type Dimensions, type SessionChannel, type SessionClient, type Target } from '../src/adapter';

/** A promise and its resolvers. */
function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

class FakeChannel implements SessionChannel {
  state: ChannelState = 'bound';
  exit: ExitStatus | null = null;
  attachResult: SessionAttachResult | null = null;
  offset = 0;
  listener: ChannelListener | null = null;
  readonly written: string[] = [];
  readonly consumedBytes: number[] = [];
  readonly resizes: Array<{ cols: number; rows: number; done: ReturnType<typeof deferred<void>> }> = [];
  detached = 0;
  killed = 0;

  constructor(readonly session: string) {}

  listen(l: ChannelListener): void {
    this.listener = l;
  }
  consumed(n: number): void {
    this.consumedBytes.push(n);
  }
  write(data: string | Uint8Array): boolean {
    this.written.push(typeof data === 'string' ? data : new TextDecoder().decode(data));
    return true;
  }
  resize(cols: number, rows: number): Promise<{ cols: number; rows: number }> {
    const done = deferred<void>();
    this.resizes.push({ cols, rows, done });
    return done.promise.then(() => ({ cols, rows }));
  }
  detach(): Promise<void> {
    this.detached++;
    this.state = 'detached';
    return Promise.resolve();
  }
  kill(): ReturnType<SessionChannel['kill']> {
    this.killed++;
    this.state = 'closed';
    return Promise.resolve({ session: this.session, status: 'killed', exit: { code: -1, signal: 'HUP' }, duration_ms: 1, signals: ['HUP'], escapees: 0, survivors: 0, offset: this.offset });
  }
  /** Output as the gateway would deliver it. */
  data(bytes: Uint8Array): void {
    this.offset += bytes.length;
    this.listener?.data?.(bytes as Uint8Array<ArrayBuffer>, this as never);
  }
}

class FakeClient implements SessionClient {
  connects = 0;
  readonly opens: Array<Omit<SessionOpenParams, 'channel'>> = [];
  readonly attaches: Array<{ session: string; from: number | undefined }> = [];
  bind = deferred<FakeChannel>();

  connect(): Promise<void> {
    this.connects++;
    return Promise.resolve();
  }
  open(params: Omit<SessionOpenParams, 'channel'>): Promise<SessionChannel> {
    this.opens.push(params);
    return this.bind.promise;
  }
  attach(session: string, from?: number): Promise<SessionChannel> {
    this.attaches.push({ session, from });
    return this.bind.promise;
  }
}

/** Records what the adapter fires on the Pseudoterminal's events. */
class Events {
  readonly writes: string[] = [];
  readonly closes: Array<number | void> = [];
  readonly names: string[] = [];
  readonly write = { fire: (s: string) => void this.writes.push(s) };
  readonly close = { fire: (c: number | void) => void this.closes.push(c) };
  readonly name = { fire: (s: string) => void this.names.push(s) };
  text(): string {
    return this.writes.join('');
  }
}

/** A SessionTerminal bound to a FakeChannel; VS Code's size at open is `dims` (null: none yet). */
async function bound(target: Target = { kind: 'open' }, dims: Dimensions | null = { columns: 100, rows: 30 }, killOnClose = false) {
  const client = new FakeClient();
  const ev = new Events();
  const st = new SessionTerminal(client, target, ev, { killOnClose });
  const ch = new FakeChannel('0123456789abcdef');
  client.bind.resolve(ch);
  await st.open(dims ?? undefined);
  return { client, ev, st, ch };
}

/** Lets pending promise callbacks run (the adapter's resize loop awaits the channel). */
const settle = () => new Promise<void>((r) => setImmediate(r));

describe('SessionTerminal', () => {
  it('opens a session at the terminal size and names the terminal', async () => {
    const { client, ev, st } = await bound({ kind: 'open', cmd: ['bash', '-l'], name: 'build' });
    assert.equal(client.connects, 1);
    assert.deepEqual(client.opens, [{ cols: 100, rows: 30, cmd: ['bash', '-l'], name: 'build' }]);
    assert.deepEqual(ev.names, ['muxterm: build']);
    assert.equal(st.session, '0123456789abcdef');
  });

  it('opens at 80×24 when VS Code gives no size yet', async () => {
    const { client } = await bound({ kind: 'open' }, null);
    assert.deepEqual(client.opens, [{ cols: 80, rows: 24 }]);
  });

  it('writes output as text, UTF-8 split across frames included, and acks every byte', async () => {
    const { ev, ch } = await bound();
    const bytes = new TextEncoder().encode('héllo ✓\r\n'); // é: 2 bytes, ✓: 3 bytes
    ch.data(bytes.subarray(0, 2)); // "h" and the first byte of é
    ch.data(bytes.subarray(2, 9)); // splits ✓
    ch.data(bytes.subarray(9));
    assert.equal(ev.text(), 'héllo ✓\r\n');
    assert.deepEqual(ch.consumedBytes, [2, 7, bytes.length - 9]);
  });

  it('sends input typed before the session is bound once it is, then directly', async () => {
    const client = new FakeClient();
    const ev = new Events();
    const st = new SessionTerminal(client, { kind: 'open' }, ev);
    const opening = st.open({ columns: 80, rows: 24 });
    st.handleInput('ls');
    st.handleInput('\r');
    const ch = new FakeChannel('s1');
    client.bind.resolve(ch);
    await opening;
    assert.deepEqual(ch.written, ['ls\r']);
    st.handleInput('x');
    assert.deepEqual(ch.written, ['ls\r', 'x']);
  });

  it('resizes the PTY: one request in flight, the latest size wins, none when unchanged', async () => {
    const { st, ch } = await bound();
    st.setDimensions({ columns: 100, rows: 30 }); // the size it was opened at
    await settle();
    assert.equal(ch.resizes.length, 0);
    st.setDimensions({ columns: 120, rows: 40 });
    st.setDimensions({ columns: 121, rows: 41 });
    st.setDimensions({ columns: 132, rows: 43 });
    await settle();
    assert.deepEqual(ch.resizes.map((r) => [r.cols, r.rows]), [[120, 40]]);
    ch.resizes[0]!.done.resolve();
    await settle();
    assert.deepEqual(ch.resizes.map((r) => [r.cols, r.rows]), [[120, 40], [132, 43]]);
    ch.resizes[1]!.done.resolve();
    await settle();
    assert.equal(ch.resizes.length, 2);
  });

  it('closes with the exit code when the program ends, and leaves the session', async () => {
    const { ev, ch } = await bound();
    ch.listener!.exit!({ code: 3, signal: null }, ch as never);
    assert.deepEqual(ev.closes, [3]);
    assert.equal(ch.detached, 1);
    ch.listener!.closed!('exited', ch as never);
    assert.deepEqual(ev.closes, [3], 'closed after exit fires nothing more');
  });

  it('closes with 128 + the signal number after a signal', async () => {
    const { ev, ch } = await bound({ kind: 'open' }, null, true);
    ch.listener!.exit!({ code: -1, signal: 'TERM' }, ch as never);
    assert.deepEqual(ev.closes, [143]);
    assert.equal(ch.killed, 1, 'killOnClose kills the ended session');
  });

  it('closes when the session is killed elsewhere, saying so', async () => {
    const { ev, ch } = await bound();
    ch.exit = { code: -1, signal: 'HUP' };
    ch.state = 'closed';
    ch.listener!.closed!('killed', ch as never);
    assert.deepEqual(ev.closes, [129]);
    assert.match(ev.text(), /session killed/);
    assert.equal(ch.detached, 0, 'a closed channel is not detached');
  });

  it('detaches when the user closes the terminal (kills with killOnClose), once', async () => {
    const a = await bound();
    a.st.close();
    a.st.close();
    assert.equal(a.ch.detached, 1);
    assert.equal(a.ch.killed, 0);
    a.st.handleInput('ignored');
    assert.deepEqual(a.ch.written, []);
    const b = await bound({ kind: 'open' }, null, true);
    b.st.close();
    assert.equal(b.ch.killed, 1);
    assert.equal(b.ch.detached, 0);
  });

  it('leaves a session bound after the user already closed the terminal', async () => {
    const client = new FakeClient();
    const st = new SessionTerminal(client, { kind: 'open' }, new Events());
    const opening = st.open(undefined);
    st.close();
    const ch = new FakeChannel('late');
    client.bind.resolve(ch);
    await opening;
    assert.equal(ch.detached, 1);
    assert.equal(ch.listener, null, 'nothing listens on it');
  });

  it('reattaches from an offset, at the session size, and reports lost bytes', async () => {
    const client = new FakeClient();
    const ev = new Events();
    const st = new SessionTerminal(client, { kind: 'attach', session: 'abc', from: 4096 }, ev);
    const ch = new FakeChannel('abc');
    ch.attachResult = { session: 'abc', channel: 1, offset: 5000, lost: 904, end: 6000, pid: 1, cols: 90, rows: 20, exit: null };
    client.bind.resolve(ch);
    await st.open({ columns: 90, rows: 20 });
    assert.deepEqual(client.attaches, [{ session: 'abc', from: 4096 }]);
    await settle();
    assert.equal(ch.resizes.length, 0, 'already at the terminal size');
    ch.listener!.gap!(904, ch as never);
    assert.match(ev.text(), /904 bytes of output were lost/);
    ch.listener!.reattached!({ ...ch.attachResult, lost: 10 }, ch as never);
    assert.match(ev.text(), /reconnected; 10 bytes/);
    assert.deepEqual(ev.closes, []);
  });

  it('attaches from 0 (the whole ring) by default and resizes to the terminal', async () => {
    const client = new FakeClient();
    const st = new SessionTerminal(client, { kind: 'attach', session: 'abc' }, new Events());
    const ch = new FakeChannel('abc');
    ch.attachResult = { session: 'abc', channel: 1, offset: 0, lost: 0, end: 10, pid: 1, cols: 80, rows: 24, exit: null };
    client.bind.resolve(ch);
    await st.open({ columns: 100, rows: 50 });
    await settle();
    assert.deepEqual(client.attaches, [{ session: 'abc', from: 0 }]);
    assert.deepEqual(ch.resizes.map((r) => [r.cols, r.rows]), [[100, 50]]);
  });

  it('closes with 1 and says why when the session cannot be opened', async () => {
    const client = new FakeClient();
    const ev = new Events();
    const st = new SessionTerminal(client, { kind: 'attach', session: 'gone' }, ev);
    client.bind.reject(new Error('unknown session'));
    await st.open(undefined);
    assert.deepEqual(ev.closes, [1]);
    assert.match(ev.text(), /cannot attach to gone: unknown session/);
  });
});

describe('helpers', () => {
  it('exitCode', () => {
    assert.equal(exitCode({ code: 0, signal: null }), 0);
    assert.equal(exitCode({ code: 7, signal: null }), 7);
    assert.equal(exitCode({ code: -1, signal: 'KILL' }), 137);
    assert.equal(exitCode({ code: -1, signal: 'HUP' }), 129);
    assert.equal(exitCode({ code: -1, signal: null }), 1);
  });

  it('describeSession', () => {
    const s: SessionInfo = { session: 'abc', name: '', pid: 1, cmd: ['sh'], created: '2026-12-01T04:00:00Z', cols: 80, rows: 24, viewers: 0, end: 0, exit: null };
    assert.deepEqual(describeSession(s), { label: 'abc', description: 'sh · 80×24 · detached', detail: 'abc · started 2026-12-01T04:00:00Z' });
    assert.equal(describeSession({ ...s, name: 'build', viewers: 2 }).label, 'build');
    assert.match(describeSession({ ...s, viewers: 2 }).description, /2 viewers/);
    assert.match(describeSession({ ...s, exit: { code: 0, signal: null } }).description, /exited 0/);
  });
});
