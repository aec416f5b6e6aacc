// The muxterm browser UI: one socket, one xterm.js terminal per session tab.
import { Terminal, type ITheme } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import { SearchAddon } from '@xterm/addon-search';
import { Unicode11Addon } from '@xterm/addon-unicode11';
import { WebLinksAddon } from '@xterm/addon-web-links';
import { WebglAddon } from '@xterm/addon-webgl';
import {
  MuxClient,
  MuxError,
  ReplayGuard,
  type Channel,
  type ConnectionState,
  type ExitStatus,
  type SessionInfo,
} from '@muxterm/client';

// ---------------------------------------------------------------------------------------------
// configuration

const query = new URLSearchParams(location.search);
/** `?renderer=dom` disables WebGL. */
const webglWanted = query.get('renderer') !== 'dom';
/** Set after WebGL failed once: it will fail again, stay on the DOM renderer. */
let webglBroken = false;

const RESIZE_DEBOUNCE_MS = 150;
/** While the socket is down, how often the page asks /auth/check whether its token still works. */
const AUTH_CHECK_MS = 2000;
/** localStorage key of the tab order and the active tab (session ids). */
const LAYOUT_KEY = 'muxterm.tabs';
const FIT_DEBOUNCE_MS = 50;

const theme: ITheme = {
  background: '#1e1f22',
  foreground: '#d4d4d4',
  cursor: '#d4d4d4',
  selectionBackground: '#264f78',
};

/** `ws(s)://host/ws` of the page's own origin; the auth cookie rides along. */
export function webSocketUrl(loc: { protocol: string; host: string }): string {
  return `${loc.protocol === 'https:' ? 'wss:' : 'ws:'}//${loc.host}/ws`;
}

// ---------------------------------------------------------------------------------------------
// DOM

function el<T extends HTMLElement>(id: string): T {
  const e = document.getElementById(id);
  if (!e) throw new Error(`#${id} missing from index.html`);
  return e as T;
}

const tabsEl = el<HTMLElement>('tabs');
const termsEl = el<HTMLElement>('terms');
const emptyEl = el<HTMLElement>('empty');
const connEl = el<HTMLElement>('conn');
const connText = el<HTMLElement>('conn-text');
const detachedToggle = el<HTMLButtonElement>('detached-toggle');
const detachedCount = el<HTMLElement>('detached-count');
const detachedPanel = el<HTMLElement>('detached-panel');
const detachedList = el<HTMLUListElement>('detached-list');
const detachedEmpty = el<HTMLElement>('detached-empty');
const searchForm = el<HTMLFormElement>('search');
const searchInput = el<HTMLInputElement>('search-input');
const toastEl = el<HTMLElement>('toast');
const signinEl = el<HTMLElement>('signin');
const signinWhy = el<HTMLElement>('signin-why');
const signinForm = el<HTMLFormElement>('signin-form');
const signinToken = el<HTMLInputElement>('signin-token');
const signinError = el<HTMLElement>('signin-error');
const helpEl = el<HTMLElement>('help');
const confirmEl = el<HTMLElement>('confirm');
const confirmText = el<HTMLElement>('confirm-text');

// `/?token=…` (a URL pasted without /auth): the page signs in with it (through /auth) at start,
// and the token leaves the address bar now.
const urlToken = query.get('token');
/** `?signin=invalid`: /auth refused the token of the URL a person opened. */
const urlRefused = query.get('signin') === 'invalid';
if (urlToken !== null || urlRefused) {
  query.delete('token');
  query.delete('signin');
  const rest = query.toString();
  history.replaceState(null, '', location.pathname + (rest ? `?${rest}` : '') + location.hash);
}

// ---------------------------------------------------------------------------------------------
// tabs

interface Tab {
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
  /** Input typed before the tab's session.open answered; sent in order once it has. */
  early: Array<string | Uint8Array>;
}

/** Sends input to the tab's channel, or keeps it until the channel exists. */
function sendInput(tab: Tab, data: string | Uint8Array): void {
  if (tab.exited || tab.closed) {
    // The program is gone: Enter starts the same command again in this tab; the rest is dropped.
    if (data === '\r' && !tab.restarting && !tab.leaving) void restartTab(tab).catch(showError);
    return;
  }
  if (tab.channel) tab.channel.write(data);
  else if (tab.early.length < 1024) tab.early.push(data);
}

const tabs: Tab[] = [];
let active = -1;

const client = new MuxClient(webSocketUrl(location), {
  client: { name: 'muxterm-web', version: '0.1.0' },
});

function clamp(n: number, lo: number, hi: number): number {
  return Math.max(lo, Math.min(hi, Math.floor(n)));
}

/** The size that fits the tab's pane (its own size, whatever the session's). */
function size(tab: Tab): { cols: number; rows: number } {
  let d: { cols: number; rows: number } | undefined;
  try {
    d = tab.fit.proposeDimensions();
  } catch {
    d = undefined;
  }
  if (!d || !(d.cols > 0) || !(d.rows > 0) || !Number.isFinite(d.cols)) d = tab.sentSize ?? { cols: tab.term.cols, rows: tab.term.rows };
  return {
    cols: clamp(d.cols, 1, client.limits.maxCols),
    rows: clamp(d.rows, 1, client.limits.maxRows),
  };
}

