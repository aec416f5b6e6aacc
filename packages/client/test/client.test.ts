// Unit tests of the protocol client against a fake WebSocket (no gateway, no DOM).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  backoffDelay,
  reconnectDelay,
  Channel,
  decodeFrame,
  encodeAck,
  encodeFrame,
  FrameType,
  inputChunkBytes,
  isTerminalReply,
  MuxClient,
  ReplayGuard,
  MuxError,
  SUBPROTOCOL,
  type ConnectionState,
  type ExitStatus,
  type JsonRpcRequest,
  type WebSocketLike,
} from '../src/index';

// ---------------------------------------------------------------------------------------------
// fake socket

class FakeSocket implements WebSocketLike {
  binaryType = 'blob';
  readyState = 0;
  readonly protocol = SUBPROTOCOL;
  readonly sent: Array<string | Uint8Array> = [];
  closedWith: number | undefined;
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  onclose: ((ev: { code?: number }) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;

  constructor(
    readonly url: string,
    readonly protocols: string | string[],
  ) {}

  send(data: string | Uint8Array<ArrayBuffer>): void {
    if (this.readyState !== 1) throw new Error('socket not open');
    this.sent.push(typeof data === 'string' ? data : data.slice());
  }
  close(code?: number): void {
    this.closedWith = code;
    this.readyState = 3;
  }

  // --- the "server" side
  open(): void {
    this.readyState = 1;
    this.onopen?.({});
  }
  drop(): void {
    this.readyState = 3;
    this.onclose?.({ code: 1006 });
  }
  text(msg: object): void {
    this.onmessage?.({ data: JSON.stringify(msg) });
  }
  /** Sends an output frame (or another type's); the payload sits at a non-zero offset of a larger buffer. */
  output(channel: number, payload: string | Uint8Array, type: number = FrameType.Output): void {
    const bytes = typeof payload === 'string' ? new TextEncoder().encode(payload) : payload;
    const frame = encodeFrame(type, channel, bytes);
    const buf = new ArrayBuffer(frame.length);
    new Uint8Array(buf).set(frame);
    this.onmessage?.({ data: buf });
  }
  requests(): JsonRpcRequest<Record<string, unknown>>[] {
    return this.sent.filter((m): m is string => typeof m === 'string').map((m) => JSON.parse(m));
  }
  request(method: string): JsonRpcRequest<Record<string, unknown>> {
    const r = this.requests().filter((q) => q.method === method);
    const last = r[r.length - 1];
    if (!last) throw new Error(`no ${method} request; sent: ${this.requests().map((q) => q.method).join(',')}`);
    return last;
  }
  respond(method: string, result: unknown): void {
    this.text({ jsonrpc: '2.0', id: this.request(method).id, result });
  }
  fail(method: string, code: number, kind: string, extra: object = {}): void {
    this.text({ jsonrpc: '2.0', id: this.request(method).id, error: { code, message: kind, data: { kind, ...extra } } });
  }
  frames(type?: number): Array<{ type: number; channel: number; payload: number[] }> {
    return this.sent
      .filter((m): m is Uint8Array => typeof m !== 'string')
      .map((m) => decodeFrame(m)!)
      .filter((f) => type === undefined || f.type === type)
      .map((f) => ({ type: f.type, channel: f.channel, payload: [...f.payload] }));
  }
  acks(channel = 1): number[] {
    return this.frames(FrameType.Ack)
      .filter((f) => f.channel === channel)
      .map((f) => {
        assert.equal(f.payload.length, 4);
        return new DataView(new Uint8Array(f.payload).buffer).getUint32(0, false);
      });
  }
}

const tick = () => new Promise<void>((r) => setTimeout(r, 0));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function until(cond: () => boolean, what: string, ms = 1000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(1);
  }
}

function initResult(limits: object = {}, flow: object = {}) {
  return {
    server: { name: 'muxterm', version: '0.1.0' },
    protocol: 'muxterm.v1',
    limits: {
      maxMessageBytes: 65536,
      maxInputBytes: 65536,
      maxChannels: 64,
      maxSessions: 64,
      maxCols: 1000,
      maxRows: 1000,
      maxOutputFrameBytes: 32768,
      ...limits,
    },
    flow: { window: 262144, ackBytes: 65536, ...flow },
  };
}

function harness(opts: { limits?: object; flow?: object; ackIdleMs?: number } = {}) {
  const sockets: FakeSocket[] = [];
  const states: ConnectionState[] = [];
  const client = new MuxClient('ws://gw/ws', {
    webSocketFactory: (url, protocols) => {
      const s = new FakeSocket(url, protocols);
      sockets.push(s);
      return s;
    },
    backoff: { initialDelayMs: 1, maxDelayMs: 4 },
    random: () => 0,
    ackIdleMs: opts.ackIdleMs ?? 0,
  });
  client.on('state', (s) => states.push(s));
  const sock = () => sockets[sockets.length - 1]!;
  /** Opens the current socket and answers initialize. */
  const handshake = async () => {
    await until(() => sockets.length > 0 && sock().onopen !== null, 'socket');
    sock().open();
    sock().respond('initialize', initResult(opts.limits, opts.flow));
    await tick();
  };
  return { client, sockets, sock, states, handshake };
}

interface Recorded {
  events: Array<[string, unknown]>;
  bytes: number[];
}

function record(ch: Channel): Recorded {
  const rec: Recorded = { events: [], bytes: [] };
  ch.listen({
    data: (b) => {
      rec.events.push(['data', b.length]);
      rec.bytes.push(...b);
    },
    gap: (lost) => rec.events.push(['gap', lost]),
    exit: (s: ExitStatus) => rec.events.push(['exit', s]),
    closed: (reason) => rec.events.push(['closed', reason]),
    reattached: (r) => rec.events.push(['reattached', r.offset]),
  });
  return rec;
}

