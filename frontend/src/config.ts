// The UI's constants and what the page's address asks for.
import type { ITheme } from '@xterm/xterm';

export const RESIZE_DEBOUNCE_MS = 150;
/** While the socket is down, how often the page asks /auth/check whether its token still works. */
export const AUTH_CHECK_MS = 2000;
/** localStorage key of the tab order and the active tab (session ids). */
export const LAYOUT_KEY = 'muxterm.tabs';
export const FIT_DEBOUNCE_MS = 50;

/** localStorage key of the settings a person keeps (settings.ts). */
export const SETTINGS_KEY = 'muxterm.settings';

/** The terminal's colours per theme; style.css has the page's (`:root[data-theme]`). */
export const themes: Record<'dark' | 'light', ITheme> = {
  dark: {
    background: '#1e1f22',
    foreground: '#d4d4d4',
    cursor: '#d4d4d4',
    selectionBackground: '#264f78',
  },
  light: {
    background: '#fafafa',
    foreground: '#1f2328',
    cursor: '#1f2328',
    selectionBackground: '#add6ff',
  },
};

/**
 * The gateway's socket, `ws` next to the page (`wss://host/term/ws` for a page at
 * `https://host/term/`, under a gateway's --base-path); the auth cookie rides along. Every URL
 * of the page is relative to it, so the UI works under any base path.
 */
export function webSocketUrl(loc: { href: string }): string {
  const u = new URL('ws', loc.href);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  u.search = '';
  u.hash = '';
  return u.toString();
}

/** What the page's address asks for. */
export interface UrlOptions {
  /** False under `?renderer=dom`, which disables WebGL whatever the settings say. */
  webglWanted: boolean;
  /** `/?token=…` (a URL pasted without /auth): the page signs in with it (through /auth) at start. */
  token: string | null;
  /** `?signin=invalid`: /auth refused the token of the URL a person opened. */
  refused: boolean;
  /**
   * A share link's token (`#share=…`; kept in the tab's sessionStorage for a reload): the page
   * shows that one session, and nothing else of its owner's.
   */
  share: string | null;
}

/** sessionStorage key of the share link's token this tab was opened with. */
export const SHARE_KEY = 'muxterm.share';

/** Reads the page's address; the token and the sign-in verdict leave the address bar. */
export function readUrl(): UrlOptions {
  const query = new URLSearchParams(location.search);
  const opts: UrlOptions = {
    webglWanted: query.get('renderer') !== 'dom',
    token: query.get('token'),
    refused: query.get('signin') === 'invalid',
    share: null,
  };
  // A share link's token rides in the fragment, which reaches no server; it leaves the address
  // bar at once and stays in this tab only.
  const share = new URLSearchParams(location.hash.slice(1)).get('share');
  try {
    if (share) sessionStorage.setItem(SHARE_KEY, share);
    opts.share = sessionStorage.getItem(SHARE_KEY);
  } catch {
    opts.share = share;
  }
  if (share !== null) history.replaceState(null, '', location.pathname + location.search);
  if (opts.token !== null || opts.refused) {
    query.delete('token');
    query.delete('signin');
    const rest = query.toString();
    history.replaceState(null, '', location.pathname + (rest ? `?${rest}` : '') + location.hash);
  }
  return opts;
}
