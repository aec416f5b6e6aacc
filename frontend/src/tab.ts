// A tab: its terminal, its size against the session's, its renderer, how it is drawn, and the
// tab order kept across reloads.
import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import { SearchAddon } from '@xterm/addon-search';
import { Unicode11Addon } from '@xterm/addon-unicode11';
import { WebLinksAddon } from '@xterm/addon-web-links';
import { WebglAddon } from '@xterm/addon-webgl';
import { MuxError, ReplayGuard, type Channel, type ExitStatus } from '@muxterm/client';
import { showError, writable, type App } from './app';
import { askClose, detachTab, restartTab } from './actions';
import { scheduleDetachedRefresh } from './detached';
import { shortcutFor } from './shortcuts';
import { dropQueued, inputSent, output } from './pace';
import { LAYOUT_KEY, RESIZE_DEBOUNCE_MS } from './config';
import { termTheme, webglWanted } from './settings';
import { wireClipboard } from './clipboard';
import { wireTouchScroll, withModifiers } from './keybar';
import { TabTransfer, wireTransfer } from './transfer';
import { lightenViewport } from './viewport';

export interface Tab {
  session: string;
  /** The command of a session attached from elsewhere (session.list), for a restart; none: the shell. */
  cmd: string[] | undefined;
  channel: Channel | null;
  /** Drops xterm.js's automatic replies to replayed output (docs/protocol.md §3). */
  guard: ReplayGuard;
  /** The session's size as the gateway applies it (null: not known yet: draw our own). */
  sessionSize: { cols: number; rows: number } | null;
  /** Our fitted size, as last sent to the gateway. */
  sentSize: { cols: number; rows: number } | null;
  /** The most output acknowledged ahead of its parsing at once (READ_AHEAD), for the test hook. */
  aheadPeak: number;
  /** Whether its scrollbar follows output once per frame (viewport.ts). */
  viewportLightened: boolean;
  noteEl: HTMLElement;
  term: Terminal;
  fit: FitAddon;
  search: SearchAddon;
  webgl: WebglAddon | null;
  pane: HTMLElement;
  tabEl: HTMLElement;
  titleEl: HTMLElement;
  badgeEl: HTMLElement;
  /** Set by the program (OSC 0/2). */
  oscTitle: string;
  exited: ExitStatus | null;
  /** Why the binding ended for good (killed elsewhere, reaped, …), or null. */
  closed: string | null;
  /** closeTab / detachTab in progress: the tab is going away. */
  leaving: boolean;
  /** A restart (Enter after the exit) is in progress. */
  restarting: boolean;
  resizeTimer: ReturnType<typeof setTimeout> | undefined;
  /** A session.resize of this tab is in flight. */
  resizing: boolean;
  /** Input typed before the tab's session.open answered; sent in order once it has. */
  early: Array<string | Uint8Array>;
  /** ZMODEM (sz, rz) on the bound channel; null on a page that may not write. */
  transfer: TabTransfer | null;
}

/**
 * Output the visible tab acknowledges on arrival, ahead of xterm.js's parsing, with the WebGL
 * renderer. The gateway's window then never waits for the parse, and xterm.js, which ran dry
 * between acknowledgements, draws fewer of WebGL's costly frames (docs/benchmarks.md, "What each
 * change measured"). On the DOM renderer it drew as many frames and took no less time, so there
 * bytes are acknowledged once parsed. 256 KiB bounds what is still to parse after a Ctrl-C: after
 * pagebench's 3 s `yes` flood the WebGL page shows the prompt 0.31-0.35 s after the key (with
 * 1 MiB 0.34-0.47 s, in the same bulk time; ttyd's WebGL page 17-18 s; docs/benchmarks.md). What
 * is acknowledged is already in xterm.js's write buffer, so a dropped socket loses none of it.
 * Hidden tabs acknowledge once parsed, which paces their sessions (pace.ts).
 */
const READ_AHEAD = 256 << 10;