/** Connects, opens a session on channel 1 at offset 0. */
async function opened(opts: Parameters<typeof harness>[0] = {}) {
  const h = harness(opts);
  const ready = h.client.connect();
  await h.handshake();
  await ready;
  const p = h.client.open({ cols: 80, rows: 24 });
  await tick();
  h.sock().respond('session.open', { session: 'S', channel: 1, pid: 42, offset: 0 });
  const ch = await p;
  return { ...h, ch };
}

// ---------------------------------------------------------------------------------------------

describe('frame codec', () => {
  it('encodes [type u8][channel u32 BE][payload]', () => {
    assert.deepEqual([...encodeFrame(FrameType.Input, 1, new Uint8Array([0x24, 0x20]))], [2, 0, 0, 0, 1, 0x24, 0x20]);
    assert.deepEqual([...encodeFrame(1, 0x01020304)], [1, 1, 2, 3, 4]);
    assert.deepEqual([...encodeFrame(1, 0xffffffff, new Uint8Array([9]))], [1, 255, 255, 255, 255, 9]);
  });

  it('encodes an ack as exactly 4 payload bytes (§8: ack 23 bytes)', () => {
    assert.deepEqual([...encodeAck(1, 23)], [3, 0, 0, 0, 1, 0, 0, 0, 0x17]);
    assert.deepEqual([...encodeAck(7, 0x01020304)], [3, 0, 0, 0, 7, 1, 2, 3, 4]);
    assert.throws(() => encodeAck(1, -1));
    assert.throws(() => encodeAck(1, 2 ** 32));
  });

  it('refuses channel 0 and channels beyond u32', () => {
    assert.throws(() => encodeFrame(2, 0));
    assert.throws(() => encodeFrame(2, 2 ** 32));
    assert.throws(() => encodeFrame(2, 1.5));
  });

  it('decodes without copying, from ArrayBuffer or a view at an offset', () => {
    const buf = new Uint8Array([0xee, 1, 0, 0, 1, 0, 0x68, 0x69]);
    const f = decodeFrame(buf.subarray(1))!;
    assert.equal(f.type, 1);
    assert.equal(f.channel, 256);
    assert.deepEqual([...f.payload], [0x68, 0x69]);
    assert.equal(f.payload.buffer, buf.buffer);
    const g = decodeFrame(encodeFrame(1, 5).buffer)!;
    assert.equal(g.channel, 5);
    assert.equal(g.payload.length, 0);
  });

  it('rejects messages shorter than the header', () => {
    assert.equal(decodeFrame(new Uint8Array([1, 0, 0, 1])), null);
    assert.equal(decodeFrame(new ArrayBuffer(0)), null);
  });
});

describe('connection', () => {
  it('offers muxterm.v1, uses arraybuffer, sends initialize first, queues requests until ready', async () => {
    const h = harness();
    const ready = h.client.connect();
    const listed = h.client.list();
    await tick();
    const s = h.sock();
    assert.equal(s.url, 'ws://gw/ws');
    assert.equal(s.protocols, 'muxterm.v1');
    assert.equal(s.binaryType, 'arraybuffer');
    assert.equal(s.sent.length, 0);
    s.open();
    assert.equal(s.requests().length, 1);
    const init = s.requests()[0]!;
    assert.equal(init.method, 'initialize');
    assert.equal(init.jsonrpc, '2.0');
    assert.ok(init.params && 'client' in init.params && 'capabilities' in init.params);
    assert.equal(h.client.state, 'connecting');
    s.respond('initialize', initResult({ maxInputBytes: 1234 }, { ackBytes: 99 }));
    await ready;
    assert.equal(h.client.state, 'connected');
    assert.equal(h.client.limits.maxInputBytes, 1234);
    assert.equal(h.client.flow.ackBytes, 99);
    await tick();
    assert.equal(s.request('session.list').method, 'session.list');
    s.respond('session.list', { sessions: [{ session: 'A' }] });
    assert.deepEqual((await listed).map((x) => x.session), ['A']);
    assert.deepEqual(h.states, ['connecting', 'connected']);
    h.client.close();
    assert.equal(h.client.state, 'closed');
  });

  it('rejects with a typed MuxError carrying data.kind; id:null errors go to the error event', async () => {
    const h = harness();
    void h.client.connect();
    await h.handshake();
    const errs: MuxError[] = [];
    h.client.on('error', (e) => errs.push(e));
    const p = h.client.open({ cols: 0, rows: 24 });
    await tick();
    h.sock().fail('session.open', -32602, 'invalid_params', { param: 'cols' });
    await assert.rejects(p, (e: unknown) => {
      assert.ok(e instanceof MuxError);
      assert.equal(e.kind, 'invalid_params');
      assert.equal(e.code, -32602);
      assert.equal(e.data.param, 'cols');
      assert.equal(e.method, 'session.open');
      return true;
    });
    assert.equal(h.client.channels.size, 0, 'a failed open frees its channel');
    h.sock().text({ jsonrpc: '2.0', id: null, error: { code: -32006, message: 'bad frame', data: { kind: 'bad_frame' } } });
    assert.equal(errs.length, 1);
    assert.equal(errs[0]!.kind, 'bad_frame');
    h.client.close();
  });

  it('backs off exponentially with jitter and a cap', () => {
    const o = { initialDelayMs: 100, maxDelayMs: 1000, multiplier: 2, jitter: 0.5 };
    assert.deepEqual([0, 1, 2, 3, 4, 10, 1000].map((a) => backoffDelay(a, o, () => 0)), [100, 200, 400, 800, 1000, 1000, 1000]);
    assert.deepEqual([0, 1, 2, 3, 4].map((a) => backoffDelay(a, o, () => 1)), [50, 100, 200, 400, 500]);
    for (let a = 0; a < 20; a++) {
      const d = backoffDelay(a, o);
      assert.ok(d >= 50 && d <= 1000, `delay ${d}`);
    }
  });
});

