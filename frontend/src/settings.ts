// Settings a person keeps in this browser (localStorage): font size, theme, renderer, the
// clipboard's (copy on select, programs reading it through OSC 52) and the cursor's blink.
import type { ITheme } from '@xterm/xterm';
import type { App } from './app';
import { disableWebgl, enableWebgl, safeFit } from './tab';
import { SETTINGS_KEY, themes } from './config';
import { el } from './dom';

export interface Settings {
  /** Pixels, FONT_MIN … FONT_MAX. */
  fontSize: number;
  /** `system` follows the system's light or dark preference (prefers-color-scheme). */
  theme: 'system' | 'dark' | 'light';
  /** `webgl` for the visible tab where the browser has it, else the DOM renderer. */
  renderer: 'webgl' | 'dom';
  /** A selection is copied to the clipboard as it is made. */
  copyOnSelect: boolean;
  /** Programs may read the clipboard with an OSC 52 query (docs/security.md). */
  clipboardRead: boolean;
  /**
   * The cursor blinks. Off by default: the DOM renderer blinks with a CSS animation that keeps
   * the browser drawing frames and shows a keystroke's echo a frame later (key to glyph from
   * idle 12.9 ms steady against 29.9 ms blinking, docs/benchmarks.md).
   */
  cursorBlink: boolean;
}

export const FONT_MIN = 8;
export const FONT_MAX = 32;
export const DEFAULT_SETTINGS: Settings = {
  fontSize: 14,
  theme: 'system',
  renderer: 'webgl',
  copyOnSelect: false,
  clipboardRead: false,
  cursorBlink: false,
};

/** The kept settings; anything missing or out of range takes its default. */
export function loadSettings(): Settings {
  const s = { ...DEFAULT_SETTINGS };
  try {
    const v = JSON.parse(localStorage.getItem(SETTINGS_KEY) ?? 'null') as Partial<Settings> | null;
    if (v && typeof v === 'object') {
      if (typeof v.fontSize === 'number' && v.fontSize >= FONT_MIN && v.fontSize <= FONT_MAX) s.fontSize = Math.round(v.fontSize);
      if (v.theme === 'dark' || v.theme === 'light' || v.theme === 'system') s.theme = v.theme;
      if (v.renderer === 'webgl' || v.renderer === 'dom') s.renderer = v.renderer;
      if (typeof v.copyOnSelect === 'boolean') s.copyOnSelect = v.copyOnSelect;
      if (typeof v.clipboardRead === 'boolean') s.clipboardRead = v.clipboardRead;
      if (typeof v.cursorBlink === 'boolean') s.cursorBlink = v.cursorBlink;
    }
  } catch {
    /* corrupt or storage disabled: the defaults */
  }
  return s;
}

function saveSettings(s: Settings): void {
  try {
    localStorage.setItem(SETTINGS_KEY, JSON.stringify(s));
  } catch {
    /* storage disabled: the settings last for this page */
  }
}

const systemLight = (): boolean => window.matchMedia?.('(prefers-color-scheme: light)').matches ?? false;

/** The theme drawn now: the setting, or the system's preference under `system`. */
export function effectiveTheme(app: App): 'dark' | 'light' {
  const t = app.settings.theme;
  return t === 'system' ? (systemLight() ? 'light' : 'dark') : t;
}

export function termTheme(app: App): ITheme {
  return themes[effectiveTheme(app)];
}

/** Whether the visible tab draws with WebGL: the setting, unless `?renderer=dom` says no. */
export function webglWanted(app: App): boolean {
  return app.url.webglWanted && app.settings.renderer === 'webgl';
}

/** Applies the settings to the page and every tab. */
export function applySettings(app: App): void {
  const theme = effectiveTheme(app);
  document.documentElement.dataset['theme'] = theme;
  for (const tab of app.tabs) {
    tab.term.options.fontSize = app.settings.fontSize;
    tab.term.options.theme = themes[theme];
    tab.term.options.cursorBlink = app.settings.cursorBlink;
  }
  const tab = app.tabs[app.active];
  if (tab) {
    if (webglWanted(app)) enableWebgl(app, tab);
    else disableWebgl(app, tab);
    safeFit(app, tab); // a new font size is a new fitted size
  }
}

function showSettings(app: App): void {
  const s = app.settings;
  el<HTMLInputElement>('set-font').value = String(s.fontSize);
  el<HTMLSelectElement>('set-theme').value = s.theme;
  el<HTMLSelectElement>('set-renderer').value = s.renderer;
  el<HTMLInputElement>('set-copy-select').checked = s.copyOnSelect;
  el<HTMLInputElement>('set-clipboard-read').checked = s.clipboardRead;
  el<HTMLInputElement>('set-cursor-blink').checked = s.cursorBlink;
}

export function toggleSettings(app: App, show = app.dom.settingsEl.hidden): void {
  app.dom.settingsEl.hidden = !show;
  if (show) {
    showSettings(app);
    el<HTMLInputElement>('set-font').focus();
  } else {
    app.tabs[app.active]?.term.focus();
  }
}

/** The settings panel: every change applies at once and is kept; the system's theme is followed. */
export function wireSettings(app: App): void {
  el<HTMLButtonElement>('settings-toggle').addEventListener('click', () => toggleSettings(app));
  app.dom.settingsEl.addEventListener('click', (ev) => {
    if (ev.target === app.dom.settingsEl || (ev.target as HTMLElement).closest('.close-settings')) toggleSettings(app, false);
  });
  const changed = (): void => {
    const font = Number(el<HTMLInputElement>('set-font').value);
    const theme = el<HTMLSelectElement>('set-theme').value;
    const renderer = el<HTMLSelectElement>('set-renderer').value;
    if (Number.isFinite(font) && font >= FONT_MIN && font <= FONT_MAX) app.settings.fontSize = Math.round(font);
    if (theme === 'system' || theme === 'dark' || theme === 'light') app.settings.theme = theme;
    if (renderer === 'webgl' || renderer === 'dom') app.settings.renderer = renderer;
    app.settings.copyOnSelect = el<HTMLInputElement>('set-copy-select').checked;
    app.settings.clipboardRead = el<HTMLInputElement>('set-clipboard-read').checked;
    app.settings.cursorBlink = el<HTMLInputElement>('set-cursor-blink').checked;
    saveSettings(app.settings);
    applySettings(app);
  };
  for (const id of ['set-font', 'set-theme', 'set-renderer', 'set-copy-select', 'set-clipboard-read', 'set-cursor-blink']) {
    el(id).addEventListener('change', changed);
  }
  window.matchMedia?.('(prefers-color-scheme: light)').addEventListener('change', () => {
    if (app.settings.theme === 'system') applySettings(app);
  });
}
