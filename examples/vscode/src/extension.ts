// The extension's entry: two commands, one MuxClient per (url, token), and a Pseudoterminal per
// terminal wired to a SessionTerminal (src/adapter.ts, where the logic and its tests are).
import * as vscode from 'vscode';
import WebSocket from 'ws';
import { MuxClient } from '@muxterm/client';
import { SessionTerminal, describeSession, type Target } from './adapter';

interface Settings {
  url: string;
  token: string;
  killOnClose: boolean;
}

function settings(): Settings {
  const cfg = vscode.workspace.getConfiguration('muxterm');
  return {
    url: cfg.get<string>('url', 'ws://127.0.0.1:8222/ws'),
    token: cfg.get<string>('token', '') || process.env['MUXTERM_TOKEN'] || '',
    killOnClose: cfg.get<boolean>('killOnClose', false),
  };
}

/** One connection per (url, token): terminals opened before a settings change keep theirs. */
const clients = new Map<string, MuxClient>();

function client(s: Settings): MuxClient {
  const key = `${s.url}\n${s.token}`;
  let c = clients.get(key);
  if (!c) {
    const token = s.token;
    c = new MuxClient(s.url, {
      client: { name: 'muxterm-vscode', version: '0.1.0' },
      // Node has no browser WebSocket; `ws` sends the bearer token the gateway wants.
      webSocketFactory: (url, protocols) =>
        new WebSocket(url, protocols, token ? { headers: { Authorization: `Bearer ${token}` } } : {}),
    });
    clients.set(key, c);
  }
  return c;
}

function openTerminal(target: Target): void {
  const s = settings();
  const write = new vscode.EventEmitter<string>();
  const close = new vscode.EventEmitter<number | void>();
  const name = new vscode.EventEmitter<string>();
  const st = new SessionTerminal(client(s), target, { write, close, name }, { killOnClose: s.killOnClose });
  const pty: vscode.Pseudoterminal = {
    onDidWrite: write.event,
    onDidClose: close.event,
    onDidChangeName: name.event,
    open: (d) => void st.open(d),
    close: () => {
      st.close();
      write.dispose();
      close.dispose();
      name.dispose();
    },
    handleInput: (data) => st.handleInput(data),
    setDimensions: (d) => st.setDimensions(d),
  };
  vscode.window.createTerminal({ name: 'muxterm', pty }).show();
}

async function attachSession(): Promise<void> {
  const c = client(settings());
  let items: Array<vscode.QuickPickItem & { session: string; name: string }>;
  try {
    await c.connect();
    items = (await c.list()).map((s) => ({ ...describeSession(s), session: s.session, name: s.name }));
  } catch (e) {
    void vscode.window.showErrorMessage(`muxterm: cannot list sessions: ${e instanceof Error ? e.message : String(e)}`);
    return;
  }
  if (items.length === 0) {
    void vscode.window.showInformationMessage('muxterm: no sessions to attach to');
    return;
  }
  const pick = await vscode.window.showQuickPick(items, { placeHolder: 'Attach to a muxterm session (its whole scrollback is replayed)' });
  if (pick) openTerminal({ kind: 'attach', session: pick.session, from: 0, ...(pick.name ? { name: pick.name } : {}) });
}

export function activate(context: vscode.ExtensionContext): void {
  context.subscriptions.push(
    vscode.commands.registerCommand('muxterm.openSession', () => openTerminal({ kind: 'open' })),
    vscode.commands.registerCommand('muxterm.attachSession', attachSession),
    { dispose: () => deactivate() },
  );
}

/** Closes every connection; close() detaches the channels, so the sessions keep running. */
export function deactivate(): void {
  for (const c of clients.values()) c.close();
  clients.clear();
}
