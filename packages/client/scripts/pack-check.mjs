// The package as an outsider gets it: `npm pack` (prepack builds dist/), then, in a fresh project
// in the system's temporary directory (outside the repository, so nothing resolves through it),
// `npm install` of the tarball, an import of `@muxterm/client` in Node, and a type-check of a
// consumer against the shipped index.d.ts under `moduleResolution: nodenext` with neither the
// DOM nor Node's types. The package's exported names are checked exactly: the values at run time,
// the type-only names by the consumer's import of each. Exits non-zero on the first failure;
// removes the directory either way.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const pkg = (await import(join(root, 'package.json'), { with: { type: 'json' } })).default;
// Everything src/index.ts exports: a name added or removed is a change to the package's API, made
// here on purpose (and in README.md), not by accident.
const VALUES = [
  'CastError', 'Channel', 'DEFAULT_BACKOFF', 'ErrorCode', 'FrameType', 'HEADER_BYTES', 'MAX_CAST_LINE', 'MAX_CHANNEL',
  'MAX_RECORDING_READ', 'MuxClient', 'MuxError', 'ReplayGuard', 'SUBPROTOCOL', 'backoffDelay', 'decodeFrame',
  'encodeAck', 'encodeFrame', 'inputChunkBytes', 'isMuxError', 'isTerminalReply', 'parseCast', 'reconnectDelay',
];
const TYPES = [
  'BackoffOptions', 'ChannelListener', 'ChannelState', 'ClientErrorKind', 'ClientInfo', 'ClosedParams', 'ClosedReason',
  'ConnectionState', 'ErrorData', 'ErrorKind', 'EventHandler', 'ExitParams', 'ExitStatus', 'FlowParams', 'Frame',
  'GapParams', 'InitializeParams', 'InitializeResult', 'JsonRpcErrorObject', 'JsonRpcFailure', 'JsonRpcId',
  'JsonRpcNotification', 'JsonRpcRequest', 'JsonRpcResponse', 'JsonRpcSuccess', 'Limits', 'Method', 'MuxClientEvents',
  'MuxClientOptions', 'NotificationMap', 'RequestMap', 'RequestMeta', 'ServerErrorKind', 'SessionAttachParams',
  'SessionAttachResult', 'SessionDetachParams', 'SessionDetachResult', 'SessionInfo', 'SessionKillParams',
  'SessionKillResult', 'SessionLeaseParams', 'SessionLeaseResult', 'SessionListParams', 'SessionListResult',
  'ScreenMode', 'ScreenModes', 'SessionCaptureParams', 'SessionCaptureResult',
  'Cast', 'CastEvent', 'CastHeader', 'RecordingInfo', 'RecordingListParams', 'RecordingListResult',
  'RecordingReadParams', 'RecordingReadResult', 'ShareCreateParams', 'ShareInfo', 'ShareListParams',
  'ShareListResult', 'ShareRevokeParams', 'ShareRevokeResult',
  'SessionOpenParams', 'SessionOpenResult', 'SessionResizeParams', 'SessionResizeResult', 'SessionSignalParams',
  'RestartParams', 'SignalName', 'SizeParams', 'TerminalWrite', 'WebSocketFactory', 'WebSocketLike',
];

const tmp = mkdtempSync(join(tmpdir(), 'muxterm-pack-'));
assert.ok(relative(root, tmp).startsWith('..'), `${tmp} must be outside ${root}`);

// npm ignores --silent for the lifecycle output of prepack; keep it off stdout, which is JSON.
const npm = (args, cwd) =>
  execFileSync('npm', [...args, '--no-audit', '--no-fund'], { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });

try {
  const [packed] = JSON.parse(npm(['pack', '--json', '--pack-destination', tmp], root).replace(/^[^[]*/s, ''));
  const files = packed.files.map((f) => f.path).sort();
  console.log(`${packed.filename}: ${packed.size} bytes, ${files.length} files: ${files.join(' ')}`);
  assert.equal(packed.name, '@muxterm/client');
  assert.equal(packed.version, pkg.version);
  for (const f of ['package.json', 'README.md', 'dist/index.js', 'dist/index.d.ts']) {
    assert.ok(files.includes(f), `the tarball lacks ${f}`);
  }
  for (const f of files) {
    assert.ok(!/^(test|scripts|node_modules)\//.test(f), `the tarball ships ${f}`);
  }

  const project = join(tmp, 'outsider');
  mkdirSync(project);
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'outsider', private: true, type: 'module' }, null, 2));
  npm(['install', '--no-save', join(tmp, packed.filename)], project);

  writeFileSync(
    join(project, 'check.mjs'),
    `import assert from 'node:assert/strict';
import * as m from '@muxterm/client';
import { createRequire } from 'node:module';
const where = createRequire(import.meta.url).resolve('@muxterm/client/package.json');
assert.ok(where.startsWith(process.cwd()), 'resolved from the project: ' + where);
assert.equal(m.SUBPROTOCOL, 'muxterm.v1');
assert.deepEqual(Object.keys(m).sort(), ${JSON.stringify(VALUES)}, 'the exported values');
for (const name of ['MuxClient', 'Channel', 'MuxError', 'encodeFrame', 'decodeFrame', 'encodeAck', 'isMuxError']) {
  assert.equal(typeof m[name], 'function', name);
}
const f = m.decodeFrame(m.encodeFrame(m.FrameType.Input, 7, new TextEncoder().encode('hi')));
assert.deepEqual([f.type, f.channel, new TextDecoder().decode(f.payload)], [2, 7, 'hi']);
// Node 20 has no global WebSocket: the client takes any factory.
const opened = [];
const c = new m.MuxClient('ws://127.0.0.1:1/ws', {
  reconnect: false,
  webSocketFactory: (url, protocols) => {
    opened.push([url, protocols]);
    return { binaryType: '', readyState: 0, send() {}, close() {}, onopen: null, onmessage: null, onclose: null, onerror: null };
  },
});
void c.connect().catch(() => {});
assert.deepEqual(opened, [['ws://127.0.0.1:1/ws', 'muxterm.v1']]);
c.close();
console.log('import ok from ' + where);
`,
  );
  execFileSync(process.execPath, ['check.mjs'], { cwd: project, stdio: 'inherit' });

  writeFileSync(
    join(project, 'check.ts'),
    `import { MuxClient, type Channel, type SessionKillResult, type WebSocketLike } from '@muxterm/client';
// Each exported type-only name (an unknown one fails the check).
export type { ${TYPES.join(', ')} } from '@muxterm/client';
declare const socket: WebSocketLike;
const c = new MuxClient('ws://127.0.0.1:8222/ws', { webSocketFactory: () => socket });
export async function run(): Promise<SessionKillResult> {
  await c.connect();
  const ch: Channel = await c.open({ cols: 80, rows: 24 });
  ch.listen({ data: (b: Uint8Array) => ch.consumed(b.length) });
  return ch.kill();
}
`,
  );
  writeFileSync(
    join(project, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: { target: 'es2022', lib: ['es2022'], module: 'nodenext', moduleResolution: 'nodenext', types: [], strict: true, noEmit: true },
      files: ['check.ts'],
    }),
  );
  execFileSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', project], { stdio: 'inherit' });
  console.log('types ok: check.ts type-checks against the tarball (nodenext, no DOM, no @types/node)');
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