describe('offsets', () => {
  it('counts received payload bytes and gap bytes from the attach offset', async () => {
    const { client, sock, ch } = await opened();
    const rec = record(ch);
    assert.equal(ch.session, 'S');
    assert.equal(ch.offset, 0);
    sock().output(1, '$ ');
    sock().output(1, 'hello');
    assert.equal(ch.offset, 7);
    sock().text({ jsonrpc: '2.0', method: 'session.gap', params: { channel: 1, lost: 100 } });
    assert.equal(ch.offset, 107);
    sock().output(1, new Uint8Array([0xe2, 0x82])); // half a UTF-8 character: bytes, not text
    sock().output(1, new Uint8Array([0xac]));
    assert.equal(ch.offset, 110);
    assert.deepEqual(rec.events, [
      ['data', 2],
      ['data', 5],
      ['gap', 100],
      ['data', 2],
      ['data', 1],
    ]);
    assert.deepEqual(rec.bytes.slice(-3), [0xe2, 0x82, 0xac]);
    // frames for other channels are not ours
    sock().output(9, 'x');
    assert.equal(ch.offset, 110);
    client.close();
  });

  it('buffers events until a listener is set, in order', async () => {
    const { client, sock, ch } = await opened();
    sock().output(1, 'ab');
    sock().text({ jsonrpc: '2.0', method: 'session.gap', params: { channel: 1, lost: 3 } });
    sock().output(1, 'c');
    const rec = record(ch);
    assert.deepEqual(rec.events, [
      ['data', 2],
      ['gap', 3],
      ['data', 1],
    ]);
    client.close();
  });

  it('attach from an offset older than the ring reports the lost bytes as a gap', async () => {
    const h = harness();
    void h.client.connect();
    await h.handshake();
    const p = h.client.attach('S', 10);
    await tick();
    assert.deepEqual(h.sock().request('session.attach').params, { channel: 1, session: 'S', from: 10 });
    h.sock().respond('session.attach', { session: 'S', channel: 1, offset: 64, lost: 54, end: 80, pid: 1, cols: 80, rows: 24, exit: null });
    const ch = await p;
    const rec = record(ch);
    assert.equal(ch.offset, 64);
    h.sock().output(1, 'x'.repeat(16));
    assert.equal(ch.offset, 80);
    assert.deepEqual(rec.events, [
      ['gap', 54],
      ['data', 16],
    ]);
    h.client.close();
  });

  it('an exit known at attach is delivered after the replay up to `end`, once', async () => {
    const h = harness();
    void h.client.connect();
    await h.handshake();
    const p = h.client.attach('S');
    await tick();
    assert.deepEqual(h.sock().request('session.attach').params, { channel: 1, session: 'S' });
    h.sock().respond('session.attach', { session: 'S', channel: 1, offset: 0, lost: 0, end: 5, pid: 1, cols: 80, rows: 24, exit: { code: 3, signal: null } });
    const ch = await p;
    const rec = record(ch);
    assert.deepEqual(rec.events, []);
    h.sock().output(1, 'bye\r\n');
    h.sock().text({ jsonrpc: '2.0', method: 'session.exit', params: { channel: 1, session: 'S', code: 3, signal: null } });
    assert.deepEqual(rec.events, [
      ['data', 5],
      ['exit', { code: 3, signal: null }],
    ]);
    assert.deepEqual(ch.exit, { code: 3, signal: null });
    h.client.close();
  });
});

describe('pipe sessions (protocol 1.4)', () => {
  it('declares capabilities.pipes; stderr frames reach the stderr listener in order, count in the offset, and are acknowledged', async () => {
    const { client, sock, ch } = await opened();
    const init = sock().request('initialize').params as { capabilities: Record<string, unknown> };
    assert.equal(init.capabilities['pipes'], true);
    const got: Array<[string, string]> = [];
    ch.listen({
      data: (b) => {
        got.push(['out', new TextDecoder().decode(b)]);
        ch.consumed(b.length);
      },
      stderr: (b) => {
        got.push(['err', new TextDecoder().decode(b)]);
        ch.consumed(b.length);
      },
    });
    sock().output(1, 'out1 ');
    sock().output(1, 'err1 ', FrameType.Stderr);
    sock().output(1, 'out2');
    assert.deepEqual(got, [
      ['out', 'out1 '],
      ['err', 'err1 '],
      ['out', 'out2'],
    ]);
    assert.equal(ch.offset, 14, 'both streams count in the offset');
    await until(() => sock().acks().reduce((a, b) => a + b, 0) === 14, 'acks of both streams');
    assert.equal(client.state, 'connected', 'a stderr frame is no protocol violation');
    const p = ch.closeStdin();
    await tick();
    assert.deepEqual(sock().request('session.closeStdin').params, { channel: 1 });
    sock().respond('session.closeStdin', { session: 'S', channel: 1 });
    await p;
    client.close();
  });

  it('without a stderr listener, stderr goes to data', async () => {
    const { client, sock, ch } = await opened();
    const rec = record(ch);
    sock().output(1, 'e', FrameType.Stderr);
    assert.deepEqual(rec.events, [['data', 1]]);
    client.close();
  });
});

