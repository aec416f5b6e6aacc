// Output of a hidden tab yields to typing in the visible one. All tabs share the page's main
// thread, and xterm.js parses what it was given in slices of up to 12 ms: a key pressed in the
// visible tab, and then its echo, each wait behind such a slice of another tab's output. So a
// hidden tab's output is parsed one frame per task, and held while the visible tab waits for
// the echo of its input (until the echo's frame is drawn, at most HOLD_MS). The acknowledgement
// still follows the parse, so the gateway's window paces a held session; nothing is dropped.
import type { App } from './app';
import type { Tab } from './tab';

/** The longest a hidden tab's output waits for the visible tab's echo (input without echo: a password). */
const HOLD_MS = 50;

/** One frame of output: run writes it and calls parsed once xterm.js parsed it; drop skips it. */
export interface Chunk {
  run(parsed: () => void): void;
  drop(): void;
}

interface Queue {
  chunks: Chunk[];
  running: boolean;
}

const queues = new WeakMap<Tab, Queue>();
const waiting = new Set<Tab>();
let holding = false;
let holdTimer: ReturnType<typeof setTimeout> | undefined;
/** The page's app, for release (a timer's callback). */
let appRef: App | null = null;

function isActive(app: App, tab: Tab): boolean {
  return app.tabs[app.active] === tab;
}

/** Writes a frame of the tab's output, now when the tab is visible with nothing queued, else in turn. */
export function output(app: App, tab: Tab, c: Chunk): void {
  let q = queues.get(tab);
  if (!q) {
    q = { chunks: [], running: false };
    queues.set(tab, q);
  }
  if (!q.running && isActive(app, tab)) {
    c.run(() => {
      if (holding) requestAnimationFrame(() => setTimeout(release, 0)); // after xterm.js drew it
    });
    return;
  }
  q.chunks.push(c);
  if (!q.running) step(app, tab, q);
}

/** Skips the tab's queued output (a paint of its screen replaces it, or the tab is gone). */
export function dropQueued(tab: Tab): void {
  const q = queues.get(tab);
  if (!q) return;
  for (const c of q.chunks.splice(0)) c.drop();
  q.running = false;
  waiting.delete(tab);
}

/** The visible tab sent input: hidden tabs hold their output until its echo is drawn. */
export function inputSent(app: App): void {
  appRef = app;
  holding = true;
  clearTimeout(holdTimer);
  holdTimer = setTimeout(release, HOLD_MS);
}

function step(app: App, tab: Tab, q: Queue): void {
  if (!app.tabs.includes(tab)) {
    dropQueued(tab);
    return;
  }
  const c = q.chunks.shift();
  if (!c) {
    q.running = false;
    return;
  }
  q.running = true;
  if (holding && !isActive(app, tab)) {
    q.chunks.unshift(c);
    waiting.add(tab);
    return;
  }
  c.run(() => setTimeout(() => step(app, tab, q), 0));
}

function release(): void {
  holding = false;
  clearTimeout(holdTimer);
  const app = appRef;
  for (const t of [...waiting]) {
    waiting.delete(t);
    const q = queues.get(t);
    if (app && q) step(app, t, q);
  }
}
