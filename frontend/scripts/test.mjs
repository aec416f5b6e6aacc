// Bundles test/*.test.ts with esbuild into a temporary directory and runs them with node's
// built-in test runner (node --test). Extra arguments are passed to node --test.
import { build } from 'esbuild';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const testDir = join(root, 'test');
const entries = readdirSync(testDir)
  .filter((f) => f.endsWith('.test.ts'))
  .sort()
  .map((f) => join(testDir, f));
if (entries.length === 0) {
  console.error('no test/*.test.ts');
  process.exit(1);
}

const out = mkdtempSync(join(tmpdir(), 'muxterm-frontend-test-'));
let status = 1;
try {
  await build({
    entryPoints: entries,
    outdir: out,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    sourcemap: 'inline',
    external: ['node:*'],
    logLevel: 'warning',
  });
  const files = readdirSync(out)
    .filter((f) => f.endsWith('.test.mjs'))
    .sort()
    .map((f) => join(out, f));
  const r = spawnSync(process.execPath, ['--enable-source-maps', '--test', ...process.argv.slice(2), ...files], {
    stdio: 'inherit',
    cwd: root,
  });
  status = r.status ?? 1;
} finally {
  rmSync(out, { recursive: true, force: true });
}
process.exit(status);
