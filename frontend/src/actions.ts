// What a person does to tabs: open, restart, reattach, close (after asking) and detach.
import { MuxError, type Channel, type SessionInfo } from '@muxterm/client';
import { showError, type App } from './app';
import { activate, bindChannel, createTab, removeTab, scheduleResize, size, tabTitle, updateTitle, type Tab } from './tab';
import { scheduleDetachedRefresh } from './detached';
import { el } from './dom';

// --- actions

/** Refuses what cannot work: a tab without a connection, or without a valid token. */
export function checkUsable(app: App): void {
  if (app.url.share && app.tabs.length > 0) throw new Error('a share link shows one session only');
  if (app.signedOut) throw new Error('not signed in: open the URL the gateway printed, or paste its token');
  if (app.client.state !== 'connected') throw new Error(`not connected (${app.client.state}): try again once connected`);
}

export async function newTab(app: App): Promise<string> {
  checkUsable(app);
  const tab = createTab(app, '');
  activate(app, app.tabs.indexOf(tab));
  let ch: Channel;
  const s = size(app, tab);
  tab.sentSize = s;
  try {
    ch = await app.client.open(s);
  } catch (e) {
    removeTab(app, tab);
    throw e;
  }
  if (!app.tabs.includes(tab)) {
    // The tab was closed while the session was being opened.
    void ch.kill().catch(() => {});
    return ch.session;
  }
  bindChannel(app, tab, ch);
  scheduleResize(app, tab, 0); // the pane may have changed size meanwhile
  return ch.session;
}

/** The program of an exited tab runs again in a new session, in the same tab. */
export async function restartTab(app: App, tab: Tab): Promise<void> {
  if (tab.restarting || tab.leaving) return;
  checkUsable(app);
  tab.restarting = true;
  try {
    const old = tab.session;
    const s = size(app, tab);
    let ch: Channel;
    try {
      ch = await app.client.open(tab.cmd && tab.cmd.length > 0 ? { ...s, cmd: tab.cmd } : s);
    } catch (e) {
      // A session attached from elsewhere reports the gateway's own shell as its command, which
      // an explicit `cmd` may not name (--allow-cmd): a one-word command falls back to the shell.
      if (!(e instanceof MuxError && e.kind === 'forbidden' && tab.cmd && tab.cmd.length === 1)) throw e;
      ch = await app.client.open(s);
      tab.cmd = undefined;
    }
    if (!app.tabs.includes(tab) || tab.leaving) {
      void ch.kill().catch(() => {});
      return;
    }
    // The exited session is gone for good: free its slot.
    if (old) void app.client.kill(old).catch(() => {});
    tab.exited = null;
    tab.closed = null;
    tab.oscTitle = '';
    tab.sentSize = s;
    tab.sessionSize = null;
    tab.guard.reset();
    tab.term.reset();
    bindChannel(app, tab, ch);
    updateTitle(app);
    scheduleDetachedRefresh(app);
  } finally {
    tab.restarting = false;
  }
}

export async function reattach(app: App, session: string, focus = true, cmd?: string[]): Promise<void> {
  const existing = app.tabs.find((t) => t.session === session);
  if (existing) {
    if (focus) activate(app, app.tabs.indexOf(existing));
    return;
  }
  checkUsable(app);
  const tab = createTab(app, session, cmd);
  if (focus || app.active < 0) activate(app, app.tabs.indexOf(tab));
  let ch: Channel;
  try {
    // No `from`: the whole output while the ring still holds it from the first byte, else a
    // paint of the screen (modes, alternate screen and all) rather than a tail of bytes. Our
    // fitted size counts for the gateway's window-size policy; the result says what the
    // session's size is.
    const s = size(app, tab);
    tab.sentSize = s;
    ch = await app.client.attach(session, undefined, s, { screen: 'auto' });
  } catch (e) {
    removeTab(app, tab);
    throw e;
  }
  if (!app.tabs.includes(tab)) {
    void ch.detach().catch(() => {});
    return;
  }
  bindChannel(app, tab, ch);
  const r = ch.attachResult;
  if (r?.exit) tab.exited = r.exit; // the exit notice comes after the replay
  scheduleResize(app, tab, 0);
  scheduleDetachedRefresh(app);
}

/**
 * Close from the UI (×, middle-click, Alt+Shift+W): a tab whose program still runs asks first,
 * offering detach (the session keeps running) as the alternative; an exited tab just closes.
 */
export async function askClose(app: App, tab: Tab | undefined): Promise<void> {
  if (!tab || tab.leaving) return;
  try {
    if (tab.session && tab.exited === null && tab.closed === null) {
      const choice = await confirmClose(app, tab);
      if (choice === 'detach') return await detachTab(app, tab);
      if (choice !== 'kill') return;
    }
    await closeTab(app, tab);
  } catch (e) {
    showError(app, e);
  }
}

let confirmResolve: ((v: 'kill' | 'detach' | 'cancel') => void) | null = null;

export function confirmClose(app: App, tab: Tab): Promise<'kill' | 'detach' | 'cancel'> {
  app.confirmResolve?.('cancel');
  app.dom.confirmText.textContent = `“${tabTitle(tab)}” is still running. Closing the tab kills it; detach keeps it running (find it under Detached).`;
  app.dom.confirmEl.hidden = false;
  el<HTMLButtonElement>('confirm-kill').focus();
  return new Promise((resolve) => {
    app.confirmResolve = (v) => {
      app.confirmResolve = null;
      app.dom.confirmEl.hidden = true;
      app.tabs[app.active]?.term.focus();
      resolve(v);
    };
  });
}

/** The confirmation's buttons, and Escape cancels it. */
export function wireConfirm(app: App): void {
  for (const [id, v] of [
    ['confirm-kill', 'kill'],
    ['confirm-detach', 'detach'],
    ['confirm-cancel', 'cancel'],
  ] as const) {
    el<HTMLButtonElement>(id).addEventListener('click', () => app.confirmResolve?.(v));
  }
  app.dom.confirmEl.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') {
      ev.preventDefault();
      app.confirmResolve?.('cancel');
    }
  });
}

/** Kills the session and removes the tab. */
export async function closeTab(app: App, tab: Tab | undefined): Promise<void> {
  if (!tab || !app.tabs.includes(tab)) throw new Error('no such tab');
  if (tab.leaving) return;
  tab.leaving = true;
  if (tab.session && tab.closed === null) {
    try {
      await app.client.kill(tab.session);
    } catch (e) {
      if (!(e instanceof MuxError && (e.kind === 'unknown_session' || e.kind === 'session_closed'))) {
        tab.leaving = false;
        throw e;
      }
    }
  }
  removeTab(app, tab);
}

/** Detaches the channel (the session keeps running) and removes the tab. */
export async function detachTab(app: App, tab: Tab | undefined): Promise<void> {
  if (!tab || !app.tabs.includes(tab)) throw new Error('no such tab');
  if (tab.leaving) return;
  tab.leaving = true;
  try {
    await tab.channel?.detach();
  } catch (e) {
    tab.leaving = false;
    throw e;
  }
  removeTab(app, tab);
}

/** This user's sessions that no tab of this page shows. */
export async function detachedSessions(app: App): Promise<SessionInfo[]> {
  const all = await app.client.list();
  const mine = new Set(app.tabs.map((t) => t.session));
  return all.filter((s) => !mine.has(s.session));
}

