// Builds the UI into dist/: app.js (+ map) bundled from src/main.ts, app.css, xterm.css and
// index.html; the recordings page's recordings.js (+ map), recordings.css and recordings.html. dist/.gitkeep stays (frontend/embed.go embeds dist/ and needs it to exist).
// The browser tests' hook goes to dist-test/testhook.js (+ map), outside what the gateway embeds.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');
const require = createRequire(import.meta.url);

mkdirSync(dist, { recursive: true });
for (const f of readdirSync(dist)) {
  if (f !== '.gitkeep') rmSync(join(dist, f), { recursive: true, force: true });
}
writeFileSync(join(dist, '.gitkeep'), '');

const common = {
  bundle: true,
  minify: true,
  sourcemap: true,
  target: ['chrome110', 'firefox115', 'safari16'],
  logLevel: 'warning',
  legalComments: 'linked',
};

// script bundles the TypeScript entry src/<entry> into outfile, a script for the browser.
const script = (entry, outfile) =>
  build({ ...common, entryPoints: [join(root, 'src', entry)], outfile, format: 'iife', platform: 'browser' });

await script('main.ts', join(dist, 'app.js'));

await build({
  ...common,
  entryPoints: [join(root, 'src/style.css')],
  outfile: join(dist, 'app.css'),
});

// The recordings page: a list and a player (src/recordings.ts).
await script('recordings.ts', join(dist, 'recordings.js'));
copyFileSync(join(root, 'src/recordings.css'), join(dist, 'recordings.css'));
copyFileSync(join(root, 'src/recordings.html'), join(dist, 'recordings.html'));

// The browser tests' hook (src/testhook.ts) goes to dist-test/, which frontend/embed.go does
// not embed: the gateway serves the production page only, and the tests evaluate the hook in
// the browser before the page's own script.
const distTest = join(root, 'dist-test');
rmSync(distTest, { recursive: true, force: true });
await script('testhook.ts', join(distTest, 'testhook.js'));

copyFileSync(require.resolve('@xterm/xterm/css/xterm.css'), join(dist, 'xterm.css'));
copyFileSync(join(root, 'src/index.html'), join(dist, 'index.html'));

for (const f of readdirSync(dist).sort()) {
  console.log(`dist/${f.padEnd(20)} ${String(statSync(join(dist, f)).size).padStart(8)} bytes`);
}
