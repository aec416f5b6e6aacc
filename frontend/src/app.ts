// The page's state, shared by every module as `app`, and its start.
import { MuxClient, MuxError, type ConnectionState } from '@muxterm/client';
import { activate, loadLayout, moveTab, safeFit, size, tabTitle, updateEmpty, type Tab } from './tab';
import { closeTab, detachTab, detachedSessions, newTab, reattach, wireConfirm } from './actions';
import { scheduleDetachedRefresh, wireDetached } from './detached';
import { wireShortcuts, type Action } from './shortcuts';
import { checkAuth, scheduleAuthCheck, signIn, signOut, wireSignin } from './signin';
import type { TestHookUI } from './testhook';
import { FIT_DEBOUNCE_MS, readUrl, webSocketUrl, type UrlOptions } from './config';
import { lookupDom, type Dom } from './dom';
import { wireKeybar } from './keybar';
import { applySettings, loadSettings, wireSettings, type Settings } from './settings';

type Timer = ReturnType<typeof setTimeout> | undefined;

/** The page: one per load, made by start. Every field is touched on the page's one thread. */
export interface App {
  client: MuxClient;
  dom: Dom;
  url: UrlOptions;
  /** Font size, theme and renderer, kept in localStorage (settings.ts). */
  settings: Settings;
  /** The key bar's sticky modifiers, armed for the next key (keybar.ts). */
  modifiers: { ctrl: boolean; alt: boolean };
  /** The tabs in their displayed order; active indexes it (-1: none). */
  tabs: Tab[];
  active: number;
  /** Set after WebGL failed once: it will fail again, stay on the DOM renderer. */
  webglBroken: boolean;
  /** True while the page re-attaches its sessions after a load: the stored layout stays. */
  restoring: boolean;
  /** The client was stopped because the gateway refuses the page's token. */
  signedOut: boolean;
  /** Opened from a share link (url.share) that grants writing: the page may type and resize. */
  shareWrite: boolean;
  /** The last file transfer that completed (its throughput, for the browser tests). */
  lastTransfer: { direction: 'download' | 'upload'; name: string; bytes: number; ms: number } | null;
  /** The last shortcut the page acted on (for the browser tests). */
  lastShortcut: Action | null;
  /** Resolves the open close-confirmation, if any. */
  confirmResolve: ((v: 'kill' | 'detach' | 'cancel') => void) | null;
  authTimer: Timer;
  toastTimer: Timer;
  detachedTimer: Timer;
  fitTimer: Timer;
}

/** Builds the page's state: reads the address, looks the elements up, makes the (idle) client. */
export function createApp(): App {
  const url = readUrl();
  const share = url.share;
  return {
    client: new MuxClient(webSocketUrl(location), {
      client: { name: 'muxterm-web', version: '0.1.0' },
      // A share link's token, as a second subprotocol (a page cannot set headers on a socket).
      ...(share
        ? { webSocketFactory: (u: string, protocols: string | string[]) => new WebSocket(u, [...(Array.isArray(protocols) ? protocols : [protocols]), `muxterm.share.${share}`]) }
        : {}),
    }),
    dom: lookupDom(),
    url,
    settings: loadSettings(),
    modifiers: { ctrl: false, alt: false },
    tabs: [],
    active: -1,
    webglBroken: false,
    restoring: false,
    signedOut: false,
    shareWrite: false,
    lastTransfer: null,
    lastShortcut: null,
    confirmResolve: null,
    authTimer: undefined,
    toastTimer: undefined,
    detachedTimer: undefined,
    fitTimer: undefined,
  };
}

export function showState(app: App, s: ConnectionState): void {
  document.body.dataset['state'] = s;
  app.dom.connEl.dataset['state'] = s;
  app.dom.connText.textContent = s;
  app.dom.connEl.title = s === 'connected' && app.client.server ? `${app.client.server.name} ${app.client.server.version}` : s;
}

export function showError(app: App, e: unknown): void {
  const msg = e instanceof MuxError ? `${e.message} (${e.kind})` : e instanceof Error ? e.message : String(e);
  console.warn('muxterm:', e);
  app.dom.toastEl.textContent = msg;
  app.dom.toastEl.hidden = false;
  clearTimeout(app.toastTimer);
  app.toastTimer = setTimeout(() => {
    app.dom.toastEl.hidden = true;
  }, 5000);
}

