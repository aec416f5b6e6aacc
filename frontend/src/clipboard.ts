// The clipboard: OSC 52 from programs, copy on select, and the copy shortcut.
import type { App } from './app';
import { sendInput, type Tab } from './tab';

/** The largest OSC 52 payload (base64) a program may set: 1 MiB of text, and some. */
export const OSC52_MAX = 1_400_000;

function base64ToUtf8(b64: string): string | null {
  try {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return null;
  }
}

function utf8ToBase64(text: string): string {
  const bytes = new TextEncoder().encode(text);
  let bin = '';
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

/** Puts text on the clipboard: the Clipboard API, else a hidden textarea and execCommand. */
export async function writeClipboard(text: string, tab?: Tab): Promise<void> {
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
    tab?.term.focus();
  }
}

/**
 * OSC 52 (`ESC ] 52 ; targets ; base64 BEL`), as tmux, vim and neovim send it: a program sets
 * the clipboard. A query (`?` for the payload) reads the clipboard and answers with it, only
 * when the settings allow it (off by default: any program in the session, or output it cats,
 * could read what a person copied elsewhere). Replayed output never touches the clipboard: a
 * re-attach does not copy again, and no query in it is answered.
 */
export function osc52(app: App, tab: Tab, data: string): boolean {
  const semi = data.indexOf(';');
  if (semi < 0 || tab.guard.replaying) return true;
  const payload = data.slice(semi + 1);
  if (payload === '?') {
    if (!app.settings.clipboardRead) return true;
    void navigator.clipboard
      .readText()
      .then((text) => sendInput(app, tab, `\x1b]52;c;${utf8ToBase64(text)}\x07`))
      .catch(() => {});
    return true;
  }
  if (payload.length > OSC52_MAX) return true;
  const text = base64ToUtf8(payload);
  if (text !== null) void writeClipboard(text, tab);
  return true;
}

/** Wires a tab's terminal: OSC 52, and copy on select when the settings say so. */
export function wireClipboard(app: App, tab: Tab): void {
  tab.term.parser.registerOscHandler(52, (data) => osc52(app, tab, data));
  tab.term.onSelectionChange(() => {
    if (app.settings.copyOnSelect && tab.term.hasSelection()) void writeClipboard(tab.term.getSelection(), tab);
  });
}