function notice(text: string): string {
  // A dim line of our own between the program's output.
  return `\x1b[0m\r\n\x1b[2m[muxterm: ${text}]\x1b[0m\r\n`;
}

function exitText(s: ExitStatus): string {
  return s.signal ? `process killed by signal ${s.signal}` : `process exited with code ${s.code}`;
}

function tabTitle(tab: Tab): string {
  if (tab.oscTitle) return tab.oscTitle;
  if (tab.cmd && tab.cmd.length > 0 && tab.session) return `${tab.cmd.join(' ')} ${tab.session.slice(0, 6)}`;
  if (tab.session) return `shell ${tab.session.slice(0, 6)}`;
  return 'opening…';
}

function createTab(session: string, cmd?: string[]): Tab {
  const pane = document.createElement('div');
  pane.className = 'pane';
  termsEl.append(pane);
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
  tabsEl.append(tabEl);

  const term = new Terminal({
    allowProposedApi: true, // term.unicode (unicode11)
    cursorBlink: true,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", "Cascadia Mono", Menlo, Consolas, monospace',
    fontSize: 14,
    // The DOM renderer sizes each row to the font's ascent + descent rounded down to whole
    // device pixels and lets the next row cover what hangs below; an underscore sits at the
    // very bottom of the descent (DejaVu Sans Mono: exactly on it) and vanished. A little
    // leading keeps every glyph row inside its cell; WebGL draws the same either way.
    lineHeight: 1.1,
    scrollback: 10000,
    theme,
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
    guard: new ReplayGuard((bytes, parsed) => term.write(bytes, parsed)),
    sessionSize: null,
    sentSize: null,
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
    early: [],
  };

  // xterm.js measures on open: the pane must be laid out, even if it is not the active one.
  pane.classList.add('measuring');
  term.open(pane);
  safeFit(tab);
  pane.classList.remove('measuring');

  term.attachCustomKeyEventHandler((ev) => shortcutFor(ev) === null);
  // A replay never produces input: while replayed bytes are being parsed, xterm.js's automatic
  // answers to the queries in them (DA1, OSC 10/11, DECRQM, …) are dropped; keys still go.
  term.onData((data) => {
    if (tab.guard.allows(data)) sendInput(tab, data);
  });
  term.onBinary((data) => {
    if (!tab.guard.allows(data)) return;
    const bytes = new Uint8Array(data.length);
    for (let i = 0; i < data.length; i++) bytes[i] = data.charCodeAt(i) & 0xff;
    sendInput(tab, bytes);
  });
  term.onTitleChange((t) => {
    tab.oscTitle = t;
    renderTab(tab);
    updateTitle();
  });

  tabEl.addEventListener('mousedown', (ev) => {
    if (ev.button === 1) {
      ev.preventDefault();
      void askClose(tab);
    }
  });
  tabEl.addEventListener('click', (ev) => {
    const t = ev.target as HTMLElement;
    if (t === closeBtn) void askClose(tab);
    else if (t === detachBtn) void detachTab(tab).catch(showError);
    else activate(tabs.indexOf(tab));
  });
  // Drag a tab to reorder (the order is kept across reloads).
  tabEl.draggable = true;
  tabEl.addEventListener('dragstart', (ev) => {
    ev.dataTransfer?.setData('text/x-muxterm-tab', String(tabs.indexOf(tab)));
  });
  tabEl.addEventListener('dragover', (ev) => ev.preventDefault());
  tabEl.addEventListener('drop', (ev) => {
    ev.preventDefault();
    const from = Number(ev.dataTransfer?.getData('text/x-muxterm-tab'));
    if (Number.isInteger(from)) moveTab(from, tabs.indexOf(tab));
  });

  tabs.push(tab);
  renderTab(tab);
  updateEmpty();
  return tab;
}

function renderTab(tab: Tab): void {
  const title = tabTitle(tab);
  tab.titleEl.textContent = title;
  tab.tabEl.title = `${title}\n${tab.session || ''}`.trim();
  tab.tabEl.classList.toggle('active', tabs[active] === tab);
  tab.tabEl.setAttribute('aria-selected', String(tabs[active] === tab));
  tab.tabEl.classList.toggle('exited', tab.exited !== null);
  tab.tabEl.classList.toggle('closed', tab.closed !== null);
  let badge = '';
  if (tab.exited) badge = tab.exited.signal ? `✕ ${tab.exited.signal}` : `exit ${tab.exited.code}`;
  if (tab.closed) badge = badge ? `${badge}, ${tab.closed}` : tab.closed;
  tab.badgeEl.textContent = badge;
  tab.badgeEl.hidden = badge === '';
}

/** The page title follows the focused terminal's title (OSC 0/2). */
function updateTitle(): void {
  const tab = tabs[active];
  document.title = tab ? `${tabTitle(tab)} · muxterm` : 'muxterm';
}

/** Moves the tab at `from` to `to` (keeping the active one active). */
function moveTab(from: number, to: number): void {
  if (from === to || from < 0 || to < 0 || from >= tabs.length || to >= tabs.length) return;
  const cur = tabs[active];
  const [t] = tabs.splice(from, 1);
  tabs.splice(to, 0, t!);
  for (const x of tabs) tabsEl.append(x.tabEl);
  active = cur ? tabs.indexOf(cur) : -1;
  renderTabs();
  saveLayout();
}

// --- the tab order and the active tab, kept across reloads

interface Layout {
  order: string[];
  active: string | null;
}

function saveLayout(): void {
  if (restoring) return;
  const layout: Layout = { order: tabs.filter((t) => t.session).map((t) => t.session), active: tabs[active]?.session || null };
  try {
    localStorage.setItem(LAYOUT_KEY, JSON.stringify(layout));
  } catch {
    /* storage disabled */
  }
}

function loadLayout(): Layout {
  try {
    const v = JSON.parse(localStorage.getItem(LAYOUT_KEY) ?? 'null') as Partial<Layout> | null;
    if (v && Array.isArray(v.order)) return { order: v.order.filter((x) => typeof x === 'string'), active: typeof v.active === 'string' ? v.active : null };
  } catch {
    /* corrupt: start over */
  }
  return { order: [], active: null };
}

/** True while the page re-attaches its sessions after a load: the stored layout stays. */
let restoring = false;

function renderTabs(): void {
  for (const t of tabs) renderTab(t);
}

function updateEmpty(): void {
  emptyEl.hidden = tabs.length > 0;
}

function bindChannel(tab: Tab, ch: Channel): void {
  tab.channel = ch;
  tab.session = ch.session;
  if (ch.cols > 0 && ch.rows > 0) tab.sessionSize = { cols: ch.cols, rows: ch.rows };
  layout(tab);
  for (const d of tab.early.splice(0)) ch.write(d);
  ch.listen({
    data(bytes, _ch, replay) {
      if (tab.channel !== ch) return; // a session this tab restarted away from
      // Raw bytes: xterm.js decodes UTF-8 itself, also across frames. Ack once it consumed them.
      // bytes is a view valid until the next event; xterm.js keeps what it is given: copy.
      const n = bytes.length;
      tab.guard.output(bytes.slice(), replay, () => ch.consumed(n));
    },
    size(cols, rows) {
      if (tab.channel !== ch) return;
      // The session's size (another viewer's under the gateway's --window-size policy).
      tab.sessionSize = { cols, rows };
      layout(tab);
    },
    gap(lost) {
      tab.term.write(notice(`${lost} bytes lost`));
    },
    exit(status) {
      if (tab.channel !== ch) return;
      tab.exited = status;
      tab.term.write(notice(`${exitText(status)}; press Enter to restart`));
      renderTab(tab);
    },
    closed(reason) {
      if (tab.leaving || tab.channel !== ch) return;
      tab.closed = reason;
      tab.term.write(notice(`session closed (${reason}); press Enter to start it again`));
      renderTab(tab);
      scheduleDetachedRefresh();
    },
  });
  renderTab(tab);
  if (tabs[active] === tab) updateTitle();
  saveLayout();
}

/**
 * Draws the tab at the session's size (the gateway's, which another viewer may have set) rather
 * than at its own, and says so where the two differ.
 */
function layout(tab: Tab): void {
  const own = size(tab);
  const want = tab.sessionSize ?? own;
  if (tab.term.cols !== want.cols || tab.term.rows !== want.rows) {
    try {
      tab.term.resize(want.cols, want.rows);
    } catch {
      /* disposed */
    }
  }
  const differs = tab.sessionSize !== null && (want.cols !== own.cols || want.rows !== own.rows);
  tab.noteEl.hidden = !differs;
  tab.pane.classList.toggle('foreign-size', differs);
  if (differs) {
    tab.noteEl.textContent = `${want.cols}×${want.rows} (another viewer)`;
    tab.noteEl.title =
      `The session is ${want.cols}×${want.rows}, set by another viewer of it; this window fits ` +
      `${own.cols}×${own.rows}. Typing or resizing here may make it yours (the gateway's --window-size policy).`;
  }
}

/** Sends our fitted size to the gateway when it changed since we last sent it. */
function scheduleResize(tab: Tab, delay = RESIZE_DEBOUNCE_MS): void {
  clearTimeout(tab.resizeTimer);
  tab.resizeTimer = setTimeout(() => {
    tab.resizeTimer = undefined;
    const ch = tab.channel;
    if (!ch || tab.closed || tab.leaving) return;
    if (ch.state !== 'bound' && ch.state !== 'unbound' && ch.state !== 'binding') return;
    const own = size(tab);
    if (tab.sentSize && tab.sentSize.cols === own.cols && tab.sentSize.rows === own.rows) return;
    tab.sentSize = own;
    ch.resize(own.cols, own.rows).catch((e: unknown) => {
      if (!(e instanceof MuxError && ['unknown_channel', 'disconnected', 'session_closed'].includes(e.kind))) showError(e);
    });
  }, delay);
}

/** Lays the (visible) tab out again after its pane changed size, and tells the gateway. */
function safeFit(tab: Tab): void {
  layout(tab);
  if (tab.channel) scheduleResize(tab);
}

// --- renderer: WebGL only for the visible tab (browsers cap live WebGL contexts)

function enableWebgl(tab: Tab): void {
  if (!webglWanted || webglBroken || tab.webgl) return;
  try {
    const addon = new WebglAddon();
    addon.onContextLoss(() => {
      disableWebgl(tab);
    });
    tab.term.loadAddon(addon);
    tab.webgl = addon;
  } catch (e) {
    webglBroken = true;
    console.warn('muxterm: WebGL renderer unavailable, using the DOM renderer', e);
  }
}

function disableWebgl(tab: Tab): void {
  const a = tab.webgl;
  tab.webgl = null;
  if (!a) return;
  try {
    a.dispose();
  } catch {
    /* already gone */
  }
}

function activate(i: number): void {
  if (i < 0 || i >= tabs.length) return;
  const next = tabs[i]!;
  const prev = tabs[active];
  if (prev && prev !== next) {
    prev.pane.classList.remove('active');
    disableWebgl(prev);
  }
  active = i;
  next.pane.classList.add('active');
  safeFit(next);
  enableWebgl(next);
  renderTabs();
  next.tabEl.scrollIntoView({ block: 'nearest', inline: 'nearest' });
  next.term.focus();
  updateTitle();
  saveLayout();
}

function removeTab(tab: Tab): void {
  const i = tabs.indexOf(tab);
  if (i < 0) return;
  clearTimeout(tab.resizeTimer);
  disableWebgl(tab);
  tab.term.dispose();
  tab.pane.remove();
  tab.tabEl.remove();
  tabs.splice(i, 1);
  if (i === active) {
    active = -1;
    if (tabs.length > 0) activate(Math.min(i, tabs.length - 1));
  } else if (i < active) {
    active--;
  }
  renderTabs();
  updateEmpty();
  updateTitle();
  saveLayout();
  scheduleDetachedRefresh();
}

// --- actions

/** Refuses what cannot work: a tab without a connection, or without a valid token. */
function checkUsable(): void {
  if (signedOut) throw new Error('not signed in: open the URL the gateway printed, or paste its token');
  if (client.state !== 'connected') throw new Error(`not connected (${client.state}): try again once connected`);
}

async function newTab(): Promise<string> {
  checkUsable();
  const tab = createTab('');
  activate(tabs.indexOf(tab));
  let ch: Channel;
  const s = size(tab);
  tab.sentSize = s;
  try {
    ch = await client.open(s);
  } catch (e) {
    removeTab(tab);
    throw e;
  }
  if (!tabs.includes(tab)) {
    // The tab was closed while the session was being opened.
    void ch.kill().catch(() => {});
    return ch.session;
  }
  bindChannel(tab, ch);
  scheduleResize(tab, 0); // the pane may have changed size meanwhile
  return ch.session;
}

/** The program of an exited tab runs again in a new session, in the same tab. */
async function restartTab(tab: Tab): Promise<void> {
  if (tab.restarting || tab.leaving) return;
  checkUsable();
  tab.restarting = true;
  try {
    const old = tab.session;
    const s = size(tab);
    let ch: Channel;
    try {
      ch = await client.open(tab.cmd && tab.cmd.length > 0 ? { ...s, cmd: tab.cmd } : s);
    } catch (e) {
      // A session attached from elsewhere reports the gateway's own shell as its command, which
      // an explicit `cmd` may not name (--allow-cmd): a one-word command falls back to the shell.
      if (!(e instanceof MuxError && e.kind === 'forbidden' && tab.cmd && tab.cmd.length === 1)) throw e;
      ch = await client.open(s);
      tab.cmd = undefined;
    }
    if (!tabs.includes(tab) || tab.leaving) {
      void ch.kill().catch(() => {});
      return;
    }
    // The exited session is gone for good: free its slot.
    if (old) void client.kill(old).catch(() => {});
    tab.exited = null;
    tab.closed = null;
    tab.oscTitle = '';
    tab.sentSize = s;
    tab.sessionSize = null;
    tab.guard.reset();
    tab.term.reset();
    bindChannel(tab, ch);
    updateTitle();
    scheduleDetachedRefresh();
  } finally {
    tab.restarting = false;
  }
}

async function reattach(session: string, focus = true, cmd?: string[]): Promise<void> {
  const existing = tabs.find((t) => t.session === session);
  if (existing) {
    if (focus) activate(tabs.indexOf(existing));
    return;
  }
  checkUsable();
  const tab = createTab(session, cmd);
  if (focus || active < 0) activate(tabs.indexOf(tab));
  let ch: Channel;
  try {
    // No `from`: replay everything the ring still holds. Our fitted size counts for the
    // gateway's window-size policy; the result says what the session's size is.
    const s = size(tab);
    tab.sentSize = s;
    ch = await client.attach(session, undefined, s);
  } catch (e) {
    removeTab(tab);
    throw e;
  }
  if (!tabs.includes(tab)) {
    void ch.detach().catch(() => {});
    return;
  }
  bindChannel(tab, ch);
  const r = ch.attachResult;
  if (r?.exit) tab.exited = r.exit; // the exit notice comes after the replay
  scheduleResize(tab, 0);
  scheduleDetachedRefresh();
}

/**
 * Close from the UI (×, middle-click, Alt+Shift+W): a tab whose program still runs asks first,
 * offering detach (the session keeps running) as the alternative; an exited tab just closes.
 */
async function askClose(tab: Tab | undefined): Promise<void> {
  if (!tab || tab.leaving) return;
  try {
    if (tab.session && tab.exited === null && tab.closed === null) {
      const choice = await confirmClose(tab);
      if (choice === 'detach') return await detachTab(tab);
      if (choice !== 'kill') return;
    }
    await closeTab(tab);
  } catch (e) {
    showError(e);
  }
}

let confirmResolve: ((v: 'kill' | 'detach' | 'cancel') => void) | null = null;

function confirmClose(tab: Tab): Promise<'kill' | 'detach' | 'cancel'> {
  confirmResolve?.('cancel');
  confirmText.textContent = `“${tabTitle(tab)}” is still running. Closing the tab kills it; detach keeps it running (find it under Detached).`;
  confirmEl.hidden = false;
  el<HTMLButtonElement>('confirm-kill').focus();
  return new Promise((resolve) => {
    confirmResolve = (v) => {
      confirmResolve = null;
      confirmEl.hidden = true;
      tabs[active]?.term.focus();
      resolve(v);
    };
  });
}

for (const [id, v] of [
  ['confirm-kill', 'kill'],
  ['confirm-detach', 'detach'],
  ['confirm-cancel', 'cancel'],
] as const) {
  el<HTMLButtonElement>(id).addEventListener('click', () => confirmResolve?.(v));
}
confirmEl.addEventListener('keydown', (ev) => {
  if (ev.key === 'Escape') {
    ev.preventDefault();
    confirmResolve?.('cancel');
  }
});

/** Kills the session and removes the tab. */
async function closeTab(tab: Tab | undefined): Promise<void> {
  if (!tab || !tabs.includes(tab)) throw new Error('no such tab');
  if (tab.leaving) return;
  tab.leaving = true;
  if (tab.session && tab.closed === null) {
    try {
      await client.kill(tab.session);
    } catch (e) {
      if (!(e instanceof MuxError && (e.kind === 'unknown_session' || e.kind === 'session_closed'))) {
        tab.leaving = false;
        throw e;
      }
    }
  }
  removeTab(tab);
}

/** Detaches the channel (the session keeps running) and removes the tab. */
async function detachTab(tab: Tab | undefined): Promise<void> {
  if (!tab || !tabs.includes(tab)) throw new Error('no such tab');
  if (tab.leaving) return;
  tab.leaving = true;
  try {
    await tab.channel?.detach();
  } catch (e) {
    tab.leaving = false;
    throw e;
  }
  removeTab(tab);
}

/** This user's sessions that no tab of this page shows. */
async function detachedSessions(): Promise<SessionInfo[]> {
  const all = await client.list();
  const mine = new Set(tabs.map((t) => t.session));
  return all.filter((s) => !mine.has(s.session));
}

// --- the detached-sessions panel

let detachedTimer: ReturnType<typeof setTimeout> | undefined;

function scheduleDetachedRefresh(): void {
  clearTimeout(detachedTimer);
  detachedTimer = setTimeout(() => void refreshDetached(), 100);
}

async function refreshDetached(): Promise<void> {
  let list: SessionInfo[];
  try {
    list = await detachedSessions();
  } catch {
    return;
  }
  detachedCount.textContent = String(list.length);
  detachedToggle.classList.toggle('has-sessions', list.length > 0);
  detachedList.replaceChildren(
    ...list.map((s) => {
      const li = document.createElement('li');
      const label = document.createElement('span');
      label.className = 'label';
      const name = s.name || (s.cmd && s.cmd.length ? s.cmd.join(' ') : 'shell');
      const state = s.exit ? exitText(s.exit) : s.viewers > 0 ? `attached elsewhere (${s.viewers})` : 'running';
      label.textContent = `${name} · ${s.session.slice(0, 8)} · ${state}`;
      label.title = `${s.session}\ncreated ${s.created}\npid ${s.pid}, ${s.cols}×${s.rows}`;
      const attach = document.createElement('button');
      attach.type = 'button';
      attach.textContent = 'Attach';
      attach.addEventListener('click', () => {
        detachedPanel.hidden = true;
        detachedToggle.setAttribute('aria-expanded', 'false');
        void reattach(s.session, true, s.cmd).catch(showError);
      });
      const kill = document.createElement('button');
      kill.type = 'button';
      kill.textContent = 'Kill';
      kill.className = 'danger';
      kill.addEventListener('click', () => {
        void client
          .kill(s.session)
          .catch(showError)
          .finally(() => void refreshDetached());
      });
      li.append(label, attach, kill);
      return li;
    }),
  );
  detachedEmpty.hidden = list.length > 0;
}

detachedToggle.addEventListener('click', () => {
  const open = detachedPanel.hidden;
  detachedPanel.hidden = !open;
  detachedToggle.setAttribute('aria-expanded', String(open));
  if (open) void refreshDetached();
});
document.addEventListener('mousedown', (ev) => {
  if (!detachedPanel.hidden && !(ev.target as HTMLElement).closest('#detached-wrap')) {
    detachedPanel.hidden = true;
    detachedToggle.setAttribute('aria-expanded', 'false');
  }
});
el<HTMLButtonElement>('new-tab').addEventListener('click', () => void newTab().catch(showError));
el<HTMLButtonElement>('help-toggle').addEventListener('click', () => toggleHelp());

function toggleHelp(show = helpEl.hidden): void {
  helpEl.hidden = !show;
  if (!show) tabs[active]?.term.focus();
}
helpEl.addEventListener('click', (ev) => {
  if (ev.target === helpEl || (ev.target as HTMLElement).closest('.close-help')) toggleHelp(false);
});

// --- search

function toggleSearch(show = searchForm.hidden): void {
  searchForm.hidden = !show;
  if (show) {
    searchInput.focus();
    searchInput.select();
  } else {
    tabs[active]?.search.clearDecorations();
    tabs[active]?.term.focus();
  }
}

searchInput.addEventListener('keydown', (ev) => {
  const tab = tabs[active];
  if (ev.key === 'Escape') {
    ev.preventDefault();
    toggleSearch(false);
  } else if (ev.key === 'Enter' && tab && searchInput.value) {
    ev.preventDefault();
    if (ev.shiftKey) tab.search.findPrevious(searchInput.value);
    else tab.search.findNext(searchInput.value);
  }
});
searchForm.addEventListener('submit', (ev) => ev.preventDefault());

// --- keyboard

type Action = 'new' | 'close' | 'detach' | 'next' | 'prev' | 'copy' | 'paste' | 'search' | 'help';

/**
 * The page's shortcuts. Browsers keep Ctrl+T/W/N, Ctrl+Shift+T/W/N, Ctrl+Tab and
 * Ctrl+PageUp/PageDown for themselves (a page never sees them), so tab actions use Alt+Shift,
 * which reaches the page in Chrome and Firefox and which shells and editors rarely bind. Keys
 * are matched by `code` (the physical key), so a layout or macOS's Option characters do not
 * matter. Listed for people in index.html's help and in README.md.
 */
function shortcutFor(ev: KeyboardEvent): Action | null {
  if (ev.metaKey || !ev.shiftKey) return null;
  if (ev.altKey && !ev.ctrlKey) {
    switch (ev.code) {
      case 'KeyT':
        return 'new';
      case 'KeyW':
        return 'close';
      case 'KeyD':
        return 'detach';
      case 'ArrowRight':
      case 'BracketRight':
        return 'next';
      case 'ArrowLeft':
      case 'BracketLeft':
        return 'prev';
      case 'Slash':
        return 'help';
    }
    return null;
  }
  if (ev.ctrlKey && !ev.altKey) {
    switch (ev.code) {
      case 'KeyC':
        return 'copy';
      case 'KeyV':
        return 'paste';
      case 'KeyF':
        return 'search';
    }
  }
  return null;
}

function cycle(step: number): void {
  if (tabs.length === 0) return;
  activate((active + step + tabs.length) % tabs.length);
}

async function copySelection(tab: Tab): Promise<void> {
  const text = tab.term.getSelection();
  if (!text) return;
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const ta = document.createElement('textarea');
    ta.value = text;
    ta.style.position = 'fixed';
    ta.style.opacity = '0';
    document.body.append(ta);
    ta.select();
    document.execCommand('copy');
    ta.remove();
    tab.term.focus();
  }
}

