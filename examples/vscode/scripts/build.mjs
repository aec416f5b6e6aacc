// Bundles the extension into dist/extension.js (CommonJS, as VS Code loads it) with
// @muxterm/client and ws inside; `vscode` is provided by the editor at run time.
import { build } from 'esbuild';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
await build({
  entryPoints: [join(root, 'src/extension.ts')],
  outfile: join(root, 'dist/extension.js'),
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  sourcemap: true,
  external: ['vscode', 'bufferutil', 'utf-8-validate'],
  logLevel: 'warning',
});
console.log('dist/extension.js');
