// The Pseudoterminal ↔ Channel adapter: everything the extension does with a session, without
// importing `vscode` (only types of @muxterm/client), so that node --test runs it as it is.
//
// VS Code calls open(dimensions), handleInput(data), setDimensions(dimensions) and close() on a
// Pseudoterminal and listens to its onDidWrite / onDidClose / onDidChangeName events. This class
// implements those four methods over one muxterm Channel and fires the events through emitters
// the extension passes in (vscode.EventEmitter satisfies Emitter).
import type { Channel, ExitStatus, SessionAttachResult, SessionInfo, SessionOpenParams } from '@muxterm/client';

/** `vscode.EventEmitter<T>`'s `fire`. */
export interface Emitter<T> {
  fire(data: T): void;
}

/** `vscode.TerminalDimensions`. */
export interface Dimensions {
  readonly columns: number;
  readonly rows: number;
}

/** Where the Pseudoterminal's events go: onDidWrite, onDidClose, onDidChangeName. */
export interface TerminalEvents {
  write: Emitter<string>;
  close: Emitter<number | void>;
  name?: Emitter<string>;
}

/** The parts of a Channel the adapter uses (a `Channel` of @muxterm/client is one). */
export type SessionChannel = Pick<
  Channel,
  'session' | 'offset' | 'state' | 'exit' | 'attachResult' | 'listen' | 'consumed' | 'write' | 'resize' | 'detach' | 'kill'
>;

/** The parts of a MuxClient the adapter uses (a `MuxClient` of @muxterm/client is one). */
export interface SessionClient {
  connect(): Promise<void>;
  open(params: Omit<SessionOpenParams, 'channel'>): Promise<SessionChannel>;
  attach(session: string, from?: number): Promise<SessionChannel>;
}

/** A new session (the gateway's default shell unless `cmd`), or an existing one from `from` (0: the whole ring). */
export type Target =
  | { kind: 'open'; cmd?: string[]; cwd?: string; name?: string }
  | { kind: 'attach'; session: string; from?: number; name?: string };

export interface SessionTerminalOptions {
  /** Closing the terminal kills the session (default: detaches it; the session keeps running). */
  killOnClose?: boolean;
  /** The terminal's size before VS Code reports one (default 80×24). */
  defaultDimensions?: Dimensions;
}

const SIGNALS: Record<string, number> = { HUP: 1, INT: 2, QUIT: 3, ABRT: 6, KILL: 9, USR1: 10, SEGV: 11, USR2: 12, PIPE: 13, ALRM: 14, TERM: 15 };

/** The exit code a terminal shows for a status: the code, or 128 + the signal's number (as a shell does). */
export function exitCode(status: ExitStatus): number {
  if (status.code >= 0) return status.code;
  const n = status.signal ? SIGNALS[status.signal] : undefined;
  return n === undefined ? 1 : 128 + n;
}

/** A quick-pick row for a session of `session.list`. */
export function describeSession(s: SessionInfo): { label: string; description: string; detail: string } {
  const state = s.exit ? `exited ${s.exit.signal ?? s.exit.code}` : s.viewers > 0 ? `${s.viewers} viewer${s.viewers > 1 ? 's' : ''}` : 'detached';
  return {
    label: s.name || s.session,
    description: `${s.cmd.join(' ')} · ${s.cols}×${s.rows} · ${state}`,
    detail: `${s.session} · started ${s.created}`,
  };
}

/** One VS Code terminal showing one muxterm session. */
export class SessionTerminal {
  private channel: SessionChannel | null = null;
  /** Input typed before the channel was bound, sent once it is. */
  private pendingInput: string[] = [];
  /** The size VS Code last reported, and the size the PTY has (or is being given). */
  private wanted: Dimensions;
  private applied: Dimensions | null = null;
  private resizing = false;
  private readonly decoder = new TextDecoder();
  private done = false;
  /** The terminal was closed by the user before the channel was bound. */
  private closedByUser = false;

  constructor(
    private readonly client: SessionClient,
    private readonly target: Target,
    private readonly events: TerminalEvents,
    private readonly options: SessionTerminalOptions = {},
  ) {
    this.wanted = options.defaultDimensions ?? { columns: 80, rows: 24 };
  }

  /** The session id once bound. */
  get session(): string | null {
    return this.channel?.session ?? null;
  }

  /** The bound channel's offset (what a later attach resumes `from`). */
  get offset(): number {
    return this.channel?.offset ?? 0;
  }

