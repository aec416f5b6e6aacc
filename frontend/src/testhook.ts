// The test hook: browser tests drive and inspect the page through window.muxterm. This is an
// entry of its own (scripts/build.mjs: dist-test/testhook.js, which the gateway does not embed),
// so the production bundle carries none of it: the browser tests evaluate it on every new
// document, before the page's app.js, and it sets window.muxtermTestHook, which start() calls
// with the app and the actions the hook drives it with. Its imports are types only.
import type { SessionInfo } from '@muxterm/client';
import type { App } from './app';
import type { activate, moveTab, size, tabTitle, Tab } from './tab';
import type { closeTab, detachTab, detachedSessions, newTab, reattach } from './actions';

/** What start() hands a test hook: the app and the UI's own actions (one copy of each). */
export interface TestHookUI {
  app: App;
  activate: typeof activate;
  moveTab: typeof moveTab;
  size: typeof size;
  tabTitle: typeof tabTitle;
  closeTab: typeof closeTab;
  detachTab: typeof detachTab;
  detachedSessions: typeof detachedSessions;
  newTab: typeof newTab;
  reattach: typeof reattach;
}

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
  /** The active tab's most output acknowledged ahead of xterm.js's parsing at once (tab.ts). */
  aheadPeak(): number;
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
  /** The active tab's file transfer: enabled (a page that may write), running, its bar shown, the last one done. */
  transfer(): { enabled: boolean; busy: boolean; shown: boolean; last: App['lastTransfer'] };
  /** Tab i's (default: active) scroll position: the first row shown, and the bottom's. */
  scroll(i?: number): { viewportY: number; baseY: number } | null;
  /** The active tab's vertical scrollbar: its slider's top and bottom, its track's height (px, from
   *  the track's top), and whether it follows output once per frame (viewport.ts). */
  scrollbar(): { top: number; bottom: number; track: number; lightened: boolean } | null;
  /** Writes n empty lines into the active tab's terminal (not its session) and, once they are
   *  parsed, before the next frame, scrolls by rows (or to the bottom); then its scroll position. */
  scrollAfterLines(n: number, rows: number | 'bottom'): Promise<{ viewportY: number; baseY: number } | null>;
}

declare global {
  interface Window {
    muxterm: MuxtermTestHook;
    /** Set by this script (browser tests only); start() calls it when it is there. */
    muxtermTestHook?: (ui: TestHookUI) => void;
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

/** Sets window.muxterm to drive and inspect the page. */
function installTestHook(ui: TestHookUI): void {
  const { app, activate, moveTab, size, tabTitle, closeTab, detachTab, detachedSessions, newTab, reattach } = ui;
  window.muxterm = {
    tabs: () =>
      app.tabs.map((t) => ({
        session: t.session,
        channel: t.channel?.id ?? 0,
        title: tabTitle(t),
        exited: t.exited ? { code: t.exited.code, signal: t.exited.signal } : null,
      })),
    activeIndex: () => app.active,
    bufferText: (i?: number) => bufferText(app.tabs[i ?? app.active]),
    state: () => app.client.state,
    newTab: () => newTab(app),
    closeTab: (i: number) => closeTab(app, app.tabs[i]),
    detachTab: (i: number) => detachTab(app, app.tabs[i]),
    detached: () => detachedSessions(app),
    reattach: (session: string) => reattach(app, session),
    offsets: () => {
      const o: Record<string, number> = {};
      for (const t of app.tabs) if (t.channel && t.session) o[t.session] = t.channel.offset;
      return o;
    },
    aheadPeak: () => app.tabs[app.active]?.aheadPeak ?? 0,
    sizes: (i?: number) => {
      const t = app.tabs[i ?? app.active];
      if (!t) return null;
      const own = size(app, t);
      return {
        term: [t.term.cols, t.term.rows],
        session: t.sessionSize ? [t.sessionSize.cols, t.sessionSize.rows] : null,
        own: [own.cols, own.rows],
      };
    },
    signedOut: () => app.signedOut,
    lastShortcut: () => app.lastShortcut,
    resetShortcut: () => {
      app.lastShortcut = null;
    },
    replayDropped: (i?: number) => app.tabs[i ?? app.active]?.guard.dropped ?? 0,
    activate: (i: number) => activate(app, i),
    replaying: () => app.tabs[app.active]?.guard.replaying ?? false,
    input: (data: string) => app.tabs[app.active]?.term.input(data, true),
    moveTab: (from: number, to: number) => moveTab(app, from, to),
    transfer: () => {
      const t = app.tabs[app.active];
      const bar = t?.pane.querySelector<HTMLElement>('.transfer');
      return { enabled: !!t?.transfer, busy: !!t?.transfer?.busy, shown: !!bar && !bar.hidden, last: app.lastTransfer };
    },
    scroll: (i?: number) => {
      const t = app.tabs[i ?? app.active];
      return t ? { viewportY: t.term.buffer.active.viewportY, baseY: t.term.buffer.active.baseY } : null;
    },
    scrollAfterLines: (n: number, rows: number | 'bottom') =>
      new Promise((resolve) => {
        const t = app.tabs[app.active];
        if (!t) return resolve(null);
        t.term.write('\r\n'.repeat(n), () => {
          if (rows === 'bottom') t.term.scrollToBottom();
          else t.term.scrollLines(rows);
          const b = t.term.buffer.active;
          resolve({ viewportY: b.viewportY, baseY: b.baseY });
        });
      }),
    scrollbar: () => {
      const t = app.tabs[app.active];
      const track = t?.pane.querySelector('.xterm-scrollable-element > .scrollbar.vertical');
      const slider = track?.querySelector('.slider');
      if (!t || !track || !slider) return null;
      const a = track.getBoundingClientRect();
      const s = slider.getBoundingClientRect();
      return { top: s.top - a.top, bottom: s.bottom - a.top, track: a.height, lightened: t.viewportLightened };
    },
    cellRect: (text: string, col: number) => {
      const t = app.tabs[app.active];
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
}

window.muxtermTestHook = installTestHook;