describe('flow control', () => {
  it('batches acks to ackBytes, flushes the rest when idle, never acks unreceived bytes', async () => {
    const { client, sock, ch } = await opened({ flow: { ackBytes: 10 } });
    sock().output(1, 'x'.repeat(30));
    ch.consumed(3);
    ch.consumed(4);
    assert.deepEqual(sock().acks(), [], 'small acks wait for idle');
    await Promise.resolve();
    await Promise.resolve();
    assert.deepEqual(sock().acks(), [7], 'idle flush sends one batched ack');
    ch.consumed(12);
    assert.deepEqual(sock().acks(), [7, 12], '>= ackBytes acks at once');
    ch.consumed(1000);
    await tick();
    assert.deepEqual(sock().acks(), [7, 12, 11], 'only received bytes are acknowledged');
    ch.consumed(5);
    await tick();
    assert.deepEqual(sock().acks(), [7, 12, 11]);
    client.close();
  });

  it('honours ackIdleMs > 0 as an idle timer', async () => {
    const { client, sock, ch } = await opened({ flow: { ackBytes: 100 }, ackIdleMs: 20 });
    sock().output(1, 'x'.repeat(50));
    ch.consumed(10);
    await tick();
    assert.deepEqual(sock().acks(), []);
    ch.consumed(10);
    await until(() => sock().acks().length > 0, 'idle ack');
    assert.deepEqual(sock().acks(), [20]);
    client.close();
  });

  it('splits input into frames of at most maxInputBytes (header included), in order', async () => {
    const { client, sock, ch } = await opened({ limits: { maxInputBytes: 9 } });
    assert.ok(ch.write('abcdefghij'));
    const frames = sock().frames(FrameType.Input);
    assert.deepEqual(
      frames.map((f) => [f.channel, String.fromCharCode(...f.payload)]),
      [
        [1, 'abcd'],
        [1, 'efgh'],
        [1, 'ij'],
      ],
    );
    ch.write(new Uint8Array([0xe2, 0x82, 0xac, 0x0d, 0x0a])); // bytes go as they are
    assert.deepEqual(
      sock().frames(FrameType.Input).slice(3).map((f) => f.payload),
      [[0xe2, 0x82, 0xac, 0x0d], [0x0a]],
    );
    for (const m of sock().sent) if (typeof m !== 'string' && m[0] === FrameType.Input) assert.ok(m.length <= 9);
    // a 150000-byte paste with the default 65536 limit: 3 frames, in order, nothing lost
    assert.equal(inputChunkBytes(65536), 65531);
    const big = new Uint8Array(150000).map((_, i) => i % 251);
    const before = sock().frames(FrameType.Input).length;
    client.limits.maxInputBytes = 65536;
    ch.write(big);
    const bigFrames = sock().frames(FrameType.Input).slice(before);
    assert.deepEqual(bigFrames.map((f) => f.payload.length), [65531, 65531, 18938]);
    assert.deepEqual(bigFrames.flatMap((f) => f.payload), [...big]);
    client.close();
  });

  it('a resize or signal of a bound channel goes out before input written after it', async () => {
    const { client, sock, ch } = await opened();
    const r = ch.resize(100, 30);
    ch.write('stty size\r');
    const s = ch.signal('INT');
    ch.write('x');
    const order = sock().sent.slice(-4).map((m) =>
      typeof m === 'string' ? (JSON.parse(m) as JsonRpcRequest).method : String.fromCharCode(...decodeFrame(m)!.payload),
    );
    assert.deepEqual(order, ['session.resize', 'stty size\r', 'session.signal', 'x']);
    assert.deepEqual(sock().request('session.resize').params, { channel: 1, cols: 100, rows: 30 });
    sock().respond('session.resize', { cols: 100, rows: 30 });
    sock().respond('session.signal', {});
    assert.deepEqual(await r, { cols: 100, rows: 30 });
    await s;
    client.close();
  });
});

describe('leaving', () => {
  it('close() detaches bound channels before it closes the socket', async () => {
    const h = await opened();
    const s = h.sock();
    h.client.close();
    assert.deepEqual(
      s.requests().filter((r) => r.method === 'session.detach').map((r) => r.params),
      [{ channel: 1 }],
    );
    assert.equal(h.client.state, 'closed');
  });

  it('close() while reconnecting sends nothing on the lost socket', async () => {
    const h = await opened();
    const first = h.sock();
    first.drop();
    assert.equal(h.client.state, 'reconnecting');
    const sent = first.sent.length;
    h.client.close();
    assert.equal(first.sent.length, sent);
  });

  it('retries at least every quarter of the resume hold while it may run, then backs off', () => {
    const opts = { initialDelayMs: 250, maxDelayMs: 10_000, multiplier: 2, jitter: 0 };
    const top = () => 0;
    assert.equal(reconnectDelay(10, opts, top, 10_000, 0), 2_500, 'within the hold');
    assert.equal(reconnectDelay(10, opts, top, 10_000, 9_999), 2_500);
    assert.equal(reconnectDelay(10, opts, top, 10_000, 10_000), 10_000, 'the hold is over');
    assert.equal(reconnectDelay(10, opts, top, 0, 0), 10_000, 'no hold');
    assert.equal(reconnectDelay(0, opts, top, 10_000, 0), 250, 'the cap never raises a delay');
    const jittered = reconnectDelay(10, { ...opts, jitter: 0.5 }, () => 1, 10_000, 0);
    assert.equal(jittered, 1_250, 'jitter applies after the cap');
  });
});

