// Phones and tablets: the key bar (keys a soft keyboard lacks, with sticky Ctrl and Alt) and
// touch scrolling of the scrollback.
import type { App } from './app';
import type { Tab } from './tab';

/** The sequence each key of the bar types (before modifiers); ctrl and alt arm a modifier. */
const KEYS: Record<string, string> = {
  esc: '\x1b',
  tab: '\t',
  up: '\x1b[A',
  down: '\x1b[B',
  right: '\x1b[C',
  left: '\x1b[D',
  pipe: '|',
  tilde: '~',
  slash: '/',
};

/** Ctrl with a character: its control code (Ctrl+C → 0x03), or null if it has none. */
function ctrlOf(c: string): string | null {
  if (/^[a-zA-Z]$/.test(c)) return String.fromCharCode(c.toUpperCase().charCodeAt(0) & 0x1f);
  const special: Record<string, number> = { ' ': 0, '@': 0, '[': 0x1b, '\\': 0x1c, ']': 0x1d, '^': 0x1e, '~': 0x1e, '_': 0x1f, '/': 0x1f, '?': 0x7f };
  return c in special ? String.fromCharCode(special[c]!) : null;
}

/**
 * Applies the armed modifiers to what a tab is about to send (a key of the bar, or of the soft
 * keyboard), then disarms them: Ctrl turns a character into its control code, Alt prefixes
 * ESC, and an arrow (ESC [ or ESC O, as the program's cursor-key mode has it) gets xterm's
 * modifier parameter (Ctrl+↑ is ESC [ 1 ; 5 A). Anything longer (a paste, a composed word)
 * passes unchanged and leaves the modifiers armed.
 */
export function withModifiers(app: App, data: string): string {
  const { ctrl, alt } = app.modifiers;
  if (!ctrl && !alt) return data;
  const arrow = /^\x1b[[O]([ABCD])$/.exec(data);
  let out: string | null = null;
  if (arrow) {
    out = `\x1b[1;${1 + (alt ? 2 : 0) + (ctrl ? 4 : 0)}${arrow[1]}`;
  } else if ([...data].length === 1) {
    out = ctrl ? ctrlOf(data) ?? data : data;
    if (alt) out = `\x1b${out}`;
  } else if (data === '\x1b' || data === '\t' || data === '\r' || data === '\x7f') {
    out = alt ? `\x1b${data}` : data;
  }
  if (out === null) return data;
  setModifiers(app, false, false);
  return out;
}

function setModifiers(app: App, ctrl: boolean, alt: boolean): void {
  app.modifiers = { ctrl, alt };
  for (const [k, on] of [
    ['ctrl', ctrl],
    ['alt', alt],
  ] as const) {
    app.dom.keybarEl.querySelector(`[data-key="${k}"]`)?.setAttribute('aria-pressed', String(on));
  }
}

/** A touch device (a coarse pointer, or touch points): the key bar shows. */
function touchDevice(): boolean {
  return (window.matchMedia?.('(pointer: coarse)').matches ?? false) || navigator.maxTouchPoints > 0;
}

/** Shows the key bar on touch devices and wires its keys. */
export function wireKeybar(app: App): void {
  const bar = app.dom.keybarEl;
  const show = (): void => {
    const on = touchDevice();
    bar.hidden = !on;
    document.body.classList.toggle('touch', on);
  };
  show();
  window.matchMedia?.('(pointer: coarse)').addEventListener('change', show);
  for (const btn of bar.querySelectorAll<HTMLButtonElement>('button[data-key]')) {
    // The terminal keeps the focus, and the soft keyboard stays up.
    btn.addEventListener('mousedown', (ev) => ev.preventDefault());
    btn.addEventListener('click', () => {
      const key = btn.dataset['key'] ?? '';
      if (key === 'ctrl') return setModifiers(app, !app.modifiers.ctrl, app.modifiers.alt);
      if (key === 'alt') return setModifiers(app, app.modifiers.ctrl, !app.modifiers.alt);
      const tab = app.tabs[app.active];
      const seq = KEYS[key];
      if (!tab || seq === undefined) return;
      // As typed: through onData (and withModifiers), in the program's cursor-key mode.
      const arrow = /^\x1b\[([ABCD])$/.exec(seq);
      tab.term.input(arrow && tab.term.modes.applicationCursorKeysMode ? `\x1bO${arrow[1]}` : seq, true);
      tab.term.focus();
    });
  }
}

/**
 * Touch scrolling: a finger dragged over the terminal scrolls its scrollback (down shows older
 * lines), a row per row's height dragged.
 */
export function wireTouchScroll(tab: Tab): void {
  let lastY: number | null = null;
  let acc = 0;
  tab.pane.addEventListener(
    'touchstart',
    (ev) => {
      lastY = ev.touches.length === 1 ? ev.touches[0]!.clientY : null;
      acc = 0;
    },
    { passive: true },
  );
  tab.pane.addEventListener(
    'touchmove',
    (ev) => {
      if (lastY === null || ev.touches.length !== 1) return;
      const y = ev.touches[0]!.clientY;
      acc += lastY - y;
      lastY = y;
      const screen = tab.pane.querySelector('.xterm-screen');
      const rowH = screen ? screen.getBoundingClientRect().height / tab.term.rows : 16;
      const n = Math.trunc(acc / rowH);
      if (n !== 0) {
        tab.term.scrollLines(n);
        acc -= n * rowH;
      }
      ev.preventDefault();
    },
    { passive: false },
  );
  tab.pane.addEventListener('touchend', () => {
    lastY = null;
  });
}