/**
 * The most output handed to xterm.js in one write: 4 KiB on the DOM renderer, 16 KiB on WebGL.
 * xterm.js parses its write buffer in slices of about 12 ms but looks at the clock only between
 * writes: a 32 KiB frame of scrolling lines given as one write is parsed whole in one task, a
 * long task of 52-67 ms in `seq 1 3000000`. In 4 KiB pieces the DOM page has none, in the same
 * time; WebGL draws a costly frame each time xterm.js yields, and takes 1.06-1.09× as long in
 * 4 KiB pieces, about as long in 16 KiB ones (docs/benchmarks.md, "What each change measured").
 */
const WRITE_PIECE_DOM = 4096;
const WRITE_PIECE_WEBGL = 16384;

/** Writes output to the tab's terminal in pieces; parsed runs once the last is parsed. */
function writePieces(tab: Tab, bytes: Uint8Array, parsed: () => void): void {
  const piece = tab.webgl ? WRITE_PIECE_WEBGL : WRITE_PIECE_DOM;
  let at = 0;
  for (; bytes.length - at > piece; at += piece) {
    tab.term.write(bytes.subarray(at, at + piece));
  }
  tab.term.write(bytes.subarray(at), parsed);
}

/** Sends input to the tab's channel, or keeps it until the channel exists. */
export function sendInput(app: App, tab: Tab, data: string | Uint8Array): void {
  if (!writable(app)) return; // a read-only share link's page never types
  if (tab.exited || tab.closed) {
    // The program is gone: Enter starts the same command again in this tab; the rest is dropped.
    if (data === '\r' && !tab.restarting && !tab.leaving) void restartTab(app, tab).catch((e: unknown) => showError(app, e));
    return;
  }
  if (tab === app.tabs[app.active]) inputSent(app);
  if (tab.channel) tab.channel.write(data);
  else if (tab.early.length < 1024) tab.early.push(data);
}

export function clamp(n: number, lo: number, hi: number): number {
  return Math.max(lo, Math.min(hi, Math.floor(n)));
}

/** The size that fits the tab's pane, measured with the renderer it has now. */
function measure(app: App, tab: Tab): { cols: number; rows: number } {
  let d: { cols: number; rows: number } | undefined;
  try {
    d = tab.fit.proposeDimensions();
  } catch {
    d = undefined;
  }
  if (!d || !(d.cols > 0) || !(d.rows > 0) || !Number.isFinite(d.cols)) d = tab.sentSize ?? { cols: tab.term.cols, rows: tab.term.rows };
  return {
    cols: clamp(d.cols, 1, app.client.limits.maxCols),
    rows: clamp(d.rows, 1, app.client.limits.maxRows),
  };
}

/**
 * The tab's own size: what the visible tab's pane fits. Every pane has the same box, but only
 * the visible tab draws with WebGL, whose cells are narrower than the DOM renderer's (157
 * against 149 columns in a 1280-pixel window): a hidden tab takes the visible tab's measure
 * rather than its own, so the sessions it opens or attaches get the size they will be shown at.
 */
export function size(app: App, tab: Tab): { cols: number; rows: number } {
  const visible = app.tabs[app.active];
  return measure(app, visible && visible !== tab ? visible : tab);
}

export function notice(text: string): string {
  // A dim line of our own between the program's output.
  return `\x1b[0m\r\n\x1b[2m[muxterm: ${text}]\x1b[0m\r\n`;
}

export function exitText(s: ExitStatus): string {
  return s.signal ? `process killed by signal ${s.signal}` : `process exited with code ${s.code}`;
}

export function tabTitle(tab: Tab): string {
  if (tab.oscTitle) return tab.oscTitle;
  if (tab.cmd && tab.cmd.length > 0 && tab.session) return `${tab.cmd.join(' ')} ${tab.session.slice(0, 6)}`;
  if (tab.session) return `shell ${tab.session.slice(0, 6)}`;
  return 'opening…';
}

