// The Node test runner of the repository's TypeScript packages: packages/client (npm test, npm run
// test:gateway) and examples/vscode (npm test runs this file by its path, so there is one copy).
// It bundles the given test files (default: every test/*.test.ts) of the package in the current
// directory (npm runs scripts there) with esbuild into a temporary directory under that package's
// node_modules/.cache, so that `ws` (left external) resolves from that package as it does for a
// user, and runs them with node's built-in test runner. Arguments after `--` go to node --test.
import { build } from 'esbuild';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';

const root = process.cwd();
if (!existsSync(join(root, 'package.json'))) {
  console.error(`${root} has no package.json: run this from a package's directory (npm test does)`);
  process.exit(1);
}
const name = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).name.replace(/[^a-z0-9]+/gi, '-').replace(/^-/, '');
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
const out = mkdtempSync(join(cache, `${name}-test-`));
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
