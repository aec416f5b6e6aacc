// The muxterm browser UI: one socket, one xterm.js terminal per session tab.
import { Terminal, type ITheme } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import { SearchAddon } from '@xterm/addon-search';
import { Unicode11Addon } from '@xterm/addon-unicode11';
import { WebLinksAddon } from '@xterm/addon-web-links';
import { WebglAddon } from '@xterm/addon-webgl';
import { MuxClient, MuxError, type Channel, type ConnectionState, type ExitStatus, type SessionInfo } from '@muxterm/client';

// ---------------------------------------------------------------------------------------------
// configuration

const query = new URLSearchParams(location.search);
/** `?renderer=dom` disables WebGL. */
const webglWanted = query.get('renderer') !== 'dom';
/** Set after WebGL failed once: it will fail again, stay on the DOM renderer. */
let webglBroken = false;

const RESIZE_DEBOUNCE_MS = 150;
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

// ---------------------------------------------------------------------------------------------
// tabs

interface Tab {
  session: string;
  channel: Channel | null;
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
  resizeTimer: ReturnType<typeof setTimeout> | undefined;
  /** Input typed before the tab's session.open answered; sent in order once it has. */
  early: Array<string | Uint8Array>;
}

/** Sends input to the tab's channel, or keeps it until the channel exists. */
function sendInput(tab: Tab, data: string | Uint8Array): void {
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

function size(tab: Tab): { cols: number; rows: number } {
  return {
    cols: clamp(tab.term.cols, 1, client.limits.maxCols),
    rows: clamp(tab.term.rows, 1, client.limits.maxRows),
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
  if (tab.session) return `shell ${tab.session.slice(0, 6)}`;
  return 'opening…';
}

function createTab(session: string): Tab {
  const pane = document.createElement('div');
  pane.className = 'pane';
  termsEl.append(pane);

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
  detachBtn.title = 'Detach: the session keeps running (Ctrl+Shift+D)';
  detachBtn.textContent = '⇱';
  const closeBtn = document.createElement('button');
  closeBtn.type = 'button';
  closeBtn.className = 'close';
  closeBtn.title = 'Close: kill the session (Ctrl+Shift+W)';
  closeBtn.textContent = '×';
  tabEl.append(titleEl, badgeEl, detachBtn, closeBtn);
  tabsEl.append(tabEl);

  const term = new Terminal({
    allowProposedApi: true, // term.unicode (unicode11)
    cursorBlink: true,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", "Cascadia Mono", Menlo, Consolas, monospace',
    fontSize: 14,
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
    channel: null,
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
    resizeTimer: undefined,
    early: [],
  };

  // xterm.js measures on open: the pane must be laid out, even if it is not the active one.
  pane.classList.add('measuring');
  term.open(pane);
  safeFit(tab);
  pane.classList.remove('measuring');

  term.attachCustomKeyEventHandler((ev) => shortcutFor(ev) === null);
  term.onData((data) => sendInput(tab, data));
  term.onBinary((data) => {
    const bytes = new Uint8Array(data.length);
    for (let i = 0; i < data.length; i++) bytes[i] = data.charCodeAt(i) & 0xff;
    sendInput(tab, bytes);
  });
  term.onTitleChange((t) => {
    tab.oscTitle = t;
    renderTab(tab);
  });
  term.onResize(() => scheduleResize(tab));

  tabEl.addEventListener('mousedown', (ev) => {
    if (ev.button === 1) {
      ev.preventDefault();
      void closeTab(tab).catch(showError);
    }
  });
  tabEl.addEventListener('click', (ev) => {
    const t = ev.target as HTMLElement;
    if (t === closeBtn) void closeTab(tab).catch(showError);
    else if (t === detachBtn) void detachTab(tab).catch(showError);
    else activate(tabs.indexOf(tab));
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

function renderTabs(): void {
  for (const t of tabs) renderTab(t);
}

function updateEmpty(): void {
  emptyEl.hidden = tabs.length > 0;
}

function bindChannel(tab: Tab, ch: Channel): void {
  tab.channel = ch;
  tab.session = ch.session;
  for (const d of tab.early.splice(0)) ch.write(d);
  ch.listen({
    data(bytes) {
      // Raw bytes: xterm.js decodes UTF-8 itself, also across frames. Ack once it consumed them.
      const n = bytes.length;
      tab.term.write(bytes, () => ch.consumed(n));
    },
    gap(lost) {
      tab.term.write(notice(`${lost} bytes lost`));
    },
    exit(status) {
      tab.exited = status;
      tab.term.write(notice(exitText(status)));
      renderTab(tab);
    },
    closed(reason) {
      if (tab.leaving) return;
      tab.closed = reason;
      tab.term.write(notice(`session closed (${reason})`));
      renderTab(tab);
      scheduleDetachedRefresh();
    },
    reattached(result) {
      // After a reconnect: another viewer may have resized the session meanwhile.
      syncSize(tab, result.cols, result.rows);
    },
  });
  renderTab(tab);
}

/** Sends our size if the session's differs. */
function syncSize(tab: Tab, cols: number, rows: number): void {
  const s = size(tab);
  if (s.cols !== cols || s.rows !== rows) scheduleResize(tab, 0);
}

function scheduleResize(tab: Tab, delay = RESIZE_DEBOUNCE_MS): void {
  clearTimeout(tab.resizeTimer);
  tab.resizeTimer = setTimeout(() => {
    tab.resizeTimer = undefined;
    const ch = tab.channel;
    if (!ch || tab.closed || tab.leaving) return;
    if (ch.state !== 'bound' && ch.state !== 'unbound' && ch.state !== 'binding') return;
    const { cols, rows } = size(tab);
    ch.resize(cols, rows).catch((e: unknown) => {
      if (!(e instanceof MuxError && ['unknown_channel', 'disconnected', 'session_closed'].includes(e.kind))) showError(e);
    });
  }, delay);
}

function safeFit(tab: Tab): void {
  try {
    tab.fit.fit();
  } catch {
    /* not laid out */
  }
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
  scheduleDetachedRefresh();
}

// --- actions

async function newTab(): Promise<string> {
  const tab = createTab('');
  activate(tabs.indexOf(tab));
  let ch: Channel;
  const s = size(tab);
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
  syncSize(tab, s.cols, s.rows);
  return ch.session;
}

async function reattach(session: string, focus = true): Promise<void> {
  const existing = tabs.find((t) => t.session === session);
  if (existing) {
    if (focus) activate(tabs.indexOf(existing));
    return;
  }
  const tab = createTab(session);
  if (focus || active < 0) activate(tabs.indexOf(tab));
  let ch: Channel;
  try {
    // No `from`: replay everything the ring still holds.
    ch = await client.attach(session);
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
  if (r) syncSize(tab, r.cols, r.rows);
  scheduleDetachedRefresh();
}

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
        void reattach(s.session).catch(showError);
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

type Action = 'new' | 'close' | 'detach' | 'next' | 'prev' | 'copy' | 'paste' | 'search';

function shortcutFor(ev: KeyboardEvent): Action | null {
  if (!ev.ctrlKey || ev.altKey || ev.metaKey) return null;
  if (!ev.shiftKey) {
    if (ev.key === 'PageDown') return 'next';
    if (ev.key === 'PageUp') return 'prev';
    return null;
  }
  const k = ev.key.length === 1 ? ev.key.toUpperCase() : ev.key;
  if (ev.code === 'KeyT' || k === 'T') return 'new';
  if (ev.code === 'KeyW' || k === 'W') return 'close';
  if (ev.code === 'KeyD' || k === 'D') return 'detach';
  if (ev.code === 'KeyC' || k === 'C') return 'copy';
  if (ev.code === 'KeyV' || k === 'V') return 'paste';
  if (ev.code === 'KeyF' || k === 'F') return 'search';
  if (ev.code === 'BracketRight' || k === '}' || k === ']') return 'next';
  if (ev.code === 'BracketLeft' || k === '{' || k === '[') return 'prev';
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
    // Capture phase: xterm.js never sees the key, so it sends nothing to the PTY.
    ev.stopPropagation();
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
        if (tab) void closeTab(tab).catch(showError);
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
    }
  },
  { capture: true },
);

// --- layout

let fitTimer: ReturnType<typeof setTimeout> | undefined;
new ResizeObserver(() => {
  clearTimeout(fitTimer);
  fitTimer = setTimeout(() => {
    const tab = tabs[active];
    if (tab) safeFit(tab); // term.onResize -> debounced session.resize
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
};

// ---------------------------------------------------------------------------------------------
// start: reload the page and the sessions resume

showState('connecting');
updateEmpty();
void (async () => {
  try {
    await client.connect();
    if (tabs.length > 0) return; // the test hook (or the user) was faster
    const detached = await detachedSessions();
    if (tabs.length > 0) return;
    if (detached.length === 0) {
      await newTab();
      return;
    }
    for (const [i, s] of detached.entries()) {
      await reattach(s.session, i === 0).catch(showError);
    }
  } catch (e) {
    showError(e);
  }
})();