export function createTab(app: App, session: string, cmd?: string[]): Tab {
  const pane = document.createElement('div');
  pane.className = 'pane';
  app.dom.termsEl.append(pane);
  const noteEl = document.createElement('div');
  noteEl.className = 'size-note';
  noteEl.hidden = true;
  pane.append(noteEl);

  const tabEl = document.createElement('div');
  tabEl.className = 'tab';
  tabEl.setAttribute('role', 'tab');
  const titleEl = document.createElement('span');
  titleEl.className = 'title';
  const badgeEl = document.createElement('span');
  badgeEl.className = 'badge';
  const detachBtn = document.createElement('button');
  detachBtn.type = 'button';
  detachBtn.className = 'detach';
  detachBtn.title = 'Detach: the session keeps running (Alt+Shift+D)';
  detachBtn.textContent = '⇱';
  const closeBtn = document.createElement('button');
  closeBtn.type = 'button';
  closeBtn.className = 'close';
  closeBtn.title = 'Close: kill the session, after asking (Alt+Shift+W)';
  closeBtn.textContent = '×';
  tabEl.append(titleEl, badgeEl, detachBtn, closeBtn);
  app.dom.tabsEl.append(tabEl);

  const term = new Terminal({
    allowProposedApi: true, // term.unicode (unicode11)
    // Steady unless the settings ask: the DOM renderer blinks with a CSS animation, which keeps
    // Chromium drawing frames and puts a keystroke's echo a frame later (settings.ts).
    cursorBlink: app.settings.cursorBlink,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", "Cascadia Mono", Menlo, Consolas, monospace',
    fontSize: app.settings.fontSize,
    // The DOM renderer sizes each row to the font's ascent + descent rounded down to whole
    // device pixels and lets the next row cover what hangs below; an underscore sits at the
    // very bottom of the descent (DejaVu Sans Mono: exactly on it) and vanished. A little
    // leading keeps every glyph row inside its cell; WebGL draws the same either way.
    lineHeight: 1.1,
    scrollback: 10000,
    theme: termTheme(app),
    disableStdin: !writable(app),
  });
  const fit = new FitAddon();
  const search = new SearchAddon();
  term.loadAddon(fit);
  term.loadAddon(search);
  term.loadAddon(new Unicode11Addon());
  term.unicode.activeVersion = '11';
  term.loadAddon(new WebLinksAddon());

  const tab: Tab = {
    session,
    cmd,
    channel: null,
    guard: new ReplayGuard((bytes, parsed) => writePieces(tab, bytes, parsed)),
    sessionSize: null,
    sentSize: null,
    aheadPeak: 0,
    viewportLightened: false,
    noteEl,
    term,
    fit,
    search,
    webgl: null,
    pane,
    tabEl,
    titleEl,
    badgeEl,
    oscTitle: '',
    exited: null,
    closed: null,
    leaving: false,
    restarting: false,
    resizeTimer: undefined,
    resizing: false,
    early: [],
    transfer: null,
  };

  // xterm.js measures on open: the pane must be laid out, even if it is not the active one.
  pane.classList.add('measuring');
  term.open(pane);
  tab.viewportLightened = lightenViewport(term);
  safeFit(app, tab);
  pane.classList.remove('measuring');

  term.attachCustomKeyEventHandler((ev) => shortcutFor(ev) === null);
  wireClipboard(app, tab);
  wireTouchScroll(tab);
  wireTransfer(app, tab);
  // A replay never produces input: while replayed bytes are being parsed, xterm.js's automatic
  // answers to the queries in them (DA1, OSC 10/11, DECRQM, …) are dropped; keys still go.
  // While a file transfer holds the channel, keys never reach it (Ctrl-C cancels the transfer).
  term.onData((data) => {
    if (tab.transfer?.busy) return tab.transfer.key(data);
    if (tab.guard.allows(data)) sendInput(app, tab, withModifiers(app, data));
  });
  term.onBinary((data) => {
    if (tab.transfer?.busy || !tab.guard.allows(data)) return;
    const bytes = new Uint8Array(data.length);
    for (let i = 0; i < data.length; i++) bytes[i] = data.charCodeAt(i) & 0xff;
    sendInput(app, tab, bytes);
  });
  term.onTitleChange((t) => {
    tab.oscTitle = t;
    renderTab(app, tab);
    updateTitle(app);
  });

  tabEl.addEventListener('mousedown', (ev) => {
    if (ev.button === 1) {
      ev.preventDefault();
      void askClose(app, tab);
    }
  });
  tabEl.addEventListener('click', (ev) => {
    const t = ev.target as HTMLElement;
    if (t === closeBtn) void askClose(app, tab);
    else if (t === detachBtn) void detachTab(app, tab).catch((e: unknown) => showError(app, e));
    else activate(app, app.tabs.indexOf(tab));
  });
  // Drag a tab to reorder (the order is kept across reloads).
  tabEl.draggable = true;
  tabEl.addEventListener('dragstart', (ev) => {
    ev.dataTransfer?.setData('text/x-muxterm-tab', String(app.tabs.indexOf(tab)));
  });
  tabEl.addEventListener('dragover', (ev) => ev.preventDefault());
  tabEl.addEventListener('drop', (ev) => {
    ev.preventDefault();
    const from = Number(ev.dataTransfer?.getData('text/x-muxterm-tab'));
    if (Number.isInteger(from)) moveTab(app, from, app.tabs.indexOf(tab));
  });

  app.tabs.push(tab);
  renderTab(app, tab);
  updateEmpty(app);
  return tab;
}

