// The built extension (dist/extension.js, as VS Code would load it) with a stand-in for the
// `vscode` module: activation registers the commands package.json contributes, and, given the
// gateway binary (MUXTERM_BIN), the commands open, drive, detach and reattach a real session
// through the Pseudoterminal VS Code would get.
//
// The gateway is started by @muxterm/client's test harness (packages/client/test/harness.ts),
// imported by path: this example already builds against that directory (file:../../packages/client)
// and runs its tests with that package's runner (scripts/test.mjs), so it keeps no copy of either.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import Module, { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Gateway } from '../../../packages/client/test/harness';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
// The test runs from a bundle under node_modules/.cache; find the project by its package.json.
const project = findUp(root, 'package.json');
const bin = process.env['MUXTERM_BIN'];

function findUp(dir: string, file: string): string {
  for (let d = dir; ; d = dirname(d)) {
    try {
      if (JSON.parse(readFileSync(join(d, file), 'utf8')).name === 'muxterm-vscode') return d;
    } catch {
      /* keep looking */
    }
    if (dirname(d) === d) throw new Error(`no muxterm-vscode package.json above ${dir}`);
  }
}

// ---------------------------------------------------------------------------------------------
// A stand-in for the parts of the `vscode` module the extension uses.

class EventEmitter<T> {
  private readonly listeners: Array<(v: T) => void> = [];
  readonly event = (l: (v: T) => void) => {
    this.listeners.push(l);
    return { dispose: () => {} };
  };
  fire(v: T): void {
    for (const l of [...this.listeners]) l(v);
  }
  dispose(): void {}
}

interface Pty {
  onDidWrite: (l: (s: string) => void) => unknown;
  onDidClose?: (l: (c: number | void) => void) => unknown;
  open(d: { columns: number; rows: number } | undefined): void;
  close(): void;
  handleInput?(data: string): void;
  setDimensions?(d: { columns: number; rows: number }): void;
}

/** A terminal the extension created: its output and close code, waited on by events. */
class Terminal {
  out = '';
  closed: number | void | null = null;
  private waiters: Array<() => void> = [];
  constructor(readonly name: string, readonly pty: Pty) {
    pty.onDidWrite((s) => {
      this.out += s;
      this.wake();
    });
    pty.onDidClose?.((c) => {
      this.closed = c;
      this.wake();
    });
  }
  show(): void {}
  until(what: string, cond: () => boolean, ms = 10_000): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}; output:\n${JSON.stringify(this.out.slice(-400))}`)), ms);
      const check = () => {
        if (!cond()) return;
        clearTimeout(timer);
        this.waiters = this.waiters.filter((w) => w !== check);
        resolve();
      };
      this.waiters.push(check);
      check();
    });
  }
  private wake(): void {
    for (const w of [...this.waiters]) w();
  }
}

const config: Record<string, unknown> = {};
const commands = new Map<string, (...args: unknown[]) => unknown>();
const terminals: Terminal[] = [];
let quickPick: (items: Array<{ label: string; session: string }>) => unknown = () => undefined;
const messages: string[] = [];

const vscode = {
  EventEmitter,
  commands: {
    registerCommand(id: string, fn: (...args: unknown[]) => unknown) {
      commands.set(id, fn);
      return { dispose: () => commands.delete(id) };
    },
  },
  workspace: {
    getConfiguration: () => ({ get: <T>(key: string, dflt: T): T => (key in config ? (config[key] as T) : dflt) }),
  },
  window: {
    createTerminal(opts: { name: string; pty: Pty }) {
      const t = new Terminal(opts.name, opts.pty);
      terminals.push(t);
      return t;
    },
    showQuickPick: async (items: Array<{ label: string; session: string }>) => quickPick(items),
    showErrorMessage: async (m: string) => void messages.push(m),
    showInformationMessage: async (m: string) => void messages.push(m),
  },
};

interface Extension {
  activate(ctx: { subscriptions: Array<{ dispose(): unknown }> }): void;
  deactivate(): void;
}

function loadExtension(): Extension {
  const M = Module as unknown as { _load: (req: string, ...rest: unknown[]) => unknown };
  const load = M._load;
  M._load = function (req: string, ...rest: unknown[]) {
    return req === 'vscode' ? vscode : load.call(this, req, ...rest);
  };
  try {
    return createRequire(import.meta.url)(join(project, 'dist/extension.js')) as Extension;
  } finally {
    M._load = load;
  }
}

// ---------------------------------------------------------------------------------------------

describe('the built extension', () => {
  const ext = loadExtension();
  const ctx = { subscriptions: [] as Array<{ dispose(): unknown }> };
  ext.activate(ctx);

  it('registers exactly the commands package.json contributes', () => {
    const pkg = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8')) as {
      contributes: { commands: Array<{ command: string }>; configuration: { properties: Record<string, unknown> } };
    };
    assert.deepEqual([...commands.keys()].sort(), pkg.contributes.commands.map((c) => c.command).sort());
    assert.deepEqual(Object.keys(pkg.contributes.configuration.properties).sort(), ['muxterm.killOnClose', 'muxterm.token', 'muxterm.url']);
  });

  describe('against the gateway binary', { skip: bin ? false : 'MUXTERM_BIN is unset (build with `make build`, then MUXTERM_BIN=$PWD/bin/gateway)' }, () => {
    // The harness kills the gateway when this process ends, whatever ends it.
    let gw: Gateway | undefined;

    before(async () => {
      gw = await Gateway.start(bin!);
      config['url'] = gw.ws;
      config['token'] = gw.token;
    });
    after(async () => {
      ext.deactivate();
      if (!gw) return; // before failed: Gateway.start stopped it
      const code = await gw.stop();
      assert.equal(code, 0, `the gateway's exit code after SIGTERM; its output:\n${gw.output()}`);
    });

    it('muxterm.openSession: a terminal on a new session; input, output, resize; closing detaches', async () => {
      await commands.get('muxterm.openSession')!();
      const t = terminals.at(-1)!;
      t.pty.open({ columns: 80, rows: 24 });
      t.pty.handleInput!('echo "vs$((6*7))code"\r');
      await t.until('vs42code', () => t.out.includes('vs42code'));
      t.pty.setDimensions!({ columns: 101, rows: 33 });
      // Requests and input are not ordered by the protocol: the shell waits for the new size.
      t.pty.handleInput!('until [ "$(stty size)" = "33 101" ]; do :; done; echo "sized $((30+3))"\r');
      await t.until('stty size to say 33 101', () => t.out.includes('sized 33'));
      t.pty.close();
      assert.equal(t.closed, null, 'VS Code closed it: nothing fired');
    });

    it('muxterm.attachSession: a quick pick of session.list, a replay, and close with the exit code', async () => {
      let offered: Array<{ label: string; session: string }> = [];
      quickPick = (items) => {
        offered = items;
        return items[0];
      };
      await commands.get('muxterm.attachSession')!();
      assert.equal(offered.length, 1, 'the detached session is offered');
      const t = terminals.at(-1)!;
      assert.notEqual(t, terminals[0]);
      t.pty.open({ columns: 101, rows: 33 });
      await t.until('the replay', () => t.out.includes('vs42code'));
      t.pty.handleInput!('exit 7\r');
      await t.until('the terminal to close', () => t.closed !== null);
      assert.equal(t.closed, 7);
      assert.deepEqual(messages, []);
    });
  });
});