describe('reconnect', () => {
  it('checkConnection: a socket that answers nothing is abandoned and the channels re-attach; one that answers stays', async () => {
    const h = await opened();
    const first = h.sock();
    h.client.checkConnection(20);
    await tick();
    first.respond('session.list', { sessions: [] });
    await new Promise((r) => setTimeout(r, 40));
    assert.equal(h.sockets.length, 1, 'a socket that answered stays');
    assert.equal(h.client.state, 'connected');

    h.client.checkConnection(20); // the network lost the socket silently: no answer, no close
    await until(() => h.client.state === 'reconnecting', 'the silent socket abandoned');
    await until(() => h.sockets.length === 2, 'a new socket');
    await h.handshake();
    assert.deepEqual(h.sock().request('session.attach').params, { channel: 1, session: 'S', from: 0, cols: 80, rows: 24 });
    h.client.close();
  });

  it('re-initializes and re-attaches every channel from its offset; no stale acks', async () => {
    const h = await opened({ flow: { ackBytes: 1000 } });
    const { client, ch } = h;
    const rec = record(ch);
    const first = h.sock();
    first.output(1, 'x'.repeat(25));
    first.text({ jsonrpc: '2.0', method: 'session.gap', params: { channel: 1, lost: 5 } });
    first.output(1, 'y'.repeat(10));
    assert.equal(ch.offset, 40);
    ch.consumed(20);
    const inflight = client.list();
    first.drop();
    await assert.rejects(inflight, (e: unknown) => e instanceof MuxError && e.kind === 'disconnected');
    assert.equal(client.state, 'reconnecting');
    assert.equal(ch.state, 'unbound');
    assert.deepEqual(first.acks(), [], 'consumed bytes of a dropped socket are never acked');

    // typed while disconnected: queued, sent after the re-attach
    assert.ok(ch.write('ls\r'));

    await until(() => h.sockets.length === 2, 'a new socket');
    const second = h.sock();
    second.open();
    assert.equal(second.requests()[0]!.method, 'initialize');
    second.respond('initialize', initResult({}, { ackBytes: 1000 }));
    await tick();
    const attach = second.request('session.attach');
    // The channel's own size (the opener's) counts again for the window-size policy.
    assert.deepEqual(attach.params, { channel: 1, session: 'S', from: 40, cols: 80, rows: 24 });
    assert.equal(client.state, 'reconnecting', 'connected only once every channel is re-attached');
    second.respond('session.attach', { session: 'S', channel: 1, offset: 40, lost: 0, end: 40, pid: 42, cols: 80, rows: 24, exit: null });
    await client.whenReady();
    assert.equal(client.state, 'connected');
    assert.equal(ch.state, 'bound');
    assert.deepEqual(
      second.frames(FrameType.Input).map((f) => String.fromCharCode(...f.payload)),
      ['ls\r'],
    );

    // The 15 old bytes consumed now belong to the old binding: not acked on the new socket.
    ch.consumed(15);
    second.output(1, 'z'.repeat(8));
    assert.equal(ch.offset, 48);
    ch.consumed(8);
    client.flushAcks();
    assert.deepEqual(second.acks(), [8]);
    assert.deepEqual(rec.events.slice(-2), [
      ['reattached', 40],
      ['data', 8],
    ]);
    assert.deepEqual(h.states, ['connecting', 'connected', 'reconnecting', 'connected']);
    client.close();
  });

  it('reports bytes the ring dropped while disconnected as a gap', async () => {
    const h = await opened();
    const rec = record(h.ch);
    h.sock().output(1, 'x'.repeat(10));
    h.sock().drop();
    await until(() => h.sockets.length === 2, 'a new socket');
    await h.handshake();
    h.sock().respond('session.attach', { session: 'S', channel: 1, offset: 500, lost: 490, end: 600, pid: 42, cols: 80, rows: 24, exit: null });
    await h.client.whenReady();
    assert.equal(h.ch.offset, 500);
    h.sock().output(1, 'y');
    assert.equal(h.ch.offset, 501);
    assert.deepEqual(rec.events, [
      ['data', 10],
      ['reattached', 500],
      ['gap', 490],
      ['data', 1],
    ]);
    h.client.close();
  });

  it('a session gone while disconnected closes its channel', async () => {
    const h = await opened();
    const rec = record(h.ch);
    h.sock().drop();
    await until(() => h.sockets.length === 2, 'a new socket');
    await h.handshake();
    h.sock().fail('session.attach', -32001, 'unknown_session');
    await h.client.whenReady();
    assert.equal(h.ch.state, 'closed');
    assert.deepEqual(rec.events, [['closed', 'unknown_session']]);
    assert.equal(h.client.channels.size, 0);
    h.client.close();
  });

  it('a detached channel is not re-attached and its consumed bytes are not acked', async () => {
    const h = await opened({ flow: { ackBytes: 1 } });
    h.sock().output(1, 'abc');
    const d = h.ch.detach();
    await tick();
    assert.deepEqual(h.sock().request('session.detach').params, { channel: 1 });
    h.sock().output(1, 'de'); // still delivered: sent before the detach response
    h.sock().respond('session.detach', { session: 'S', channel: 1 });
    await d;
    assert.equal(h.ch.state, 'detached');
    h.ch.consumed(5);
    assert.deepEqual(h.sock().acks(), []);
    assert.equal(h.ch.write('x'), false);
    h.sock().drop();
    await until(() => h.sockets.length === 2, 'a new socket');
    await h.handshake();
    await h.client.whenReady();
    assert.equal(h.sock().requests().filter((r) => r.method === 'session.attach').length, 0);
    h.client.close();
  });

  it('session.closed ends the binding', async () => {
    const h = await opened();
    const rec = record(h.ch);
    h.sock().text({ jsonrpc: '2.0', method: 'session.exit', params: { channel: 1, session: 'S', code: -1, signal: 'HUP' } });
    h.sock().text({ jsonrpc: '2.0', method: 'session.closed', params: { channel: 1, session: 'S', reason: 'killed' } });
    h.sock().output(1, 'late');
    assert.deepEqual(rec.events, [
      ['exit', { code: -1, signal: 'HUP' }],
      ['closed', 'killed'],
    ]);
    assert.equal(h.ch.offset, 0);
    h.sock().drop();
    await until(() => h.sockets.length === 2, 'a new socket');
    await h.handshake();
    await h.client.whenReady();
    assert.equal(h.sock().requests().filter((r) => r.method === 'session.attach').length, 0);
    h.client.close();
  });
});

