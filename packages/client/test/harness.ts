// Runs the real gateway binary (MUXTERM_BIN) for the integration tests: on 127.0.0.1 with port 0
// and a fresh token, its address learnt from the line `muxterm: listening on http://…` it prints
// on stdout (as e2e/harness_test.go does). Every gateway started here is killed when the test
// process exits, whatever the outcome. examples/vscode's tests start their gateway with it too.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import WebSocket from 'ws';
import { MuxClient, type Channel, type MuxClientOptions, type SessionAttachResult, type WebSocketLike } from '../src/index';

const LISTENING = 'muxterm: listening on ';

/** Gateways not yet stopped; SIGKILLed on exit so that none outlives the test process. */
const running = new Set<ChildProcess>();
function killAll(): void {
  for (const p of running) p.kill('SIGKILL');
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(sig, () => {
    killAll();
    process.exit(128 + (sig === 'SIGINT' ? 2 : sig === 'SIGTERM' ? 15 : 1));
  });
}

export class Gateway {
  readonly token = randomBytes(16).toString('hex');
  /** ws://127.0.0.1:port/ws */
  ws = '';
  private logs = '';
  private readonly proc: ChildProcess;
  private readonly exited: Promise<number | null>;

  private constructor(bin: string, args: string[]) {
    this.proc = spawn(bin, ['--listen', '127.0.0.1:0', '--log-level', 'debug', '--token', this.token, ...args], {
      env: { ...process.env, SHELL: '/bin/sh' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    running.add(this.proc);
    this.exited = new Promise((resolve) => {
      this.proc.once('exit', (code) => {
        running.delete(this.proc);
        resolve(code);
      });
    });
  }

  /** Starts MUXTERM_BIN with extra args and waits (at most 20 s) for its listening line. */
  static async start(bin: string, ...args: string[]): Promise<Gateway> {
    const g = new Gateway(bin, args);
    const err = createInterface({ input: g.proc.stderr! });
    err.on('line', (l) => (g.logs += l + '\n'));
    const out = createInterface({ input: g.proc.stdout! });
    const base = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`gateway did not start in 20 s:\n${g.logs}`)), 20_000);
      out.on('line', (l) => {
        g.logs += l + '\n';
        if (l.startsWith(LISTENING)) {
          clearTimeout(timer);
          resolve(l.slice(LISTENING.length));
        }
      });
      void g.exited.then((code) => {
        clearTimeout(timer);
        reject(new Error(`gateway exited (${code}) before listening:\n${g.logs}`));
      });
    }).catch(async (e: unknown) => {
      await g.stop();
      throw e;
    });
    g.ws = 'ws' + base.replace(/^http/, '') + '/ws';
    return g;
  }

  /** Everything the gateway printed so far. */
  output(): string {
    return this.logs;
  }

  /** SIGTERM, then SIGKILL after 10 s. Resolves with the exit code (null after a signal). */
  async stop(): Promise<number | null> {
    if (!running.has(this.proc)) return this.exited;
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), 10_000);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * A client whose sockets are `ws` WebSockets carrying the bearer token. `sockets` holds every
   * socket it opened, so a test can drop one.
   */
  client(options: MuxClientOptions = {}): { client: MuxClient; sockets: WebSocket[] } {
    const sockets: WebSocket[] = [];
    const client = new MuxClient(this.ws, {
      backoff: { initialDelayMs: 20, maxDelayMs: 200 },
      ...options,
      webSocketFactory: (url, protocols): WebSocketLike => {
        const s = new WebSocket(url, protocols, { headers: { Authorization: `Bearer ${this.token}` } });
        sockets.push(s);
        return s;
      },
    });
    return { client, sockets };
  }
}

/**
 * Collects a channel's output (acknowledging it as consumed) and lets a test wait, without
 * polling, for a condition on what arrived.
 */
export class Output {
  private chunks: Buffer[] = [];
  private size = 0;
  private waiters: Array<() => void> = [];
  exit: { code: number; signal: string | null } | null = null;
  closed: string | null = null;
  gaps = 0;
  /** Bytes delivered with the replay flag (below the binding's `live`). */
  replayBytes = 0;
  /** Sizes reported by the listener's `size` (session.size), in order. */
  readonly sizes: Array<[number, number]> = [];
  /** Results of the re-attaches after reconnects. */
  readonly reattaches: SessionAttachResult[] = [];

  constructor(readonly channel: Channel) {
    channel.listen({
      data: (b, _ch, replay) => {
        this.chunks.push(Buffer.from(b));
        this.size += b.length;
        if (replay) this.replayBytes += b.length;
        channel.consumed(b.length);
        this.wake();
      },
      gap: (n) => {
        this.gaps += n;
        this.wake();
      },
      exit: (s) => {
        this.exit = s;
        this.wake();
      },
      closed: (r) => {
        this.closed = r;
        this.wake();
      },
      reattached: (r) => {
        this.reattaches.push(r);
        this.wake();
      },
      size: (cols, rows) => {
        this.sizes.push([cols, rows]);
        this.wake();
      },
    });
  }

  get length(): number {
    return this.size;
  }

  bytes(): Buffer {
    if (this.chunks.length > 1) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0] ?? Buffer.alloc(0);
  }

  text(): string {
    return this.bytes().toString('utf8');
  }

  /** Resolves once `cond()` holds, checked after every event; rejects after `ms`. */
  until(what: string, cond: () => boolean, ms = 10_000): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = (): boolean => {
        if (!cond()) return false;
        clearTimeout(timer);
        resolve();
        return true;
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(new Error(`timed out after ${ms} ms waiting for ${what}; output so far:\n${JSON.stringify(this.text().slice(-500))}`));
      }, ms);
      const waiter = (): void => {
        if (check()) this.waiters = this.waiters.filter((w) => w !== waiter);
      };
      if (!check()) this.waiters.push(waiter);
    });
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }
}

/** `seq 1 n` as a raw terminal prints it (`stty raw`: `\n` only). */
export function expectedSeq(n: number): Buffer {
  const lines: string[] = [];
  for (let i = 1; i <= n; i++) lines.push(String(i));
  return Buffer.from(lines.join('\n') + '\n');
}