window.addEventListener(
  'keydown',
  (ev) => {
    if (ev.type !== 'keydown') return;
    const action = shortcutFor(ev);
    if (!action) return;
    if (signedOut || !confirmEl.hidden) return;
    // Capture phase: xterm.js never sees the key, so it sends nothing to the PTY.
    ev.stopPropagation();
    lastShortcut = action;
    const tab = tabs[active];
    if (action === 'paste') {
      // The browser's own paste (no clipboard permission needed) lands in xterm.js's textarea,
      // which turns it into onData (bracketed paste aware) -> Channel.write, chunked to
      // limits.maxInputBytes per frame.
      const focused = document.activeElement;
      if (focused instanceof HTMLInputElement) return; // the search box: its own paste
      if (tab && focused !== tab.term.textarea) {
        ev.preventDefault();
        navigator.clipboard
          ?.readText()
          .then((text) => tab.term.paste(text))
          .catch(() => {});
      }
      return;
    }
    ev.preventDefault();
    switch (action) {
      case 'new':
        void newTab().catch(showError);
        break;
      case 'close':
        if (tab) void askClose(tab);
        break;
      case 'detach':
        if (tab) void detachTab(tab).catch(showError);
        break;
      case 'next':
        cycle(1);
        break;
      case 'prev':
        cycle(-1);
        break;
      case 'copy':
        if (tab) void copySelection(tab);
        break;
      case 'search':
        toggleSearch();
        break;
      case 'help':
        toggleHelp();
        break;
    }
  },
  { capture: true },
);

