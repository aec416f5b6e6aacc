// The page's keyboard shortcuts, the search box and the help panel.
import { showError, type App } from './app';
import { askClose, detachTab, newTab } from './actions';
import { activate, type Tab } from './tab';
import { el } from './dom';
import { toggleSettings } from './settings';
import { writeClipboard } from './clipboard';

export function toggleHelp(app: App, show = app.dom.helpEl.hidden): void {
  app.dom.helpEl.hidden = !show;
  if (!show) app.tabs[app.active]?.term.focus();
}

// --- search

export function toggleSearch(app: App, show = app.dom.searchForm.hidden): void {
  app.dom.searchForm.hidden = !show;
  if (show) {
    app.dom.searchInput.focus();
    app.dom.searchInput.select();
  } else {
    app.tabs[app.active]?.search.clearDecorations();
    app.tabs[app.active]?.term.focus();
  }
}

// --- keyboard

export type Action = 'new' | 'close' | 'detach' | 'next' | 'prev' | 'copy' | 'paste' | 'search' | 'help';

/**
 * The page's shortcuts. Browsers keep Ctrl+T/W/N, Ctrl+Shift+T/W/N, Ctrl+Tab and
 * Ctrl+PageUp/PageDown for themselves (a page never sees them), so tab actions use Alt+Shift,
 * which reaches the page in Chrome and Firefox and which shells and editors rarely bind. Keys
 * are matched by `code` (the physical key), so a layout or macOS's Option characters do not
 * matter. Listed for people in index.html's help and in README.md.
 */
export function shortcutFor(ev: KeyboardEvent): Action | null {
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

export function cycle(app: App, step: number): void {
  if (app.tabs.length === 0) return;
  activate(app, (app.active + step + app.tabs.length) % app.tabs.length);
}

export async function copySelection(tab: Tab): Promise<void> {
  const text = tab.term.getSelection();
  if (text) await writeClipboard(text, tab);
}

/** The toolbar's buttons, the help panel, the search box and the page's keys. */
export function wireShortcuts(app: App): void {
  el<HTMLButtonElement>('new-tab').addEventListener('click', () => void newTab(app).catch((e: unknown) => showError(app, e)));
  el<HTMLButtonElement>('help-toggle').addEventListener('click', () => toggleHelp(app));

  app.dom.helpEl.addEventListener('click', (ev) => {
    if (ev.target === app.dom.helpEl || (ev.target as HTMLElement).closest('.close-help')) toggleHelp(app, false);
  });

  app.dom.searchInput.addEventListener('keydown', (ev) => {
    const tab = app.tabs[app.active];
    if (ev.key === 'Escape') {
      ev.preventDefault();
      toggleSearch(app, false);
    } else if (ev.key === 'Enter' && tab && app.dom.searchInput.value) {
      ev.preventDefault();
      if (ev.shiftKey) tab.search.findPrevious(app.dom.searchInput.value);
      else tab.search.findNext(app.dom.searchInput.value);
    }
  });
  app.dom.searchForm.addEventListener('submit', (ev) => ev.preventDefault());

  window.addEventListener(
    'keydown',
    (ev) => {
      if (ev.type !== 'keydown') return;
      if (ev.key === 'Escape' && (!app.dom.helpEl.hidden || !app.dom.settingsEl.hidden)) {
        ev.preventDefault();
        ev.stopPropagation();
        toggleHelp(app, false);
        toggleSettings(app, false);
        return;
      }
      const action = shortcutFor(ev);
      if (!action) return;
      if (app.signedOut || !app.dom.confirmEl.hidden) return;
      if (app.url.share && (action === 'new' || action === 'close' || action === 'detach')) return; // one session, not the viewer's to end
      // Capture phase: xterm.js never sees the key, so it sends nothing to the PTY.
      ev.stopPropagation();
      app.lastShortcut = action;
      const tab = app.tabs[app.active];
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
          void newTab(app).catch((e: unknown) => showError(app, e));
          break;
        case 'close':
          if (tab) void askClose(app, tab);
          break;
        case 'detach':
          if (tab) void detachTab(app, tab).catch((e: unknown) => showError(app, e));
          break;
        case 'next':
          cycle(app, 1);
          break;
        case 'prev':
          cycle(app, -1);
          break;
        case 'copy':
          if (tab) void copySelection(tab);
          break;
        case 'search':
          toggleSearch(app);
          break;
        case 'help':
          toggleHelp(app);
          break;
      }
    },
    { capture: true },
  );
}
