// examples/npmclient/hello.mjs: the npm client in Node 20+ (docs/getting-started.md). Open a
// session, type a command into it, read its output, list the sessions, kill the one it opened.
import WebSocket from 'ws';
import { MuxClient } from '@muxterm/client';

const url = process.env.MUXTERM_URL ?? 'ws://127.0.0.1:8222/ws';
const token = process.env.MUXTERM_TOKEN;
const client = new MuxClient(url, {
  webSocketFactory: (u, protocols, { maxPayload }) =>
    new WebSocket(u, protocols, { headers: { Authorization: `Bearer ${token}` }, maxPayload }),
});
await client.connect();

const ch = await client.open({ cols: 80, rows: 24, name: 'hello-npm' });
const greeted = new Promise((resolve) => {
  let out = '';
  ch.listen({
    data: (bytes) => {
      out += Buffer.from(bytes).toString('utf8'); // bytes is a view, valid until the next event
      ch.consumed(bytes.length); // acknowledge it: the gateway sends more
      if (out.includes('hello from 42')) resolve();
    },
  });
});
ch.write('echo "hello from $((6*7))"\r');
await greeted;
console.log('session', ch.session, 'said hello from 42');

for (const s of await client.list()) console.log(s.session, s.name, `${s.cols}x${s.rows}`);
const r = await ch.kill();
console.log(r.status);
client.close();