// ---------------------------------------------------------------------------------------------

/** Records data events with their replay flag. */
function recordReplay(ch: Channel): Array<[string, boolean]> {
  const out: Array<[string, boolean]> = [];
  ch.listen({ data: (b, _c, replay) => out.push([new TextDecoder().decode(b), replay === true]) });
  return out;
}

describe('replay and live (protocol 1.1)', () => {
  it('attach: bytes below live are replay, a frame straddling live is split, the rest is live', async () => {
    const h = harness();
    void h.client.connect();
    await h.handshake();
    const p = h.client.attach('S', 0, { cols: 100, rows: 30 });
    await tick();
    assert.deepEqual(h.sock().request('session.attach').params, { channel: 1, session: 'S', from: 0, cols: 100, rows: 30 });
    h.sock().respond('session.attach', { session: 'S', channel: 1, offset: 2, live: 10, lost: 2, end: 10, pid: 1, cols: 90, rows: 30, exit: null });
    const ch = await p;
    assert.equal(ch.live, 10);
    assert.equal(ch.replaying, true);
    assert.deepEqual([ch.cols, ch.rows], [90, 30], 'the applied size comes from the result');
    const got = recordReplay(ch);
    h.sock().output(1, 'abc'); // 2..5
    h.sock().output(1, 'defghij'); // 5..12: straddles 10
    assert.equal(ch.replaying, false);
    h.sock().output(1, 'k');
    assert.deepEqual(got, [
      ['abc', true],
      ['defgh', true],
      ['ij', false],
      ['k', false],
    ]);
    assert.equal(ch.offset, 13);
    h.client.close();
  });

  it('a 1.0 result without live takes end; session.open has no replay', async () => {
    const h = harness();
    void h.client.connect();
    await h.handshake();
    const p = h.client.attach('S');
    await tick();
    h.sock().respond('session.attach', { session: 'S', channel: 1, offset: 0, lost: 0, end: 3, pid: 1, cols: 80, rows: 24, exit: null });
    const ch = await p;
    assert.equal(ch.live, 3);
    const got = recordReplay(ch);
    h.sock().output(1, 'abcd');
    assert.deepEqual(got, [
      ['abc', true],
      ['d', false],
    ]);
    const q = h.client.open({ cols: 80, rows: 24 });
    await tick();
    h.sock().respond('session.open', { session: 'T', channel: 2, pid: 2, offset: 0, live: 0 });
    const ch2 = await q;
    const got2 = recordReplay(ch2);
    h.sock().output(2, 'x');
    assert.deepEqual(got2, [['x', false]]);
    h.client.close();
  });

  it('the re-attach after a reconnect replays what it resumes as replay', async () => {
    const h = await opened();
    const got = recordReplay(h.ch);
    h.sock().output(1, 'ab');
    h.sock().drop();
    await until(() => h.sockets.length === 2, 'a new socket');
    h.sock().open();
    h.sock().respond('initialize', initResult());
    await tick();
    h.sock().respond('session.attach', { session: 'S', channel: 1, offset: 2, live: 6, lost: 0, end: 6, pid: 42, cols: 80, rows: 24, exit: null });
    await h.client.whenReady();
    h.sock().output(1, 'cdefg');
    assert.deepEqual(got, [
      ['ab', false],
      ['cdef', true],
      ['g', false],
    ]);
    h.client.close();
  });
});

describe('session size (protocol 1.1)', () => {
  it('session.size reaches the listener once per change; resize resolves to the applied size', async () => {
    const { client, sock, ch } = await opened();
    assert.deepEqual([ch.cols, ch.rows], [80, 24]);
    const sizes: Array<[number, number]> = [];
    ch.listen({ size: (c, r) => sizes.push([c, r]) });
    sock().text({ jsonrpc: '2.0', method: 'session.size', params: { channel: 1, session: 'S', cols: 92, rows: 35 } });
    assert.deepEqual(sizes, [[92, 35]]);
    assert.deepEqual([ch.cols, ch.rows], [92, 35]);
    const r = ch.resize(120, 40);
    // Under `smallest` the other viewer's size stays: the result says so.
    sock().respond('session.resize', { cols: 92, rows: 35 });
    assert.deepEqual(await r, { cols: 92, rows: 35 });
    assert.deepEqual(sizes, [[92, 35]], 'an unchanged size is not reported again');
    const r2 = ch.resize(60, 20);
    sock().text({ jsonrpc: '2.0', method: 'session.size', params: { channel: 1, session: 'S', cols: 60, rows: 20 } });
    sock().respond('session.resize', { cols: 60, rows: 20 });
    await r2;
    assert.deepEqual(sizes, [
      [92, 35],
      [60, 20],
    ]);
    // another channel's notification is not ours
    sock().text({ jsonrpc: '2.0', method: 'session.size', params: { channel: 7, session: 'X', cols: 1, rows: 1 } });
    assert.deepEqual([ch.cols, ch.rows], [60, 20]);
    client.close();
  });
});

