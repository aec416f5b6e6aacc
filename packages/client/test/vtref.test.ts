// The reference comparison of the Go terminal model (internal/vt) against xterm.js: for every
// recording of internal/vt/testdata/corpus, terminal A gets the program's original output
// (resizes at their places), terminal B — fresh, of the final size — gets the model's snapshot
// (internal/vt/cmd/vtsnap); both must show the same: cells of the active and the normal
// buffer, the cursor, the active buffer, the modes, the title. B's rows must also be the
// model's own text of its screen. Both terminals are set up as the frontend sets up its own
// (Unicode 11 widths), with 1000 lines of scrollback, the model's too.
//
// Skipped, with a message, only when `go` is not on PATH: it builds vtsnap from the repository.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Terminal, type IBuffer, type IBufferCell } from '@xterm/headless';
import { Unicode11Addon } from '@xterm/addon-unicode11';

const repo = resolve(process.cwd(), '../..');
const corpusDir = join(repo, 'internal/vt/testdata/corpus');
const haveGo = spawnSync('go', ['version']).error === undefined;

// Known differences, each with its reason; a mismatch whose message contains the key is
// reported in the log, not failed.
const known: Record<string, string> = {
  // xterm.js reflows wrapped lines when the width changes; the model cuts them (like xterm).
  'resize:': 'xterm.js reflows on resize, the model cuts rows',
};

type Record_ = { cols: number; rows: number } | { data: Uint8Array };

function parseCorpus(b: Buffer): Record_[] {
  const out: Record_[] = [];
  let i = 0;
  while (i < b.length) {
    const nl = b.indexOf(0x0a, i);
    const h = b.subarray(i, nl).toString('latin1').split(' ');
    i = nl + 1;
    if (h[0] === 'W') {
      out.push({ cols: Number(h[1]), rows: Number(h[2]) });
    } else {
      const n = Number(h[1]);
      out.push({ data: b.subarray(i, i + n) });
      i += n;
    }
  }
  return out;
}

function newTerminal(cols: number, rows: number): { term: Terminal; title: () => string } {
  const term = new Terminal({ cols, rows, scrollback: 1000, allowProposedApi: true });
  term.loadAddon(new Unicode11Addon());
  term.unicode.activeVersion = '11';
  let title = '';
  term.onTitleChange((t) => (title = t));
  return { term, title: () => title };
}

function write(term: Terminal, data: Uint8Array | string): Promise<void> {
  return new Promise((res) => term.write(data, res));
}

// cellKey describes what a cell shows. Nothing printed and a space look alike; only the first
// code point counts (the model drops combining marks).
function cellKey(c: IBufferCell): string {
  const ch = c.getChars();
  const first = ch === '' ? ' ' : String.fromCodePoint(ch.codePointAt(0)!);
  const attrs = [
    c.isBold(), c.isItalic(), c.isDim(), c.isUnderline(), c.isInverse(), c.isInvisible(),
    c.isStrikethrough(), c.isBlink(), c.isOverline(),
  ].map((b) => (b ? 1 : 0)).join('');
  return `${JSON.stringify(first)} w${c.getWidth()} fg${c.getFgColorMode()}:${c.getFgColor()} bg${c.getBgColorMode()}:${c.getBgColor()} ${attrs}`;
}

function compareBuffer(name: string, what: string, a: IBuffer, b: IBuffer, rows: number, out: string[]): void {
  // the screen rows, then the history, aligned from the screen up
  const histA = a.length - rows;
  const histB = b.length - rows;
  for (let y = -Math.min(histA, histB); y < rows; y++) {
    const la = a.getLine(histA + y);
    const lb = b.getLine(histB + y);
    if (!la || !lb) continue;
    const ca = a.getNullCell();
    const cb = b.getNullCell();
    for (let x = 0; x < la.length; x++) {
      const ka = cellKey(la.getCell(x, ca)!);
      const kb = cellKey(lb.getCell(x, cb)!);
      if (ka !== kb) {
        out.push(`${name}: ${what} row ${y} col ${x}: snapshot ${kb}, original ${ka}`);
        break; // one per row is enough
      }
    }
  }
}