/** The last shortcut the page acted on (for the browser tests). */
let lastShortcut: Action | null = null;

// --- layout

let fitTimer: ReturnType<typeof setTimeout> | undefined;
new ResizeObserver(() => {
  clearTimeout(fitTimer);
  fitTimer = setTimeout(() => {
    const tab = tabs[active];
    if (tab) safeFit(tab); // our fitted size -> debounced session.resize
  }, FIT_DEBOUNCE_MS);
}).observe(termsEl);

// --- connection state

function showState(s: ConnectionState): void {
  document.body.dataset['state'] = s;
  connEl.dataset['state'] = s;
  connText.textContent = s;
  connEl.title = s === 'connected' && client.server ? `${client.server.name} ${client.server.version}` : s;
}

client.on('state', (s) => {
  showState(s);
  if (s === 'connected') scheduleDetachedRefresh();
  else if (s === 'connecting' || s === 'reconnecting') scheduleAuthCheck(0);
});

// --- signing in
//
// A refused WebSocket upgrade is only a close event to a page (no status), so while the socket
// is down the page asks GET /auth/check, which answers 401 when the token (the HttpOnly cookie)
// is missing or wrong. Then it stops reconnecting and explains how to sign in; anything else is
// "the gateway is down" and the client keeps reconnecting.