  /** Pseudoterminal.open. Resolves once bound (or failed: then the terminal is closed with 1). */
  async open(initial: Dimensions | undefined): Promise<void> {
    if (initial) this.wanted = initial;
    let ch: SessionChannel;
    try {
      await this.client.connect();
      if (this.target.kind === 'open') {
        const p: Omit<SessionOpenParams, 'channel'> = { cols: this.wanted.columns, rows: this.wanted.rows };
        if (this.target.cmd) p.cmd = this.target.cmd;
        if (this.target.cwd) p.cwd = this.target.cwd;
        if (this.target.name) p.name = this.target.name;
        ch = await this.client.open(p);
        this.applied = { columns: p.cols, rows: p.rows };
      } else {
        ch = await this.client.attach(this.target.session, this.target.from ?? 0);
      }
    } catch (e) {
      this.fail(`cannot ${this.target.kind === 'open' ? 'open a session' : `attach to ${this.target.session}`}: ${message(e)}`);
      return;
    }
    this.channel = ch;
    if (this.closedByUser) {
      this.leave(ch);
      return;
    }
    this.events.name?.fire(`muxterm: ${this.target.name ?? ch.session.slice(0, 8)}`);
    ch.listen({
      data: (bytes) => {
        this.events.write.fire(this.decoder.decode(bytes, { stream: true }));
        // VS Code gives no callback once it drew the text: handing it over is consuming it.
        ch.consumed(bytes.length);
      },
      gap: (lost) => this.notice(`${lost} bytes of output were lost`),
      // A paint of the session's screen follows (the ring no longer held what was asked): it
      // redraws a fresh terminal, so the terminal is reset first (RIS), then painted.
      screen: () => this.events.write.fire('\x1bc'),
      reattached: (r: SessionAttachResult) => {
        if (r.lost > 0 && !(r.screen && r.screen > 0)) this.notice(`reconnected; ${r.lost} bytes of output were lost`);
      },
      exit: (status) => this.finish(exitCode(status)),
      closed: (reason) => {
        if (this.done) return;
        this.notice(`session ${reason.replace(/_/g, ' ')}`);
        this.finish(ch.exit ? exitCode(ch.exit) : undefined);
      },
    });
    // An attach starts at the session's size (a lost ring start arrives as a paint of the
    // screen, a past exit as an exit after the replay).
    const r = ch.attachResult;
    if (r) this.applied = { columns: r.cols, rows: r.rows };
    const input = this.pendingInput.join('');
    this.pendingInput = [];
    if (input) ch.write(input);
    void this.syncSize();
  }

  /** Pseudoterminal.handleInput. */
  handleInput(data: string): void {
    if (this.done) return;
    if (this.channel) this.channel.write(data);
    else this.pendingInput.push(data);
  }

  /** Pseudoterminal.setDimensions: the PTY follows (the latest size wins; one resize in flight). */
  setDimensions(d: Dimensions): void {
    this.wanted = d;
    void this.syncSize();
  }

  /** Pseudoterminal.close: the user closed the terminal. Detaches (or kills) the session. */
  close(): void {
    if (this.done) return;
    this.done = true;
    if (this.channel) this.leave(this.channel);
    else this.closedByUser = true;
  }

  private leave(ch: SessionChannel): void {
    if (ch.state === 'closed' || ch.state === 'detached') return;
    const p = this.options.killOnClose ? ch.kill() : ch.detach();
    p.catch(() => {
      /* the session or the socket is already gone */
    });
  }

  private async syncSize(): Promise<void> {
    const ch = this.channel;
    if (!ch || this.resizing || this.done) return;
    this.resizing = true;
    try {
      while (!this.done && (this.applied?.columns !== this.wanted.columns || this.applied?.rows !== this.wanted.rows)) {
        const d = this.wanted;
        await ch.resize(d.columns, d.rows);
        this.applied = d;
      }
    } catch (e) {
      if (!this.done) this.notice(`resize failed: ${message(e)}`);
    } finally {
      this.resizing = false;
    }
  }

  private notice(text: string): void {
    this.events.write.fire(`\r\n\x1b[2m[muxterm: ${text}]\x1b[0m\r\n`);
  }

  private fail(text: string): void {
    this.notice(text);
    this.done = true;
    this.events.close.fire(1);
  }

  /** The program ended (or the session went away): close the terminal with `code`, and leave the channel. */
  private finish(code: number | undefined): void {
    if (this.done) return;
    this.done = true;
    const tail = this.decoder.decode();
    if (tail) this.events.write.fire(tail);
    this.events.close.fire(code);
    if (this.channel) this.leave(this.channel);
  }
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