describe('internal/vt against xterm.js', { skip: haveGo ? false : 'go is not on PATH: cannot build internal/vt/cmd/vtsnap' }, () => {
  let dir = '';
  let vtsnap = '';
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'vtref-'));
    vtsnap = join(dir, 'vtsnap');
    const r = spawnSync('go', ['build', '-o', vtsnap, './internal/vt/cmd/vtsnap'], { cwd: repo, encoding: 'utf8' });
    assert.equal(r.status, 0, `go build: ${r.stderr}`);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const files = readdirSync(corpusDir).filter((f) => f.endsWith('.rec')).sort();
  for (const file of files) {
    const name = file.replace(/\.rec$/, '');
    it(name, async (t) => {
      const r = spawnSync(vtsnap, [join(corpusDir, file)], { encoding: 'utf8', maxBuffer: 64 << 20 });
      assert.equal(r.status, 0, `vtsnap: ${r.stderr}`);
      const snap = JSON.parse(r.stdout) as { cols: number; rows: number; snapshot: string; text: string };

      const recs = parseCorpus(readFileSync(join(corpusDir, file)));
      const first = recs[0] as { cols: number; rows: number };
      const A = newTerminal(first.cols, first.rows);
      for (const rec of recs.slice(1)) {
        if ('data' in rec) await write(A.term, rec.data);
        else A.term.resize(rec.cols, rec.rows);
      }
      const B = newTerminal(snap.cols, snap.rows);
      await write(B.term, Buffer.from(snap.snapshot, 'base64'));

      const out: string[] = [];
      const a = A.term, b = B.term;
      assert.equal(a.cols, snap.cols, `${name}: width`);
      assert.equal(a.rows, snap.rows, `${name}: height`);
      if (a.buffer.active.type !== b.buffer.active.type) {
        out.push(`${name}: active buffer: snapshot ${b.buffer.active.type}, original ${a.buffer.active.type}`);
      }
      compareBuffer(name, 'active', a.buffer.active, b.buffer.active, snap.rows, out);
      if (a.buffer.active.type === 'alternate') {
        compareBuffer(name, 'normal', a.buffer.normal, b.buffer.normal, snap.rows, out);
      }
      const ca = [a.buffer.active.cursorX, a.buffer.active.cursorY];
      const cb = [b.buffer.active.cursorX, b.buffer.active.cursorY];
      if (ca.join() !== cb.join()) out.push(`${name}: cursor: snapshot ${cb}, original ${ca}`);
      for (const m of ['applicationCursorKeysMode', 'applicationKeypadMode', 'bracketedPasteMode', 'mouseTrackingMode',
        'insertMode', 'originMode', 'wraparoundMode', 'sendFocusMode'] as const) {
        if (a.modes[m] !== b.modes[m]) out.push(`${name}: mode ${m}: snapshot ${b.modes[m]}, original ${a.modes[m]}`);
      }
      if (A.title() !== B.title()) out.push(`${name}: title: snapshot ${JSON.stringify(B.title())}, original ${JSON.stringify(A.title())}`);

      // B's screen against the model's own text of it
      const text = snap.text.split('\n');
      for (let y = 0; y < snap.rows; y++) {
        const got = b.buffer.active.getLine(b.buffer.active.baseY + y)!.translateToString(true).trimEnd();
        if (got !== text[y]) out.push(`${name}: text row ${y}: xterm.js ${JSON.stringify(got)}, model ${JSON.stringify(text[y])}`);
      }

      const failing = out.filter((m) => !Object.keys(known).some((k) => m.startsWith(k)));
      for (const m of out) if (!failing.includes(m)) t.diagnostic(`known (${known[Object.keys(known).find((k) => m.startsWith(k))!]}): ${m}`);
      assert.deepEqual(failing, [], failing.join('\n'));
      a.dispose();
      b.dispose();
    });
  }
});
