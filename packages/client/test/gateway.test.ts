// Integration tests of the client against the real gateway binary (MUXTERM_BIN), in Node, with
// the `ws` package as the WebSocket: what a plugin or a script sees.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { MuxClient, ReplayGuard, isMuxError, isTerminalReply, parseCast } from '../src/index';
import { Gateway, Output, expectedSeq } from './harness';

const bin = process.env['MUXTERM_BIN'];

describe('@muxterm/client against the gateway binary', { skip: bin ? false : 'MUXTERM_BIN is unset (build with `make build`, then MUXTERM_BIN=$PWD/bin/gateway)' }, () => {
  let g: Gateway;
  const clients: MuxClient[] = [];
  const connect = async (): Promise<{ client: MuxClient; sockets: import('ws').WebSocket[] }> => {
    const c = g.client();
    clients.push(c.client);
    await c.client.connect();
    return c;
  };

  before(async () => {
    g = await Gateway.start(bin!, '--allow-cmd', 'sh');
  });
  after(async () => {
    for (const c of clients) c.close();
    if (!g) return; // before failed: Gateway.start stopped it
    const code = await g.stop();
    assert.equal(code, 0, `gateway exit code after SIGTERM\n${g.output()}`);
    assert.ok(!g.output().includes(g.token), 'the gateway printed its token');
  });

  it('opens a shell, types into it and reads its output', async () => {
    const { client } = await connect();
    assert.equal(client.state, 'connected');
    assert.ok(client.server, 'initialize result carries the server');
    const ch = await client.open({ cols: 80, rows: 24 });
    assert.match(ch.session, /\S/);
    assert.equal(ch.state, 'bound');
    const out = new Output(ch);
    // The echo shows `$((6*7))`; only the shell's output has 42.
    ch.write('echo "mux$((6*7))term"\r');
    await out.until('the shell to print mux42term', () => out.text().includes('mux42term'));
    assert.equal(ch.offset, out.length, 'offset counts the bytes received');
    await ch.kill();
  });

  it('runs a program on pipes: stdin closed, stdout and stderr apart, the exit (protocol 1.4)', async () => {
    const { client } = await connect();
    const ch = await client.open({ cols: 80, rows: 24, tty: false, cmd: ['sh', '-c', 'cat; echo err >&2; exit 4'] });
    assert.equal(ch.state, 'bound');
    const out: string[] = [];
    const err: string[] = [];
    let exit: { code: number; signal: string | null } | null = null;
    const done = new Promise<void>((resolve) => {
      ch.listen({
        data: (b) => {
          out.push(new TextDecoder().decode(b));
          ch.consumed(b.length);
        },
        stderr: (b) => {
          err.push(new TextDecoder().decode(b));
          ch.consumed(b.length);
        },
        exit: (s) => {
          exit = s;
          resolve();
        },
      });
    });
    ch.write('abc');
    await ch.closeStdin();
    await done;
    assert.equal(out.join(''), 'abc', 'stdout: cat printed its input, without an echo');
    assert.equal(err.join(''), 'err\n');
    assert.deepEqual(exit, { code: 4, signal: null });
    await ch.kill();
  });

  it('resizes the PTY: stty size follows', async () => {
    const { client } = await connect();
    const ch = await client.open({ cols: 80, rows: 24 });
    const out = new Output(ch);
    ch.write('stty size\r');
    await out.until('stty size = 24 80', () => /\b24 80\r?\n/.test(out.text()));
    const r = await ch.resize(132, 37);
    assert.deepEqual(r, { cols: 132, rows: 37 });
    ch.write('stty size\r');
    await out.until('stty size = 37 132', () => /\b37 132\r?\n/.test(out.text()));
    await ch.kill();
  });

  it('detaches (the session keeps running) and reattaches with a replay', async () => {
    const { client } = await connect();
    const ch = await client.open({ cols: 80, rows: 24, name: 'detach-me' });
    const out = new Output(ch);
    ch.write('echo "before $((40+2))"\r');
    await out.until('before 42', () => out.text().includes('before 42'));
    await ch.detach();
    assert.equal(ch.state, 'detached');
    const info = (await client.list()).find((s) => s.session === ch.session);
    assert.ok(info, 'session.list still has the detached session');
    assert.equal(info.name, 'detach-me');
    assert.equal(info.viewers, 0);
    assert.equal(info.exit, null);

    // From another connection, as a second window would.
    const { client: other } = await connect();
    const ch2 = await other.attach(ch.session, 0);
    assert.equal(ch2.attachResult?.lost, 0);
    assert.equal(ch2.attachResult?.cols, 80);
    const out2 = new Output(ch2);
    await out2.until('the replay to hold before 42', () => out2.text().includes('before 42'));
    ch2.write('echo "after $((40+3))"\r');
    await out2.until('after 43', () => out2.text().includes('after 43'));
    await ch2.kill();
  });

  it('resumes byte-exact after a dropped socket (seq split across the drop)', async () => {
    const { client, sockets } = await connect();
    const lines = 100_000;
    const want = expectedSeq(lines); // 588,895 bytes: within the default 1 MiB ring
    const ch = await client.open({
      cols: 80,
      rows: 24,
      cmd: ['sh', '-c', `stty raw -echo && seq 1 ${lines} && exec sleep 30`],
    });
    const out = new Output(ch);
    await out.until('100,000 bytes before the drop', () => out.length >= 100_000);
    const before = out.length;
    assert.ok(before < want.length, 'the drop is mid-stream');
    const first = sockets[0]!;
    first.terminate(); // no close handshake: as a lost network would
    await out.until('the re-attach', () => out.reattaches.length > 0);
    const r = out.reattaches[0]!;
    assert.equal(r.offset, before, 'resumed at what was received');
    assert.equal(r.lost, 0, 'nothing lost across the drop');
    assert.ok(sockets.length >= 2, 'the client opened a new socket');
    await out.until('all of seq', () => out.length >= want.length, 30_000);
    assert.equal(out.length, want.length);
    assert.ok(out.bytes().equals(want), 'the resumed stream is byte-exact');
    assert.equal(out.gaps, 0);
    assert.equal(ch.offset, want.length);
    await ch.kill();
  });

  it('kills a session: the result and session.closed', async () => {
    const { client } = await connect();
    const ch = await client.open({ cols: 80, rows: 24, cmd: ['sh', '-c', 'echo ready; exec sleep 60'] });
    const out = new Output(ch);
    await out.until('ready', () => out.text().includes('ready'));
    const r = await ch.kill();
    assert.equal(r.session, ch.session);
    assert.equal(r.status, 'killed');
    assert.deepEqual(r.exit, { code: -1, signal: 'HUP' });
    assert.deepEqual(r.signals, ['HUP']);
    assert.equal(r.escapees, 0);
    assert.equal(r.survivors, 0);
    assert.ok(r.duration_ms >= 0);
    assert.ok(r.offset >= out.length, `offset ${r.offset} >= ${out.length} bytes received`);
    await out.until('session.closed', () => out.closed !== null);
    assert.equal(out.closed, 'killed');
    assert.equal(ch.state, 'closed');
    assert.equal((await client.list()).find((s) => s.session === ch.session), undefined);
    await assert.rejects(client.kill('no-such-session'), (e: unknown) => isMuxError(e, 'unknown_session'));
  });

  it('reports the exit code of a program that ends', async () => {
    const { client } = await connect();
    const ch = await client.open({ cols: 80, rows: 24, cmd: ['sh', '-c', 'echo bye; exit 3'] });
    const out = new Output(ch);
    await out.until('session.exit', () => out.exit !== null);
    assert.deepEqual(out.exit, { code: 3, signal: null });
    assert.ok(out.text().includes('bye'), 'the output before the exit arrived first');
    const r = await ch.kill();
    assert.equal(r.status, 'exited');
    assert.deepEqual(r.exit, { code: 3, signal: null });
  });

  it('reports live: the attach replays below it, output after it is live', async () => {
    const { client } = await connect();
    const ch = await client.open({ cols: 80, rows: 24, cmd: ['sh', '-c', 'echo before; read x; echo "after $x"; exec sleep 60'] });
    const out = new Output(ch);
    await out.until('before', () => out.text().includes('before'));
    assert.equal(out.replayBytes, 0, 'session.open has no replay');
    const { client: other } = await connect();
    const ch2 = await other.attach(ch.session, 0);
    const r = ch2.attachResult!;
    assert.equal(typeof r.live, 'number');
    assert.equal(r.live, r.end);
    assert.equal(ch2.live, r.live);
    const out2 = new Output(ch2);
    await out2.until('the replay', () => out2.length >= r.live! - r.offset);
    assert.equal(out2.replayBytes, r.live! - r.offset, 'every byte below live is replay');
    ch2.write('42\r');
    await out2.until('after 42', () => out2.text().includes('after 42'));
    assert.equal(out2.replayBytes, r.live! - r.offset, 'output after the attach is live');
    await ch2.kill();
  });

  it('drops the terminal replies a replay causes and keeps keystrokes typed during it', async () => {
    const { client } = await connect();
    // DA1, OSC 10/11 and DECRQM queries, then every byte the program reads, one per line.
    const ch = await client.open({
      cols: 80,
      rows: 24,
      cmd: ['sh', '-c', 'printf "\\033[c\\033]10;?\\007\\033]11;?\\007\\033[?2004\\$p"; stty raw -echo; printf READY; exec od -An -tx1 -v -w1'],
    });
    const out = new Output(ch);
    await out.until('READY', () => out.text().includes('READY'));
    await ch.detach();

    // A second viewer with a terminal emulator that answers every query it parses, the way
    // xterm.js does: synchronously, while parsing; its write callback fires later.
    const { client: other } = await connect();
    const ch2 = await other.attach(ch.session, 0);
    const replies: string[] = [];
    const send = (d: string): void => {
      if (guard.allows(d)) ch2.write(d);
    };
    const guard = new ReplayGuard((bytes, parsed) => {
      const s = Buffer.from(bytes).toString('latin1');
      if (s.includes('\x1b[c')) replies.push('\x1b[?62;22c');
      if (s.includes('\x1b]10;?')) replies.push('\x1b]10;rgb:d4d4/d4d4/d4d4\x1b\\');
      if (s.includes('\x1b]11;?')) replies.push('\x1b]11;rgb:1e1e/1f1f/2222\x1b\\');
      if (s.includes('\x1b[?2004$p')) replies.push('\x1b[?2004;2$y');
      for (const r of replies.splice(0)) send(r);
      setTimeout(parsed, 5);
    });
    const out2: Buffer[] = [];
    let typed = false;
    ch2.listen({
      data: (b, _c, replay) => {
        out2.push(Buffer.from(b));
        guard.output(b, replay, () => ch2.consumed(b.length));
        if (replay && !typed) {
          typed = true;
          send('k'); // a keystroke during the replay
        }
      },
    });
    const text = () => Buffer.concat(out2).toString('latin1');
    const deadline = Date.now() + 10_000;
    while (!text().includes(' 6b')) {
      if (Date.now() > deadline) throw new Error(`no keystroke reached the program: ${JSON.stringify(text())}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(guard.dropped, 4, 'four replies to the replayed queries were dropped');
    ch2.write('z');
    while (!text().includes(' 7a')) {
      if (Date.now() > deadline) throw new Error(`no z: ${JSON.stringify(text())}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    const read = text().slice(text().indexOf('READY') + 5).match(/ [0-9a-f]{2}/g);
    assert.deepEqual(read, [' 6b', ' 7a'], 'the program read the keystrokes and nothing else');
    assert.ok(isTerminalReply('\x1b[?62;22c'));
    await ch2.kill();
  });

  it('close() detaches: the session survives the client', async () => {
    const { client } = await connect();
    const ch = await client.open({ cols: 80, rows: 24 });
    const id = ch.session;
    client.close();
    assert.equal(client.state, 'closed');
    const { client: other } = await connect();
    const info = (await other.list()).find((s) => s.session === id);
    assert.ok(info, 'the session outlives the closed client');
    await other.kill(id);
  });
});

describe('@muxterm/client: session.size under --window-size smallest', { skip: bin ? false : 'MUXTERM_BIN is unset' }, () => {
  let g: Gateway;
  const clients: MuxClient[] = [];
  before(async () => {
    g = await Gateway.start(bin!, '--allow-cmd', 'sh', '--window-size', 'smallest');
  });
  after(async () => {
    for (const c of clients) c.close();
    if (g) await g.stop();
  });

  it('a second viewer resizing smaller reaches the first as session.size, and its leaving restores it', async () => {
    const a = g.client();
    const b = g.client();
    clients.push(a.client, b.client);
    await a.client.connect();
    await b.client.connect();
    const chA = await a.client.open({ cols: 120, rows: 40 });
    const outA = new Output(chA);
    assert.deepEqual([chA.cols, chA.rows], [120, 40]);
    const chB = await b.client.attach(chA.session, undefined, { cols: 100, rows: 30 });
    assert.deepEqual([chB.cols, chB.rows], [100, 30], 'the attach result carries the applied size');
    await outA.until('session.size 100x30', () => outA.sizes.some(([c, r]) => c === 100 && r === 30));
    const r = await chB.resize(92, 35);
    assert.deepEqual(r, { cols: 92, rows: 35 }, 'per dimension, the smallest');
    await outA.until('session.size 92x35', () => outA.sizes.some(([c, r]) => c === 92 && r === 35));
    const applied = await chA.resize(130, 45);
    assert.deepEqual(applied, { cols: 92, rows: 35 }, 'the resize result is the applied size, not the asked one');
    await chB.detach();
    await outA.until('session.size back to 130x45', () => outA.sizes.some(([c, r]) => c === 130 && r === 45));
    assert.deepEqual([chA.cols, chA.rows], [130, 45]);
    chA.write('stty size\r');
    await outA.until('stty size 45 130', () => /\b45 130\r?\n/.test(outA.text()));
    await chA.kill();
  });
});

describe('@muxterm/client: recordings (a gateway run with --record)', { skip: bin ? false : 'MUXTERM_BIN is unset' }, () => {
  let g: Gateway;
  let dir: string;
  before(async () => {
    const { mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    dir = mkdtempSync(join(tmpdir(), 'muxterm-rec-'));
    g = await Gateway.start(bin!, '--allow-cmd', 'sh', '--record', dir, '--record-on-request');
  });
  after(async () => {
    if (g) await g.stop();
    const { rmSync } = await import('node:fs');
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('records a session that asks; the recording reads back whole, and parses to its output', async () => {
    const { client } = g.client();
    await client.connect();
    const ch = await client.open({ cols: 80, rows: 24, cmd: ['sh', '-c', "printf 'rec-one\\n'; printf 'rec-two\\n'"], record: true, name: 'rec' });
    const out = new Output(ch);
    await out.until('the program to print rec-two', () => out.text().includes('rec-two'));
    const list = await client.recordings();
    assert.equal(list.length, 1);
    assert.equal(list[0]!.recording, ch.session);
    assert.equal(list[0]!.name, 'rec');
    let cast = parseCast(await client.exportRecording(ch.session));
    for (let i = 0; i < 200 && !cast.events.some((e) => e.code === 'o' && e.data.includes('rec-two')); i++) {
      await new Promise((r) => setTimeout(r, 10)); // the gateway's recorder writes on its own goroutine
      cast = parseCast(await client.exportRecording(ch.session));
    }
    const text = cast.events.filter((e) => e.code === 'o').map((e) => e.data).join('');
    assert.equal(text, out.text(), 'the recording holds the output as the channel got it');
    const piece = await client.readRecording(ch.session, 2, 5);
    const whole = await client.exportRecording(ch.session);
    assert.deepEqual(piece.data, whole.slice(2, 7));
    await assert.rejects(client.readRecording('f'.repeat(32), 0, 10), (e: unknown) => isMuxError(e, 'unknown_session'));
    client.close();
  });
});