type AuthState = 'ok' | 'refused' | 'unreachable';

async function checkAuth(): Promise<AuthState> {
  try {
    const r = await fetch('/auth/check', { cache: 'no-store', credentials: 'same-origin' });
    if (r.status === 401) return 'refused';
    return r.ok ? 'ok' : 'unreachable';
  } catch {
    return 'unreachable';
  }
}

let signedOut = false;
let authTimer: ReturnType<typeof setTimeout> | undefined;

function scheduleAuthCheck(delay = AUTH_CHECK_MS): void {
  clearTimeout(authTimer);
  authTimer = setTimeout(() => {
    if (signedOut || client.state === 'connected' || client.state === 'closed') return;
    void checkAuth().then((a) => {
      if (a === 'refused') signOut(client.state === 'reconnecting' ? 'rejected' : 'none');
      else if (client.state !== 'connected') scheduleAuthCheck();
    });
  }, delay);
}

/** `GET /auth?token=…`: checks the token and sets the cookie (then redirects to /). */
async function signIn(tok: string): Promise<AuthState> {
  try {
    const r = await fetch(`/auth?token=${encodeURIComponent(tok)}`, { cache: 'no-store', credentials: 'same-origin' });
    if (r.status === 401) return 'refused';
    return r.ok ? 'ok' : 'unreachable';
  } catch {
    return 'unreachable';
  }
}