describe('terminal replies', () => {
  it('isTerminalReply matches the replies of docs/protocol.md and not typing', () => {
    const replies = [
      '\x1b[?62;22c', '\x1b[>0;276;0c', '\x1b[=0c', '\x1b[c', '\x1b[2;1R', '\x1b[?2;1R', '\x1b[0n',
      '\x1b[?2004;2$y', '\x1b[2$y', '\x1b[8;24;80t', '\x1b]10;rgb:d4d4/d4d4/d4d4\x07',
      '\x1b]11;rgb:1e1e/1f1f/2222\x1b\\', '\x1bP>|xterm.js(6.0.0)\x1b\\', '\x1bP1$r0m\x1b\\',
      '\x9b?62c', '\x9d10;rgb:0/0/0\x9c', '\x90>|x\x9c',
    ];
    for (const r of replies) assert.equal(isTerminalReply(r), true, JSON.stringify(r));
    const typed = ['a', 'ls\r', '\x1b[A', '\x1b[1;5D', '\x1b', '\x1bOP', '\x1b[200~paste\x1b[201~', 'c', '\x1b[3~', '\x03'];
    for (const t of typed) assert.equal(isTerminalReply(t), false, JSON.stringify(t));
  });

  it('ReplayGuard drops replies until the replay is parsed and keeps keystrokes', () => {
    const writes: Array<{ bytes: string; parsed: () => void }> = [];
    const guard = new ReplayGuard((b, parsed) => writes.push({ bytes: new TextDecoder().decode(b), parsed }));
    const sent: string[] = [];
    const input = (d: string) => {
      if (guard.allows(d)) sent.push(d);
    };
    const acked: string[] = [];
    const enc = (s: string) => new TextEncoder().encode(s);
    guard.output(enc('\x1b[c'), true, () => acked.push('r1'));
    guard.output(enc('\x1b]11;?\x07'), true, () => acked.push('r2'));
    guard.output(enc('\x1b[6n'), false, () => acked.push('l1'));
    assert.equal(guard.replaying, true);
    // The terminal parses the first write and answers synchronously; the user types meanwhile.
    input('\x1b[?62;22c');
    writes[0]!.parsed();
    input('x');
    input('\x1b]11;rgb:1e1e/1f1f/2222\x07');
    writes[1]!.parsed();
    assert.equal(guard.replaying, false);
    input('\x1b[5;1R'); // the reply to the live CPR query is sent
    writes[2]!.parsed();
    assert.deepEqual(sent, ['x', '\x1b[5;1R']);
    assert.deepEqual(acked, ['r1', 'r2', 'l1']);
    assert.equal(guard.dropped, 2);
  });
});

// ---------------------------------------------------------------------------------------------
// A hostile gateway (a fake is right here: a real gateway cannot be made to break the protocol).
// Each violation ends the client for good with a MuxError of kind `protocol`: no reconnect, the
// channel closed with the reason `protocol`, nothing of the bad message applied.

/** Checks that the client ended with a protocol violation and ch closed with it. */
function assertViolation(client: MuxClient, ch: Channel | null, errors: MuxError[], what: string): void {
  assert.equal(client.state, 'closed', `${what}: state`);
  assert.equal(client.protocolError?.kind, 'protocol', `${what}: protocolError ${client.protocolError?.message}`);
  assert.ok(errors.some((e) => e.kind === 'protocol'), `${what}: no protocol error event`);
  if (ch) {
    assert.equal(ch.state, 'closed', `${what}: channel state`);
    assert.equal(ch.closeReason, 'protocol', `${what}: close reason`);
  }
}

