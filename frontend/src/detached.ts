// The detached-sessions panel: this user's sessions no tab of the page shows.
import type { SessionInfo } from '@muxterm/client';
import { showError, type App } from './app';
import { detachedSessions, reattach } from './actions';
import { exitText } from './tab';

// --- the detached-sessions panel

let detachedTimer: ReturnType<typeof setTimeout> | undefined;

export function scheduleDetachedRefresh(app: App): void {
  clearTimeout(app.detachedTimer);
  app.detachedTimer = setTimeout(() => void refreshDetached(app), 100);
}

export async function refreshDetached(app: App): Promise<void> {
  let list: SessionInfo[];
  try {
    list = await detachedSessions(app);
  } catch {
    return;
  }
  app.dom.detachedCount.textContent = String(list.length);
  app.dom.detachedToggle.classList.toggle('has-sessions', list.length > 0);
  app.dom.detachedList.replaceChildren(
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
        app.dom.detachedPanel.hidden = true;
        app.dom.detachedToggle.setAttribute('aria-expanded', 'false');
        void reattach(app, s.session, true, s.cmd).catch((e: unknown) => showError(app, e));
      });
      const kill = document.createElement('button');
      kill.type = 'button';
      kill.textContent = 'Kill';
      kill.className = 'danger';
      kill.addEventListener('click', () => {
        void app.client
          .kill(s.session)
          .catch((e: unknown) => showError(app, e))
          .finally(() => void refreshDetached(app));
      });
      li.append(label, attach, kill);
      return li;
    }),
  );
  app.dom.detachedEmpty.hidden = list.length > 0;
}

/** The panel's toggle, and a click outside it closes it. */
export function wireDetached(app: App): void {
  app.dom.detachedToggle.addEventListener('click', () => {
    const open = app.dom.detachedPanel.hidden;
    app.dom.detachedPanel.hidden = !open;
    app.dom.detachedToggle.setAttribute('aria-expanded', String(open));
    if (open) void refreshDetached(app);
  });
  document.addEventListener('mousedown', (ev) => {
    if (!app.dom.detachedPanel.hidden && !(ev.target as HTMLElement).closest('#detached-wrap')) {
      app.dom.detachedPanel.hidden = true;
      app.dom.detachedToggle.setAttribute('aria-expanded', 'false');
    }
  });
}