/** Stops the client and shows why and how to sign in. */
function signOut(why: 'none' | 'rejected' | 'wrong'): void {
  if (signedOut) return;
  signedOut = true;
  clearTimeout(authTimer);
  client.close(); // no endless reconnect against a gateway that refuses us
  document.body.dataset['auth'] = 'refused';
  showState('closed');
  connText.textContent = 'signed out';
  signinWhy.textContent =
    why === 'rejected'
      ? 'The gateway no longer accepts this page’s token: it was probably restarted with a new one (without --token it makes a new token at each start). Your sessions ended with it.'
      : why === 'wrong'
        ? 'The gateway does not accept the token in the address.'
        : 'This page has no valid token: it was opened without one, or with a token this gateway does not accept.';
  signinEl.hidden = false;
  signinToken.focus();
}

signinForm.addEventListener('submit', (ev) => {
  ev.preventDefault();
  const tok = signinToken.value.trim();
  if (!tok) return;
  signinError.hidden = true;
  void signIn(tok).then((a) => {
    if (a === 'ok') {
      location.replace('/'); // a fresh page with the cookie: it attaches the sessions
      return;
    }
    signinError.textContent = a === 'refused' ? 'The gateway does not accept this token.' : 'The gateway cannot be reached.';
    signinError.hidden = false;
  });
});
client.on('error', (e) => console.warn('muxterm:', e.kind, e.message, e.data));
window.addEventListener('online', () => client.reconnectNow());