describe('hostile gateway', () => {
  it('a gap below 1 byte, past 2^53 or of the wrong type ends the client; the offset stays sane', async () => {
    for (const lost of [-1, 0, 2 ** 63, 2 ** 53, '7', 1.5, null]) {
      const { client, sock, ch, sockets } = await opened();
      const errors: MuxError[] = [];
      client.on('error', (e) => errors.push(e));
      sock().output(1, 'ok');
      sock().text({ jsonrpc: '2.0', method: 'session.gap', params: { channel: 1, lost } });
      assertViolation(client, ch, errors, `lost ${String(lost)}`);
      assert.equal(ch.offset, 2, `lost ${String(lost)}: offset`);
      await sleep(10);
      assert.equal(sockets.length, 1, `lost ${String(lost)}: reconnected`);
    }
  });

  it('output beyond flow.window unacknowledged ends the client; acknowledged output makes room', async () => {
    const window = 64 * 1024;
    const { client, sock, ch } = await opened({ flow: { window, ackBytes: 16 * 1024 } });
    const errors: MuxError[] = [];
    client.on('error', (e) => errors.push(e));
    let received = 0;
    ch.listen({ data: (b) => (received += b.length) });
    const frame = new Uint8Array(32 * 1024);
    // Acknowledged bytes make room: 4 windows' worth, each consumed as it comes.
    for (let i = 0; i < 8; i++) {
      sock().output(1, frame);
      ch.consumed(frame.length);
    }
    assert.equal(client.state, 'connected');
    // A client that stops consuming: the window, then the byte past it.
    for (let i = 0; i < 6400 && (client.state as string) !== 'closed'; i++) sock().output(1, frame); // 200 MiB offered
    assertViolation(client, ch, errors, 'flood');
    const buffered = received - 8 * frame.length;
    assert.ok(buffered <= window, `buffered ${buffered} past the window ${window}`);
    console.log(`# FIGURE window flood: ${buffered} bytes taken unacknowledged of a ${window}-byte window`);
  });

  it('messages larger than maxMessageBytes or an output frame end the client before they are parsed', async () => {
    for (const big of ['text', 'binary'] as const) {
      const { client, sock, ch } = await opened();
      const errors: MuxError[] = [];
      client.on('error', (e) => errors.push(e));
      if (big === 'text') sock().onmessage?.({ data: '{"jsonrpc":"2.0","method":"x","params":"' + 'y'.repeat(17 * 1024 * 1024) + '"}' });
      else sock().output(1, new Uint8Array(32 * 1024 + 1));
      assertViolation(client, ch, errors, big);
    }
  });

  it('truncated and malformed messages, and frames the gateway never sends, end the client', async () => {
    const cases: Array<[string, (s: FakeSocket) => void]> = [
      ['truncated JSON', (s) => s.onmessage?.({ data: '{"jsonrpc":"2.0","method":"session.ex' })],
      ['an array', (s) => s.onmessage?.({ data: '[1,2]' })],
      ['a short frame', (s) => s.onmessage?.({ data: new Uint8Array([1, 0, 0]).buffer })],
      ['an input frame', (s) => s.onmessage?.({ data: encodeFrame(FrameType.Input, 1, new Uint8Array([1])).buffer })],
      ['a frame of type 9', (s) => s.onmessage?.({ data: new Uint8Array([9, 0, 0, 0, 1]).buffer })],
      ['output on channel 0', (s) => s.onmessage?.({ data: new Uint8Array([1, 0, 0, 0, 0, 65]).buffer })],
      ['exit code as a string', (s) => s.text({ jsonrpc: '2.0', method: 'session.exit', params: { channel: 1, code: '0' } })],
      ['closed reason as a number', (s) => s.text({ jsonrpc: '2.0', method: 'session.closed', params: { channel: 1, reason: 3 } })],
      ['size of 0 columns', (s) => s.text({ jsonrpc: '2.0', method: 'session.size', params: { channel: 1, cols: 0, rows: 24 } })],
      ['error as a string', (s) => s.text({ jsonrpc: '2.0', id: null, error: 'x' })],
    ];
    for (const [name, send] of cases) {
      const { client, sock, ch } = await opened();
      const errors: MuxError[] = [];
      client.on('error', (e) => errors.push(e));
      send(sock());
      assertViolation(client, ch, errors, name);
    }
  });

  it('an unknown notification, or one for a channel it does not have, is not a violation', async () => {
    const { client, sock } = await opened();
    sock().text({ jsonrpc: '2.0', method: 'session.future', params: 'anything' });
    sock().text({ jsonrpc: '2.0', method: 'session.gap', params: { channel: 9, lost: 5 } });
    assert.equal(client.state, 'connected');
    client.close();
  });

  it('wrongly typed results reject with kind protocol and end the client', async () => {
    const cases: Array<[string, string, unknown, (c: MuxClient) => Promise<unknown>]> = [
      ['list entries of the wrong type', 'session.list', { sessions: [1, 'x'] }, (c) => c.list()],
      ['list entry with a numeric name', 'session.list', { sessions: [{ session: 's', name: 7 }] }, (c) => c.list()],
      ['list as a string', 'session.list', { sessions: 'x' }, (c) => c.list()],
      ['kill result as an array', 'session.kill', [], (c) => c.kill('S')],
      ['attach offset past end', 'session.attach', { session: 's', channel: 2, offset: 10, live: 5, end: 5, lost: 0 }, (c) => c.attach('s')],
      ['attach offset before from', 'session.attach', { session: 's', channel: 2, offset: 3, live: 9, end: 9, lost: 0 }, (c) => c.attach('s', 5)],
      ['attach offset past 2^53', 'session.attach', { session: 's', channel: 2, offset: 2 ** 60, live: 2 ** 60, end: 2 ** 60, lost: 0 }, (c) => c.attach('s')],
    ];
    for (const [name, method, result, call] of cases) {
      const { client, sock, ch } = await opened();
      const errors: MuxError[] = [];
      client.on('error', (e) => errors.push(e));
      const p = call(client);
      await tick();
      sock().respond(method, result);
      await assert.rejects(p, (e: unknown) => e instanceof MuxError && e.kind === 'protocol', name);
      assertViolation(client, ch, errors, name);
    }
  });

  it('an initialize or open result out of range ends the client', async () => {
    for (const [name, flow] of [['window over 64 MiB', { window: 2 ** 30 }], ['negative window', { window: -1 }]] as const) {
      const h = harness({ flow });
      const errors: MuxError[] = [];
      h.client.on('error', (e) => errors.push(e));
      const ready = h.client.connect().then(() => null, (e: unknown) => e);
      await h.handshake();
      const err = await ready;
      assert.ok(err instanceof MuxError && err.kind === 'protocol', `${name}: ${String(err)}`);
      assertViolation(h.client, null, errors, name);
    }
    const h = harness();
    const ready = h.client.connect();
    await h.handshake();
    await ready;
    const p = h.client.open({ cols: 80, rows: 24 });
    await tick();
    h.sock().respond('session.open', { session: 'S', channel: 1, offset: -1 });
    await assert.rejects(p, (e: unknown) => e instanceof MuxError && e.kind === 'protocol');
  });

  it('a 40 MiB message from a real socket is refused by ws before it is buffered (maxPayload)', async () => {
    const { WebSocketServer, default: WebSocket } = await import('ws');
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    await new Promise<void>((r) => wss.once('listening', () => r()));
    const big = Buffer.alloc(40 * 1024 * 1024, 0x79);
    wss.on('connection', (s) => {
      s.on('message', (m) => {
        const req = JSON.parse(String(m));
        s.send(JSON.stringify({ jsonrpc: '2.0', id: req.id, result: initResult() }));
        s.send(big, { binary: false });
      });
    });
    const port = (wss.address() as { port: number }).port;
    const rss0 = process.memoryUsage().rss;
    const client = new MuxClient(`ws://127.0.0.1:${port}/ws`, {
      webSocketFactory: (url, protocols, o) => new WebSocket(url, protocols, { maxPayload: o.maxPayload }) as unknown as WebSocketLike,
    });
    const errors: MuxError[] = [];
    client.on('error', (e) => errors.push(e));
    await client.connect().catch(() => undefined);
    await until(() => client.state === 'closed', 'the client to end', 10_000);
    const rss1 = process.memoryUsage().rss;
    assertViolation(client, null, errors, '40 MiB');
    console.log(`# FIGURE 40 MiB message over ws with maxPayload 16 MiB: RSS grew ${((rss1 - rss0) / 2 ** 20).toFixed(1)} MiB (the server's 40 MiB buffer was allocated before)`);
    for (const s of wss.clients) s.terminate();
    await new Promise<void>((r) => wss.close(() => r()));
  });
});
