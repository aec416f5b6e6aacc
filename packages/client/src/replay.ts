// Replay never produces input (docs/protocol.md §3): which input payloads are terminal replies,
// and ReplayGuard, which drops them while replayed output is being parsed.

// The reply patterns of docs/protocol.md §3, 7-bit and 8-bit C1 introducers.
const CSI = '(?:\\x1b\\[|\\x9b)';
const REPLY_PATTERNS: RegExp[] = [
  new RegExp(`^${CSI}[?>=]?[\\d;]*c$`), // DA1/DA2/DA3
  new RegExp(`^${CSI}\\??\\d+(;\\d+)*R$`), // CPR
  new RegExp(`^${CSI}\\d*n$`), // DSR
  new RegExp(`^${CSI}\\??[\\d;]+\\$y$`), // DECRQM
  new RegExp(`^${CSI}\\d+(;\\d+)*t$`), // window reports
  /^(?:\x1b\]|\x9d)[\s\S]*(?:\x07|\x1b\\|\x9c)$/, // OSC
  /^(?:\x1bP|\x90)[\s\S]*(?:\x1b\\|\x9c)$/, // DCS: XTVERSION, DECRQSS, XTGETTCAP
];

/**
 * Whether `data` (one `onData` payload of a terminal emulator) is an automatic terminal reply
 * (device attributes, cursor/status reports, colour queries, mode reports, window reports, DCS
 * replies) rather than something a person typed: the patterns of docs/protocol.md §3.
 */
export function isTerminalReply(data: string): boolean {
  for (const re of REPLY_PATTERNS) if (re.test(data)) return true;
  return false;
}

/** Writes bytes to a terminal and calls `parsed` once the terminal has parsed them. */
export type TerminalWrite = (bytes: Uint8Array, parsed: () => void) => void;

/**
 * The xterm.js recipe of docs/protocol.md §3, for any terminal emulator whose write takes a
 * callback fired once the bytes are parsed and which emits its replies synchronously while
 * parsing (xterm.js: `term.write(bytes, cb)` and `term.onData`).
 *
 * Route every output chunk through `output(bytes, replay, done)` (the `replay` flag of
 * ChannelListener.data) and every input payload through `allows(data)`: while replay bytes are
 * written but not yet parsed, a payload that is a terminal reply is refused; anything else
 * (a keystroke, a paste) is allowed. Live bytes written after the replay are parsed after it,
 * so their replies are allowed.
 */
export class ReplayGuard {
  private readonly writeFn: TerminalWrite;
  /** Replay writes not yet parsed. */
  private pendingReplay = 0;
  /** Replies refused so far (for tests and diagnostics). */
  dropped = 0;

  constructor(write: TerminalWrite) {
    this.writeFn = write;
  }

  /** True while some replay bytes have been written and not yet parsed. */
  get replaying(): boolean {
    return this.pendingReplay > 0;
  }

  /** Writes output; `done` runs once the terminal parsed it (acknowledge there). */
  output(bytes: Uint8Array, replay: boolean | undefined, done?: () => void): void {
    if (!replay) {
      this.writeFn(bytes, () => done?.());
      return;
    }
    this.pendingReplay++;
    this.writeFn(bytes, () => {
      this.pendingReplay--;
      done?.();
    });
  }

  /** Whether an input payload may be sent: false only for a terminal reply during a replay. */
  allows(data: string): boolean {
    if (this.pendingReplay > 0 && isTerminalReply(data)) {
      this.dropped++;
      return false;
    }
    return true;
  }

  /** Forget pending replay writes (the terminal was reset or disposed). */
  reset(): void {
    this.pendingReplay = 0;
  }
}