// --- errors

let toastTimer: ReturnType<typeof setTimeout> | undefined;

function showError(e: unknown): void {
  const msg = e instanceof MuxError ? `${e.message} (${e.kind})` : e instanceof Error ? e.message : String(e);
  console.warn('muxterm:', e);
  toastEl.textContent = msg;
  toastEl.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => {
    toastEl.hidden = true;
  }, 5000);
}

// ---------------------------------------------------------------------------------------------
// test hook (browser tests drive and inspect the page through window.muxterm)

export interface MuxtermTestHook {
  tabs(): Array<{ session: string; channel: number; title: string; exited: null | { code: number; signal: string | null } }>;
  activeIndex(): number;
  bufferText(i?: number): string;
  state(): string;
  newTab(): Promise<string>;
  closeTab(i: number): Promise<void>;
  detachTab(i: number): Promise<void>;
  detached(): Promise<SessionInfo[]>;
  reattach(session: string): Promise<void>;
  offsets(): Record<string, number>;
  /** The terminal's drawn size, the session's size, our fitted size. */
  sizes(i?: number): { term: [number, number]; session: [number, number] | null; own: [number, number] } | null;
  signedOut(): boolean;
  lastShortcut(): string | null;
  resetShortcut(): void;
  replayDropped(i?: number): number;
  activate(i: number): void;
  /** Whether the active tab is parsing replayed output; types data as the keyboard would. */
  replaying(): boolean;
  input(data: string): void;
  moveTab(from: number, to: number): void;
  /** The viewport rectangle of column `col` in the first visible row whose text is `text`. */
  cellRect(text: string, col: number): { x: number; y: number; w: number; h: number } | null;
}

