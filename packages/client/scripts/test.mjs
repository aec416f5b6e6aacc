// Bundles the given test files (default: every test/*.test.ts) with esbuild into a temporary
// directory under node_modules/.cache (so that `ws` and the package itself resolve as they do for
// a user) and runs them with node's built-in test runner. Arguments after `--` go to node --test.
import { build } from 'esbuild';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const dash = argv.indexOf('--');
const named = dash < 0 ? argv : argv.slice(0, dash);
const nodeArgs = dash < 0 ? [] : argv.slice(dash + 1);
const entries =
  named.length > 0
    ? named.map((f) => resolve(root, f))
    : readdirSync(join(root, 'test'))
        .filter((f) => f.endsWith('.test.ts'))
        .sort()
        .map((f) => join(root, 'test', f));
if (entries.length === 0) {
  console.error('no test/*.test.ts');
  process.exit(1);
}

const cache = join(root, 'node_modules/.cache');
mkdirSync(cache, { recursive: true });
const out = mkdtempSync(join(cache, 'muxterm-client-test-'));
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
    external: ['node:*', 'ws'],
    logLevel: 'warning',
  });
  const files = entries.map((f) => join(out, basename(f).replace(/\.ts$/, '.mjs')));
  const r = spawnSync(process.execPath, ['--enable-source-maps', '--test', ...nodeArgs, ...files], {
    stdio: 'inherit',
    cwd: root,
  });
  status = r.status ?? 1;
} finally {
  rmSync(out, { recursive: true, force: true });
}
process.exit(status);