export function renderTab(app: App, tab: Tab): void {
  const title = tabTitle(tab);
  tab.titleEl.textContent = title;
  tab.tabEl.title = `${title}\n${tab.session || ''}`.trim();
  tab.tabEl.classList.toggle('active', app.tabs[app.active] === tab);
  tab.tabEl.setAttribute('aria-selected', String(app.tabs[app.active] === tab));
  tab.tabEl.classList.toggle('exited', tab.exited !== null);
  tab.tabEl.classList.toggle('closed', tab.closed !== null);
  let badge = '';
  if (tab.exited) badge = tab.exited.signal ? `✕ ${tab.exited.signal}` : `exit ${tab.exited.code}`;
  if (tab.closed) badge = badge ? `${badge}, ${tab.closed}` : tab.closed;
  tab.badgeEl.textContent = badge;
  tab.badgeEl.hidden = badge === '';
}

/** The page title follows the focused terminal's title (OSC 0/2). */
export function updateTitle(app: App): void {
  const tab = app.tabs[app.active];
  document.title = tab ? `${tabTitle(tab)} · muxterm` : 'muxterm';
}

/** Moves the tab at `from` to `to` (keeping the active one active). */
export function moveTab(app: App, from: number, to: number): void {
  if (from === to || from < 0 || to < 0 || from >= app.tabs.length || to >= app.tabs.length) return;
  const cur = app.tabs[app.active];
  const [t] = app.tabs.splice(from, 1);
  app.tabs.splice(to, 0, t!);
  for (const x of app.tabs) app.dom.tabsEl.append(x.tabEl);
  app.active = cur ? app.tabs.indexOf(cur) : -1;
  renderTabs(app);
  saveLayout(app);
}

// --- the tab order and the active tab, kept across reloads

export interface Layout {
  order: string[];
  active: string | null;
}

export function saveLayout(app: App): void {
  if (app.restoring) return;
  const layout: Layout = { order: app.tabs.filter((t) => t.session).map((t) => t.session), active: app.tabs[app.active]?.session || null };
  try {
    localStorage.setItem(LAYOUT_KEY, JSON.stringify(layout));
  } catch {
    /* storage disabled */
  }
}

export function loadLayout(): Layout {
  try {
    const v = JSON.parse(localStorage.getItem(LAYOUT_KEY) ?? 'null') as Partial<Layout> | null;
    if (v && Array.isArray(v.order)) return { order: v.order.filter((x) => typeof x === 'string'), active: typeof v.active === 'string' ? v.active : null };
  } catch {
    /* corrupt: start over */
  }
  return { order: [], active: null };
}

export function renderTabs(app: App): void {
  for (const t of app.tabs) renderTab(app, t);
}

export function updateEmpty(app: App): void {
  app.dom.emptyEl.hidden = app.tabs.length > 0;
}

