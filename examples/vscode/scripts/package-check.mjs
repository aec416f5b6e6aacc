// Packages the extension as the README says (`vsce package`, the pinned devDependency, no global
// install) into a temporary directory outside the repository, lists the .vsix (a zip) and checks
// that it ships exactly what the extension needs: package.json (with its repository), the
// README and dist/extension.js; no src/, test/, source maps or node_modules. Exits non-zero on
// the first failure; removes the directory either way.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inflateRawSync } from 'node:zlib';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const tmp = mkdtempSync(join(tmpdir(), 'muxterm-vsix-'));
assert.ok(relative(root, tmp).startsWith('..'), `${tmp} must be outside ${root}`);

/** The entries of a zip file, read from its central directory: name to its uncompressed bytes. */
function unzip(buf) {
  let eocd = buf.length - 22;
  while (eocd >= 0 && buf.readUInt32LE(eocd) !== 0x06054b50) eocd--;
  assert.ok(eocd >= 0, 'no end of central directory: not a zip file');
  const count = buf.readUInt16LE(eocd + 10);
  let p = buf.readUInt32LE(eocd + 16);
  const entries = new Map();
  for (let i = 0; i < count; i++) {
    assert.equal(buf.readUInt32LE(p), 0x02014b50, 'central directory entry');
    const method = buf.readUInt16LE(p + 10);
    const compressed = buf.readUInt32LE(p + 20);
    const nameLen = buf.readUInt16LE(p + 28);
    const extraLen = buf.readUInt16LE(p + 30);
    const commentLen = buf.readUInt16LE(p + 32);
    const local = buf.readUInt32LE(p + 42);
    const name = buf.toString('utf8', p + 46, p + 46 + nameLen);
    const data = local + 30 + buf.readUInt16LE(local + 26) + buf.readUInt16LE(local + 28);
    const raw = buf.subarray(data, data + compressed);
    entries.set(name, method === 8 ? inflateRawSync(raw) : raw);
    p += 46 + nameLen + extraLen + commentLen;
  }
  return entries;
}

try {
  const vsix = join(tmp, 'muxterm.vsix');
  execFileSync('npx', ['--no-install', 'vsce', 'package', '--out', vsix], { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
  const entries = unzip(readFileSync(vsix));
  const names = [...entries.keys()].sort();
  console.log(`${vsix}: ${names.join(' ')}`);
  assert.deepEqual(names, [
    '[Content_Types].xml',
    'extension.vsixmanifest',
    'extension/dist/extension.js',
    'extension/package.json',
    'extension/readme.md',
  ]);
  for (const n of names) {
    assert.ok(!/(^|\/)(src|test|node_modules|scripts)\/|\.map$|\.ts$/.test(n), `the .vsix ships ${n}`);
  }
  const pkg = JSON.parse(entries.get('extension/package.json').toString('utf8'));
  assert.equal(pkg.repository?.directory, 'examples/vscode', 'package.json names its repository');
  assert.match(entries.get('extension/dist/extension.js').toString('utf8'), /muxterm\.openSession/);
  console.log('vsix ok');
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
