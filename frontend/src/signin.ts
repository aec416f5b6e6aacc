// Signing in.
import { showState, type App } from './app';
import { AUTH_CHECK_MS } from './config';

// --- signing in
//
// A refused WebSocket upgrade is only a close event to a page (no status), so while the socket
// is down the page asks GET /auth/check, which answers 401 when the token (the HttpOnly cookie)
// is missing or wrong. Then it stops reconnecting and explains how to sign in; anything else is
// "the gateway is down" and the client keeps reconnecting.

export type AuthState = 'ok' | 'refused' | 'unreachable';

/** Asks auth/check about the page's credential: the cookie, or the share link's token. */
export async function checkAuth(app: App): Promise<AuthState> {
  try {
    // The link's token in a header of its own: a proxy's own (Basic) Authorization stays as it is.
    const headers: Record<string, string> = app.url.share ? { 'Muxterm-Share-Token': app.url.share } : {};
    const r = await fetch('auth/check', { cache: 'no-store', credentials: 'same-origin', headers });
    if (r.status === 401) return 'refused';
    if (app.url.share && r.ok) app.shareWrite = r.headers.get('Muxterm-Share') === 'read-write';
    return r.ok ? 'ok' : 'unreachable';
  } catch {
    return 'unreachable';
  }
}

export function scheduleAuthCheck(app: App, delay = AUTH_CHECK_MS): void {
  clearTimeout(app.authTimer);
  app.authTimer = setTimeout(() => {
    if (app.signedOut || app.client.state === 'connected' || app.client.state === 'closed') return;
    void checkAuth(app).then((a) => {
      if (a === 'refused') signOut(app, app.client.state === 'reconnecting' ? 'rejected' : 'none');
      else if (app.client.state !== 'connected') scheduleAuthCheck(app);
    });
  }, delay);
}

/** `GET auth?token=…` (next to the page): checks the token and sets the cookie (then redirects to the page). */
export async function signIn(tok: string): Promise<AuthState> {
  try {
    const r = await fetch(`auth?token=${encodeURIComponent(tok)}`, { cache: 'no-store', credentials: 'same-origin' });
    if (r.status === 401) return 'refused';
    return r.ok ? 'ok' : 'unreachable';
  } catch {
    return 'unreachable';
  }
}

/** Stops the client and shows why and how to sign in. */
export function signOut(app: App, why: 'none' | 'rejected' | 'wrong'): void {
  if (app.signedOut) return;
  app.signedOut = true;
  clearTimeout(app.authTimer);
  app.client.close(); // no endless reconnect against a gateway that refuses us
  document.body.dataset['auth'] = 'refused';
  showState(app, 'closed');
  app.dom.connText.textContent = 'signed out';
  if (app.url.share) {
    // A share link cannot sign in: it ended, or never was.
    app.dom.signinEl.classList.add('share');
    app.dom.signinWhy.textContent = 'This share link no longer works: it expired, or its owner revoked it. Ask them for a new one.';
    app.dom.signinEl.hidden = false;
    return;
  }
  app.dom.signinWhy.textContent =
    why === 'rejected'
      ? 'The gateway no longer accepts this page’s token: it was probably restarted with a new one (--token changed, or --new-token replaced the generated one). Your sessions ended with it.'
      : why === 'wrong'
        ? 'The gateway does not accept the token in the address.'
        : 'This page has no valid token: it was opened without one, or with a token this gateway does not accept.';
  app.dom.signinEl.hidden = false;
  app.dom.signinToken.focus();
}

/** The sign-in form: a token that works reloads the page with its cookie. */
export function wireSignin(app: App): void {
  app.dom.signinForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const tok = app.dom.signinToken.value.trim();
    if (!tok) return;
    app.dom.signinError.hidden = true;
    void signIn(tok).then((a) => {
      if (a === 'ok') {
        location.replace('./'); // a fresh page with the cookie: it attaches the sessions
        return;
      }
      app.dom.signinError.textContent = a === 'refused' ? 'The gateway does not accept this token.' : 'The gateway cannot be reached.';
      app.dom.signinError.hidden = false;
    });
  });
}