export function bindChannel(app: App, tab: Tab, ch: Channel): void {
  tab.transfer?.cancel('the tab was bound again; transfer aborted');
  tab.channel = ch;
  tab.session = ch.session;
  // Only a page that may write answers sz and rz (a transfer writes to the program).
  tab.transfer = writable(app) ? new TabTransfer(app, tab, ch) : null;
  const transfer = tab.transfer;
  if (ch.cols > 0 && ch.rows > 0) tab.sessionSize = { cols: ch.cols, rows: ch.rows };
  layout(app, tab);
  for (const d of tab.early.splice(0)) ch.write(d);
  // Bytes of this channel acknowledged on arrival and not parsed yet (READ_AHEAD).
  let ahead = 0;
  ch.listen({
    data(bytes, _ch, replay) {
      if (tab.channel !== ch) return; // a session this tab restarted away from
      // Raw bytes: xterm.js decodes UTF-8 itself, also across frames. Ack once it consumed them,
      // or on arrival while the visible WebGL tab stays within READ_AHEAD of its parsing.
      // bytes is a view valid until the next event; xterm.js keeps what it is given: copy.
      const n = bytes.length;
      // Replayed output never starts (or feeds) a transfer: it goes to the terminal as it is.
      const shown = replay || !transfer ? bytes.slice() : transfer.consume(bytes);
      if (shown.length === 0) {
        ch.consumed(n);
        return;
      }
      const early = tab.webgl !== null && ahead + n <= READ_AHEAD && app.tabs[app.active] === tab;
      if (early) {
        ahead += n;
        tab.aheadPeak = Math.max(tab.aheadPeak, ahead);
        ch.consumed(n);
      }
      const done = () => {
        if (early) ahead -= n;
        else ch.consumed(n);
      };
      output(app, tab, {
        run: (parsed) =>
          tab.guard.output(shown, replay, () => {
            done();
            parsed();
          }),
        drop: done,
      });
    },
    reattached() {
      if (tab.channel === ch) transfer?.interrupted();
    },
    screen(paint) {
      if (tab.channel !== ch) return;
      // A paint of the screen follows: it redraws a fresh terminal of the session's size.
      tab.sessionSize = { cols: paint.cols, rows: paint.rows };
      dropQueued(tab);
      tab.guard.reset();
      tab.term.reset();
      layout(app, tab);
    },
    size(cols, rows) {
      if (tab.channel !== ch) return;
      // The session's size (another viewer's under the gateway's --window-size policy).
      tab.sessionSize = { cols, rows };
      layout(app, tab);
    },
    gap(lost) {
      tab.term.write(notice(`${lost} bytes lost`));
    },
    exit(status) {
      if (tab.channel !== ch) return;
      transfer?.cancel('the program exited; transfer aborted');
      tab.exited = status;
      tab.term.write(notice(`${exitText(status)}; press Enter to restart`));
      renderTab(app, tab);
    },
    closed(reason) {
      if (tab.leaving || tab.channel !== ch) return;
      transfer?.cancel('the session closed; transfer aborted');
      tab.closed = reason;
      tab.term.write(notice(`session closed (${reason}); press Enter to start it again`));
      renderTab(app, tab);
      scheduleDetachedRefresh(app);
    },
  });
  renderTab(app, tab);
  if (app.tabs[app.active] === tab) updateTitle(app);
  saveLayout(app);
}

/**
 * Draws the tab at the session's size (the gateway's, which another viewer may have set) rather
 * than at its own, and says so where the two differ once the gateway has this page's size: a
 * size the gateway applied after it had ours is another viewer's.
 */
export function layout(app: App, tab: Tab): void {
  const own = size(app, tab);
  const want = tab.sessionSize ?? own;
  if (tab.term.cols !== want.cols || tab.term.rows !== want.rows) {
    try {
      tab.term.resize(want.cols, want.rows);
    } catch {
      /* disposed */
    }
  }
  const told = tab.sentSize !== null && tab.sentSize.cols === own.cols && tab.sentSize.rows === own.rows && tab.resizeTimer === undefined && !tab.resizing;
  const differs = told && tab.sessionSize !== null && (want.cols !== own.cols || want.rows !== own.rows);
  tab.noteEl.hidden = !differs;
  tab.pane.classList.toggle('foreign-size', differs);
  if (differs) {
    tab.noteEl.textContent = `${want.cols}×${want.rows} (another viewer)`;
    tab.noteEl.title =
      `The session is ${want.cols}×${want.rows}, set by another viewer of it; this window fits ` +
      `${own.cols}×${own.rows}.` +
      (writable(app) ? ` Typing or resizing here may make it yours (the gateway's --window-size policy).` : ` A read-only page never sizes it.`);
  }
}

