// zgate.ts against zmodem.js's own Sentry: output through the gate must start exactly the
// transfers, at exactly the same outputs, that the sentry alone starts, and show the same bytes.
// Run with `npm test` (node --test); esbuild compiles the TypeScript module in memory.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const Zmodem = createRequire(import.meta.url)('zmodem.js/src/zmodem');
const out = await build({
  entryPoints: [join(root, 'src/zgate.ts')], bundle: true, write: false, format: 'esm', platform: 'node', logLevel: 'warning',
});
const { bypassSentry } = await import('data:text/javascript,' + encodeURIComponent(out.outputFiles[0].text));

const bytes = (s) => Uint8Array.from(s, (c) => c.charCodeAt(0));
// What lrzsz's `sz FILE` and `rz` print first (captured from Debian's lrzsz 0.12.21).
const SZ = bytes('rz\r**\x18B00000000000000\r\x8a\x11');
const RZ = bytes('**\x18B0100000023be50\r\x8a\x11');

// feed runs chunks through a fresh sentry, through the gate (gated) or not, and returns the
// index of each chunk that started a transfer and everything shown on the terminal. Each
// detection is denied, as a page without a file to send would.
function feed(chunks, gated) {
  const detects = [];
  const shown = [];
  let at = -1;
  const sentry = new Zmodem.Sentry({
    to_terminal: (o) => shown.push(...o),
    sender: () => undefined,
    on_detect: (d) => { detects.push(at); d.deny(); },
    on_retract: () => undefined,
  });
  chunks.forEach((c, i) => {
    at = i;
    if (gated && bypassSentry(sentry, c)) shown.push(...c);
    else sentry.consume(Array.from(c));
  });
  return { detects, shown };
}

function cuts(b, ...at) {
  const out = [];
  let from = 0;
  for (const i of [...at, b.length]) {
    out.push(b.subarray(from, i));
    from = i;
  }
  return out;
}

test('a header cut at any byte, or at any two, starts the transfer where the sentry alone does', () => {
  for (const [name, hdr] of [['sz', SZ], ['rz', RZ]]) {
    const prompt = bytes('$ ls\r\nREADME.md\r\n$ ');
    const stream = new Uint8Array([...prompt, ...hdr]);
    const stars = prompt.length + hdr.indexOf(0x2a); // where "**" ZDLE begins
    for (let i = 0; i <= stream.length; i++) {
      for (let j = i; j <= stream.length; j++) {
        const chunks = cuts(stream, i, j);
        const want = feed(chunks, false);
        // A cut inside "**" ZDLE "B0" (what the sentry looks for) loses the stars from the sentry's view when they sit past
        // what it keeps of earlier output; anywhere else the sentry alone detects.
        const inStart = [i, j].some((c) => c > stars && c <= stars + 4);
        if (!inStart) assert.equal(want.detects.length, 1, `${name} cut at ${i} and ${j}: the sentry alone detects once`);
        assert.deepEqual(feed(chunks, true), want, `${name} cut at ${i} and ${j}`);
      }
    }
  }
});

test('random output with stray stars, ZDLEs and headers, in random pieces, matches the sentry alone', () => {
  let seed = 1;
  const rand = (n) => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 8) % n;
  const pieces = [bytes('text '), bytes('*'), bytes('**'), bytes('\x18'), bytes('B0'), bytes('\r\n'), SZ, RZ, bytes('rz\r')];
  for (let run = 0; run < 2000; run++) {
    const parts = Array.from({ length: 1 + rand(12) }, () => pieces[rand(pieces.length)]);
    const stream = Uint8Array.from(parts.flatMap((p) => [...p]));
    const at = Array.from({ length: rand(6) }, () => rand(stream.length + 1)).sort((a, b) => a - b);
    const chunks = cuts(stream, ...at);
    assert.deepEqual(feed(chunks, true), feed(chunks, false), `run ${run}: ${JSON.stringify(String.fromCharCode(...stream))} cut at ${at}`);
  }
});

test('plain output goes past the sentry', () => {
  const sentry = new Zmodem.Sentry({ to_terminal: () => undefined, sender: () => undefined, on_detect: () => undefined, on_retract: () => undefined });
  assert.equal(bypassSentry(sentry, bytes('hello\r\n'.repeat(100))), true);
  assert.equal(bypassSentry(sentry, bytes('a ZDLE \x18 here')), false);
});
