// Builds dist/: index.js (+ map), the one ES module esbuild bundles from src/index.ts and the
// modules it imports, and the declarations tsc emits from tsconfig.src.json: index.d.ts (the
// public entry, re-exports only) and one .d.ts per module beside it.
import { build } from 'esbuild';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');

rmSync(dist, { recursive: true, force: true });
mkdirSync(dist);

await build({
  entryPoints: [join(root, 'src/index.ts')],
  outfile: join(dist, 'index.js'),
  bundle: true,
  format: 'esm',
  platform: 'neutral',
  target: 'es2022',
  sourcemap: true,
  logLevel: 'warning',
});

const tsc = join(root, 'node_modules/typescript/bin/tsc');
const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.src.json', '--emitDeclarationOnly'], {
  cwd: root,
  stdio: 'inherit',
});
if (r.status !== 0) process.exit(r.status ?? 1);

for (const f of readdirSync(dist).sort()) {
  console.log(`dist/${f.padEnd(16)} ${String(statSync(join(dist, f)).size).padStart(8)} bytes`);
}