/**
 * Sends our fitted size to the gateway when it changed since we last sent it. Only the visible
 * tab does: a hidden tab never resizes its session (it sends its size once shown).
 */
export function scheduleResize(app: App, tab: Tab, delay = RESIZE_DEBOUNCE_MS): void {
  clearTimeout(tab.resizeTimer);
  tab.resizeTimer = setTimeout(() => {
    tab.resizeTimer = undefined;
    const ch = tab.channel;
    if (!ch || tab.closed || tab.leaving || app.tabs[app.active] !== tab || !writable(app)) return layout(app, tab);
    if (ch.state !== 'bound' && ch.state !== 'unbound' && ch.state !== 'binding') return;
    const own = size(app, tab);
    if (tab.sentSize && tab.sentSize.cols === own.cols && tab.sentSize.rows === own.rows) return layout(app, tab);
    tab.sentSize = own;
    tab.resizing = true;
    ch.resize(own.cols, own.rows)
      .catch((e: unknown) => {
        if (!(e instanceof MuxError && ['unknown_channel', 'disconnected', 'session_closed'].includes(e.kind))) showError(app, e);
      })
      .finally(() => {
        tab.resizing = false;
        layout(app, tab);
      });
  }, delay);
}

/** Lays the tab out again after its pane changed size, and tells the gateway if it is visible. */
export function safeFit(app: App, tab: Tab): void {
  layout(app, tab);
  if (tab.channel && app.tabs[app.active] === tab) scheduleResize(app, tab);
}

// --- renderer: WebGL only for the visible tab (browsers cap live WebGL contexts)

export function enableWebgl(app: App, tab: Tab): void {
  if (!webglWanted(app) || app.webglBroken || tab.webgl) return;
  try {
    const addon = new WebglAddon();
    addon.onContextLoss(() => {
      disableWebgl(app, tab);
    });
    tab.term.loadAddon(addon);
    tab.webgl = addon;
  } catch (e) {
    app.webglBroken = true;
    console.warn('muxterm: WebGL renderer unavailable, using the DOM renderer', e);
  }
}

export function disableWebgl(app: App, tab: Tab): void {
  const a = tab.webgl;
  tab.webgl = null;
  if (!a) return;
  try {
    a.dispose();
  } catch {
    /* already gone */
  }
}

export function activate(app: App, i: number): void {
  if (i < 0 || i >= app.tabs.length) return;
  const next = app.tabs[i]!;
  const prev = app.tabs[app.active];
  if (prev && prev !== next) {
    prev.pane.classList.remove('active');
    disableWebgl(app, prev);
  }
  app.active = i;
  next.pane.classList.add('active');
  enableWebgl(app, next); // first: the fit measures with the renderer the tab is drawn with
  safeFit(app, next);
  renderTabs(app);
  next.tabEl.scrollIntoView({ block: 'nearest', inline: 'nearest' });
  next.term.focus();
  updateTitle(app);
  saveLayout(app);
}

export function removeTab(app: App, tab: Tab): void {
  const i = app.tabs.indexOf(tab);
  if (i < 0) return;
  clearTimeout(tab.resizeTimer);
  dropQueued(tab);
  tab.transfer?.cancel('the tab closed; transfer aborted');
  disableWebgl(app, tab);
  tab.term.dispose();
  tab.pane.remove();
  tab.tabEl.remove();
  app.tabs.splice(i, 1);
  if (i === app.active) {
    app.active = -1;
    if (app.tabs.length > 0) activate(app, Math.min(i, app.tabs.length - 1));
  } else if (i < app.active) {
    app.active--;
  }
  renderTabs(app);
  updateEmpty(app);
  updateTitle(app);
  saveLayout(app);
  scheduleDetachedRefresh(app);
}