/** Wires the page up, connects, and attaches the sessions of the last visit (a reload resumes them). */
export function start(): App {
  const app = createApp();
  wireConfirm(app);
  wireDetached(app);
  wireShortcuts(app);
  wireSignin(app);
  wireSettings(app);
  wireKeybar(app);
  applySettings(app);
  // The browser tests' hook (testhook.ts, evaluated before this script) gets the app; a page
  // without it has no window.muxtermTestHook and no hook code.
  window.muxtermTestHook?.({ app, activate, moveTab, size, tabTitle, closeTab, detachTab, detachedSessions, newTab, reattach } satisfies TestHookUI);

  new ResizeObserver(() => {
    clearTimeout(app.fitTimer);
    app.fitTimer = setTimeout(() => {
      const tab = app.tabs[app.active];
      if (tab) safeFit(app, tab); // our fitted size -> debounced session.resize
    }, FIT_DEBOUNCE_MS);
  }).observe(app.dom.termsEl);

  app.client.on('state', (s) => {
    showState(app, s);
    if (s === 'connected') scheduleDetachedRefresh(app);
    else if (s === 'connecting' || s === 'reconnecting') scheduleAuthCheck(app, 0);
  });
  app.client.on('error', (e) => {
    console.warn('muxterm:', e.kind, e.message, e.data);
    // The share link this page was opened with ended (close 4003): the client does not
    // reconnect, and the page says why.
    if (app.url.share && e.kind === 'forbidden' && e.message.startsWith('the share link ended')) signOut(app, 'rejected');
    // A refused input frame of a channel: an upload on it cannot go on.
    if (e.kind === 'limit_exceeded' || e.kind === 'forbidden') {
      for (const t of app.tabs) if (t.channel && t.channel.id === e.data['channel']) t.transfer?.refused(e);
    }
  });
  wireComeback(app);

  showState(app, 'connecting');
  updateEmpty(app);
  void restore(app);
  return app;
}

/**
 * A page that comes back checks its connection at once rather than trusting it: restored from
 * the back-forward cache (the browser closed its socket while it was frozen), shown again or
 * resumed after a freeze (a laptop that slept: its socket may be dead without a close), or back
 * online. The client reconnects now if it waits to, or drops a socket that does not answer, and
 * re-attaches every tab from its offset.
 */
function wireComeback(app: App): void {
  const check = (): void => {
    if (!app.signedOut) app.client.checkConnection();
  };
  window.addEventListener('pageshow', (ev) => {
    if (ev.persisted) check();
  });
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible') check();
  });
  document.addEventListener('resume', check);
  window.addEventListener('online', check);
}

/** Whether the page may change sessions: not one opened from a read-only share link. */
export function writable(app: App): boolean {
  return !app.url.share || app.shareWrite;
}

/**
 * A page opened from a share link shows that link's one session: no new tabs, no detached
 * sessions, no close or detach; read-only, it neither types nor resizes.
 */
async function restoreShare(app: App): Promise<void> {
  document.body.dataset['share'] = 'read-only';
  if ((await checkAuth(app)) === 'refused') {
    signOut(app, 'rejected');
    return;
  }
  const mode = app.shareWrite ? 'read-write' : 'read-only';
  document.body.dataset['share'] = mode;
  app.dom.shareBadge.textContent = `shared · ${mode}`;
  await app.client.connect();
  const [s] = await app.client.list();
  if (!s) throw new Error('the shared session has ended');
  await reattach(app, s.session, true, s.cmd);
}

/** Signs in if the address says so, connects, and attaches this user's sessions. */
async function restore(app: App): Promise<void> {
  try {
    if (app.url.share) return await restoreShare(app);
    if (app.url.refused || (app.url.token !== null && (await signIn(app.url.token)) === 'refused')) {
      signOut(app, 'wrong');
      return;
    }
    // Without a valid token the socket would fail in silence, for ever: ask first.
    if ((await checkAuth(app)) === 'refused') {
      signOut(app, 'none');
      return;
    }
    await app.client.connect();
    if (app.tabs.length > 0) return; // the test hook (or the user) was faster
    const detached = await detachedSessions(app);
    if (app.tabs.length > 0) return;
    if (detached.length === 0) {
      await newTab(app);
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
    app.restoring = true;
    try {
      for (const s of detached) {
        await reattach(app, s.session, s.session === activeId, s.cmd).catch((e: unknown) => showError(app, e));
      }
    } finally {
      app.restoring = false;
    }
    const i = app.tabs.findIndex((t) => t.session === activeId);
    activate(app, i >= 0 ? i : 0);
  } catch (e) {
    showError(app, e);
  }
}