declare global {
  interface Window {
    muxterm: MuxtermTestHook;
  }
}

/** The terminal's buffer as text: one line per row, right-trimmed, wrapped rows joined. */
function bufferText(tab: Tab | undefined): string {
  if (!tab) return '';
  const buf = tab.term.buffer.active;
  const out: string[] = [];
  for (let y = 0; y < buf.length; y++) {
    const line = buf.getLine(y);
    if (!line) continue;
    const next = buf.getLine(y + 1);
    const text = line.translateToString(!next?.isWrapped);
    if (line.isWrapped && out.length > 0) out[out.length - 1] += text;
    else out.push(text);
  }
  while (out.length > 0 && out[out.length - 1] === '') out.pop();
  return out.join('\n');
}

window.muxterm = {
  tabs: () =>
    tabs.map((t) => ({
      session: t.session,
      channel: t.channel?.id ?? 0,
      title: tabTitle(t),
      exited: t.exited ? { code: t.exited.code, signal: t.exited.signal } : null,
    })),
  activeIndex: () => active,
  bufferText: (i?: number) => bufferText(tabs[i ?? active]),
  state: () => client.state,
  newTab: () => newTab(),
  closeTab: (i: number) => closeTab(tabs[i]),
  detachTab: (i: number) => detachTab(tabs[i]),
  detached: () => detachedSessions(),
  reattach: (session: string) => reattach(session),
  offsets: () => {
    const o: Record<string, number> = {};
    for (const t of tabs) if (t.channel && t.session) o[t.session] = t.channel.offset;
    return o;
  },
  sizes: (i?: number) => {
    const t = tabs[i ?? active];
    if (!t) return null;
    const own = size(t);
    return {
      term: [t.term.cols, t.term.rows],
      session: t.sessionSize ? [t.sessionSize.cols, t.sessionSize.rows] : null,
      own: [own.cols, own.rows],
    };
  },
  signedOut: () => signedOut,
  lastShortcut: () => lastShortcut,
  resetShortcut: () => {
    lastShortcut = null;
  },
  replayDropped: (i?: number) => tabs[i ?? active]?.guard.dropped ?? 0,
  activate: (i: number) => activate(i),
  replaying: () => tabs[active]?.guard.replaying ?? false,
  input: (data: string) => tabs[active]?.term.input(data, true),
  moveTab: (from: number, to: number) => moveTab(from, to),
  cellRect: (text: string, col: number) => {
    const t = tabs[active];
    if (!t) return null;
    const buf = t.term.buffer.active;
    for (let r = 0; r < t.term.rows; r++) {
      if (buf.getLine(buf.viewportY + r)?.translateToString(true) !== text) continue;
      const screen = t.pane.querySelector('.xterm-screen');
      if (!screen) return null;
      const b = screen.getBoundingClientRect();
      const w = b.width / t.term.cols;
      const h = b.height / t.term.rows;
      return { x: b.left + col * w, y: b.top + r * h, w, h };
    }
    return null;
  },
};

// ---------------------------------------------------------------------------------------------
// start: reload the page and the sessions resume

showState('connecting');
updateEmpty();
void (async () => {
  try {
    if (urlRefused || (urlToken !== null && (await signIn(urlToken)) === 'refused')) {
      signOut('wrong');
      return;
    }
    // Without a valid token the socket would fail in silence, for ever: ask first.
    if ((await checkAuth()) === 'refused') {
      signOut('none');
      return;
    }
    await client.connect();
    if (tabs.length > 0) return; // the test hook (or the user) was faster
    const detached = await detachedSessions();
    if (tabs.length > 0) return;
    if (detached.length === 0) {
      await newTab();
      return;
    }
    // The order and the active tab of the last visit; sessions new since then go last.
    const saved = loadLayout();
    const rank = (id: string): number => {
      const i = saved.order.indexOf(id);
      return i < 0 ? saved.order.length : i;
    };
    detached.sort((a, b) => rank(a.session) - rank(b.session));
    const activeId = detached.some((s) => s.session === saved.active) ? saved.active : detached[0]!.session;
    restoring = true;
    try {
      for (const s of detached) {
        await reattach(s.session, s.session === activeId, s.cmd).catch(showError);
      }
    } finally {
      restoring = false;
    }
    const i = tabs.findIndex((t) => t.session === activeId);
    activate(i >= 0 ? i : 0);
  } catch (e) {
    showError(e);
  }
})();
