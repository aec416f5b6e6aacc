// Channel: one session bound to a channel number, with the resume offset of docs/protocol.md §3,
// flow-control credit (consumed, acks), input, and the listener's events in order.

import type { MuxClient } from './client.js';
import { ErrorCode, MuxError, reportListenerError } from './errors.js';
import { FrameType, encodeAck, encodeFrame, inputChunkBytes } from './frame.js';
import { MAX_OFFSET } from './validate.js';
import type {
  ExitStatus,
  ScreenMode,
  SessionAttachParams,
  SessionAttachResult,
  SessionKillResult,
  SessionLeaseResult,
  SessionResizeResult,
  SessionSignalParams,
} from './messages.js';

export type ChannelState =
  | 'binding' // session.open / session.attach sent, no result yet
  | 'bound' // output flows
  | 'unbound' // the socket dropped; re-attached on the next socket
  | 'detaching' // session.detach sent
  | 'detached' // detached by us; the session keeps running
  | 'closed'; // session.closed, or the client closed

export interface ChannelListener {
  /**
   * Output bytes (a view, valid until the next event). Call `channel.consumed(n)` once consumed.
   * `replay` is true for bytes below the binding's `live` offset (§3, replay and live output):
   * the session printed them before this attach (or before a re-attach after a reconnect), and a
   * terminal's automatic replies to them must never be sent (see ReplayGuard). A frame that
   * straddles `live` is delivered as two calls, the replay part first. (Optional in the type so
   * that code calling a listener itself, as 1.0 code did, still compiles; this client always
   * passes it.)
   */
  data?(bytes: Uint8Array<ArrayBuffer>, channel: Channel, replay?: boolean): void;
  /**
   * Protocol 1.4: bytes of a pipe session's stderr (a view, valid until the next event), in
   * order with `data` (its stdout): they share the channel's offsets and window, so call
   * `channel.consumed(n)` for them too. Without this handler they are delivered to `data`.
   */
  stderr?(bytes: Uint8Array<ArrayBuffer>, channel: Channel): void;
  /** `lost` bytes of the stream are gone (a session.gap, or an attach whose `from` was too old). */
  gap?(lost: number, channel: Channel): void;
  /** The process exited (delivered once, after the output that preceded the exit). */
  exit?(status: ExitStatus, channel: Channel): void;
  /** The binding ended for good: a §4 reason, or `unknown_session` / `session_closed` when a
   * re-attach found the session gone, or `client_closed`. */
  closed?(reason: string, channel: Channel): void;
  /**
   * A paint of the session's screen follows (protocol 1.3, §3 "Screens"): the next `bytes`
   * bytes of `data` (flagged `replay`) redraw the screen on a fresh terminal of `cols`×`rows`.
   * Reset the terminal now (xterm.js: `term.reset()`), before they arrive.
   */
  screen?(paint: { bytes: number; cols: number; rows: number }, channel: Channel): void;
  /** Bound again after a reconnect (result of the re-attach). */
  reattached?(result: SessionAttachResult, channel: Channel): void;
  /**
   * The session's applied size changed (`session.size`, or a re-attach's result that differs
   * from the size last known): draw the session at this size (§3, terminal size).
   */
  size?(cols: number, rows: number, channel: Channel): void;
}

type ChannelEvent =
  | { t: 'data'; bytes: Uint8Array<ArrayBuffer>; replay: boolean; stderr?: boolean }
  | { t: 'gap'; lost: number }
  | { t: 'exit'; status: ExitStatus }
  | { t: 'closed'; reason: string }
  | { t: 'reattached'; result: SessionAttachResult }
  | { t: 'screen'; bytes: number; cols: number; rows: number }
  | { t: 'size'; cols: number; rows: number };

/**
 * One session bound to a channel number. Keeps the resume offset of §3:
 * `offset = attach offset + payload bytes received + gap bytes`.
 */
export class Channel {
  readonly client: MuxClient;
  /** The channel number (kept across reconnects). */
  readonly id: number;
  private _session: string;
  /** @internal */
  _state: ChannelState = 'binding';

  private attachOffset = 0;
  private received = 0;
  /** Bytes of the binding's paint of the screen still to arrive, and arrived: no offsets. */
  private paintLeft = 0;
  private paintGot = 0;
  /** The attach result's size, applied once its paint (drawn at its own size) is through. */
  private paintSize: { cols: number; rows: number } | null = null;
  /** @internal The attach's screen mode, which a re-attach keeps ('never' stays raw). */
  _screenMode: ScreenMode | undefined;
  private gapBytes = 0;
  /** Bytes of the current binding acknowledged: received − acked never passes flow.window. */
  private acked = 0;
  /** Bytes held in `early`, bounded by the window too. */
  private earlyBytes = 0;
  /** Increments per binding; bytes of an old binding are never acknowledged on a new one. */
  private bindGen = 0;
  /** Received, not yet consumed bytes, per binding generation, in arrival order. */
  private inflight: Array<{ gen: number; bytes: number }> = [];
  /** @internal consumed bytes of the current binding not yet acknowledged */
  _pendingAck = 0;

  private _exit: ExitStatus | null = null;
  private exitDelivered = false;
  /** An exit known from an attach result, delivered once the offset reaches `end`. */
  private deferredExit: { at: number; status: ExitStatus } | null = null;
  private closedReason: string | null = null;
  private _attachResult: SessionAttachResult | null = null;
  /** Offset where the current binding's replay ends (0 after session.open). */
  private _live = 0;
  /** The session's applied size as last known (0 before any). */
  private _cols = 0;
  private _rows = 0;
  /** @internal This viewer's own size, sent with a re-attach after a reconnect. */
  _ownSize: { cols: number; rows: number } | null = null;

  private early: Array<{ t: 'data'; bytes: Uint8Array<ArrayBuffer>; stderr: boolean } | { t: 'gap'; lost: number }> = [];
  private queuedInput: Uint8Array[] = [];
  private queuedInputBytes = 0;
  private listener: ChannelListener | null = null;
  private backlog: ChannelEvent[] = [];
  private bindWaiters: Array<() => void> = [];

  /** @internal */
  constructor(client: MuxClient, id: number, session: string) {
    this.client = client;
    this.id = id;
    this._session = session;
  }

  get session(): string {
    return this._session;
  }
  get state(): ChannelState {
    return this._state;
  }
  /** The offset to resume from: the offset of the next byte this channel will receive. */
  get offset(): number {
    return this.attachOffset + this.received + this.gapBytes;
  }
  /** The process's exit, once known. */
  get exit(): ExitStatus | null {
    return this._exit;
  }
  get closeReason(): string | null {
    return this.closedReason;
  }
  /**
   * Where the current binding's replay ends: bytes below it are replay (§3). 0 after
   * session.open; the attach result's `live` (its `end` from a 1.0 gateway) after an attach or
   * a re-attach.
   */
  get live(): number {
    return this._live;
  }
  /** True while this channel has not yet received every replay byte of its binding. */
  get replaying(): boolean {
    return this.offset < this._live;
  }
  /** The session's applied size as last known (open/attach/resize results, session.size). */
  get cols(): number {
    return this._cols;
  }
  get rows(): number {
    return this._rows;
  }
  /** The result of the latest session.attach of this channel (null after session.open). */
  get attachResult(): SessionAttachResult | null {
    return this._attachResult;
  }

  /** Sets the event listener; events that arrived before are delivered now, in order. */
  listen(listener: ChannelListener): void {
    this.listener = listener;
    const backlog = this.backlog;
    this.backlog = [];
    for (const ev of backlog) this.dispatch(ev);
  }

  private emit(ev: ChannelEvent): void {
    if (!this.listener) {
      this.backlog.push(ev);
      return;
    }
    this.dispatch(ev);
  }

  private dispatch(ev: ChannelEvent): void {
    const l = this.listener;
    if (!l) return;
    try {
      switch (ev.t) {
        case 'data':
          if (ev.stderr && l.stderr) l.stderr(ev.bytes, this);
          else l.data?.(ev.bytes, this, ev.replay);
          break;
        case 'gap':
          l.gap?.(ev.lost, this);
          break;
        case 'exit':
          l.exit?.(ev.status, this);
          break;
        case 'closed':
          l.closed?.(ev.reason, this);
          break;
        case 'reattached':
          l.reattached?.(ev.result, this);
          break;
        case 'screen':
          l.screen?.({ bytes: ev.bytes, cols: ev.cols, rows: ev.rows }, this);
          break;
        case 'size':
          l.size?.(ev.cols, ev.rows, this);
          break;
      }
    } catch (e) {
      reportListenerError(e);
    }
  }

  // --- consumer API

  /**
   * Acknowledges `n` output bytes as consumed (for xterm.js: in `term.write`'s callback).
   * Acks are batched to `flow.ackBytes`, or sent when the consumer goes idle.
   */
  consumed(n: number): void {
    if (!(n > 0)) return;
    let left = Math.floor(n);
    while (left > 0 && this.inflight.length > 0) {
      const head = this.inflight[0]!;
      const take = Math.min(left, head.bytes);
      head.bytes -= take;
      left -= take;
      if (head.gen === this.bindGen && this._state === 'bound') this._pendingAck += take;
      if (head.bytes === 0) this.inflight.shift();
    }
    if (this._pendingAck > 0) this.client._scheduleAck(this);
  }

  /** @internal */
  _flushAck(): void {
    if (this._pendingAck <= 0) return;
    if (this._state !== 'bound') {
      this._pendingAck = 0;
      return;
    }
    while (this._pendingAck > 0) {
      const n = Math.min(this._pendingAck, 0xffffffff);
      if (!this.client._sendFrame(encodeAck(this.id, n))) {
        // No socket: the binding is gone, and its credit with it.
        this._pendingAck = 0;
        return;
      }
      this._pendingAck -= n;
      this.acked += n;
    }
  }

  /**
   * Sends input to the PTY, split into frames of at most `limits.maxInputBytes` bytes (header
   * included, see inputChunkBytes), in order.
   * While the channel waits to be re-attached the input is queued (bounded). Returns false if
   * the input was dropped.
   */
  write(data: string | Uint8Array): boolean {
    const bytes = typeof data === 'string' ? this.client._encode(data) : data;
    if (bytes.length === 0) return true;
    if (this._state === 'bound') return this.sendInput(bytes);
    if (this._state === 'unbound' || this._state === 'binding') {
      if (this.queuedInputBytes + bytes.length > this.client._maxQueuedInputBytes) return false;
      this.queuedInput.push(bytes.slice());
      this.queuedInputBytes += bytes.length;
      return true;
    }
    return false;
  }

  private sendInput(bytes: Uint8Array): boolean {
    const max = inputChunkBytes(this.client.limits.maxInputBytes);
    for (let i = 0; i < bytes.length; i += max) {
      const frame = encodeFrame(FrameType.Input, this.id, bytes.subarray(i, Math.min(bytes.length, i + max)));
      if (!this.client._sendFrame(frame)) return false;
    }
    return true;
  }

  /** session.resize; waits for the channel to be bound. */
  /**
   * Bound on a ready socket, the request is sent before this returns, so input written after the
   * call reaches the PTY after the new size (`stty size` typed right after a resize sees it).
   */
  resize(cols: number, rows: number): Promise<SessionResizeResult> {
    const params = { channel: this.id, cols, rows };
    this._ownSize = { cols, rows };
    const applied = (r: SessionResizeResult): SessionResizeResult => {
      // The applied size (the window-size policy may pick another viewer's); a change also
      // comes as session.size, and _size reports each size once.
      if (r && r.cols > 0 && r.rows > 0) this._size(r.cols, r.rows);
      return r;
    };
    if (this._state === 'bound' && this.client._ready) return this.client._sendRequestNow('session.resize', params).then(applied);
    return this.whenBound().then(() => this.client.request('session.resize', params)).then(applied);
  }

  /** session.signal to the foreground process group. */
  /** Sent before this returns when bound on a ready socket, as `resize`. */
  async signal(signal: SessionSignalParams['signal']): Promise<void> {
    const params = { channel: this.id, signal };
    if (this._state === 'bound' && this.client._ready) {
      await this.client._sendRequestNow('session.signal', params);
      return;
    }
    await this.whenBound();
    await this.client.request('session.signal', params);
  }

  /**
   * Protocol 1.4: session.closeStdin: the stdin of the pipe session on this channel (opened with
   * `tty: false`) closes once the input written before it has reached the program, which then
   * reads the end of its input. Input written after it is refused (`stdin_closed`).
   */
  async closeStdin(): Promise<void> {
    const params = { channel: this.id };
    if (this._state === 'bound' && this.client._ready) {
      await this.client._sendRequestNow('session.closeStdin', params);
      return;
    }
    await this.whenBound();
    await this.client.request('session.closeStdin', params);
  }

  /** session.kill of this channel's session. */
  kill(): Promise<SessionKillResult> {
    return this.client.kill(this._session);
  }

  /** session.lease of this channel's session. */
  lease(ttlMs: number): Promise<SessionLeaseResult> {
    return this.client.lease(this._session, ttlMs);
  }

  /**
   * session.detach: the channel is unbound, the session keeps running. Detaching while the
   * socket is down succeeds locally (the gateway detached the channel when the socket closed).
   */
  async detach(): Promise<void> {
    if (this._state === 'binding') await this.whenBoundOrSettled();
    if (this._state === 'detached' || this._state === 'closed' || this._state === 'detaching') return;
    if (this._state === 'unbound') {
      this.finishDetach();
      return;
    }
    this._state = 'detaching';
    this._pendingAck = 0;
    try {
      await this.client.request('session.detach', { channel: this.id });
    } catch (e) {
      // disconnected: closing the socket detached it; unknown_channel / session_closed: the
      // binding is gone anyway. Anything else: still bound.
      if (!(e instanceof MuxError) || !['disconnected', 'unknown_channel', 'session_closed'].includes(e.kind)) {
        if (this._state === 'detaching') this._state = 'bound';
        throw e;
      }
    }
    this.finishDetach();
  }

  private finishDetach(): void {
    if (this._state !== 'closed') this._state = 'detached';
    this.forget();
  }

  private forget(): void {
    if (this.client.channels.get(this.id) === this) this.client.channels.delete(this.id);
    this.inflight = [];
    this._pendingAck = 0;
    this.queuedInput = [];
    this.queuedInputBytes = 0;
    this.early = [];
    const w = this.bindWaiters;
    this.bindWaiters = [];
    for (const f of w) f();
  }

  private whenBound(): Promise<void> {
    if (this._state === 'bound') return Promise.resolve();
    if (this._state === 'binding' || this._state === 'unbound') {
      return this.whenBoundOrSettled().then(() => {
        if (this._state !== 'bound') throw this.gone();
      });
    }
    return Promise.reject(this.gone());
  }

  private whenBoundOrSettled(): Promise<void> {
    return new Promise((resolve) => this.bindWaiters.push(resolve));
  }

  private gone(): MuxError {
    return new MuxError(ErrorCode.UnknownChannel, `channel ${this.id} is ${this._state}`, { kind: 'unknown_channel' });
  }

  // --- events from the client (internal)

  /** @internal The open/attach result arrived: output starts at `offset`. */
  _bound(session: string, offset: number, from: number | null, attach: SessionAttachResult | null, reattach = false): void {
    this._session = session;
    this._attachResult = attach;
    this.attachOffset = offset;
    // A 1.0 gateway sends no `live`: everything up to the attach's `end` is replay.
    this._live = attach ? (typeof attach.live === 'number' ? attach.live : attach.end) : 0;
    if (attach && attach.cols > 0 && attach.rows > 0) {
      if (reattach) this._size(attach.cols, attach.rows);
      else {
        this._cols = attach.cols;
        this._rows = attach.rows;
      }
    }
    this.received = 0;
    this.gapBytes = 0;
    this.acked = 0;
    this.bindGen++;
    this._state = 'bound';
    this.paintLeft = attach && typeof attach.screen === 'number' && attach.screen > 0 ? attach.screen : 0;
    this.paintGot = 0;
    if (reattach && attach) this.emit({ t: 'reattached', result: attach });
    if (this.paintLeft > 0 && attach) {
      // A paint stands for everything before `offset`: nothing is reported lost. It is drawn
      // at its own size; the result's size, if another, follows it (a size event).
      const cols = attach.screenCols || attach.cols;
      const rows = attach.screenRows || attach.rows;
      this._cols = cols;
      this._rows = rows;
      this.paintSize = { cols: attach.cols, rows: attach.rows };
      this.emit({ t: 'screen', bytes: this.paintLeft, cols, rows });
    } else {
      // Bytes the ring no longer held when `from` was older than the ring: `offset - from`
      // (= result.lost). They are already part of `offset`, so they are reported, not counted.
      const lost = attach && from !== null ? Math.max(0, offset - from) : 0;
      if (lost > 0) this.emit({ t: 'gap', lost });
    }
    if (attach?.exit && !this.exitDelivered) {
      this._exit = attach.exit;
      this.deferredExit = { at: attach.end, status: attach.exit };
    }
    const early = this.early;
    this.early = [];
    this.earlyBytes = 0;
    for (const ev of early) {
      if (ev.t === 'data') this._data(ev.bytes, ev.stderr);
      else this._gap(ev.lost);
    }
    this.checkDeferredExit();
    if (this.queuedInputBytes > 0) {
      const q = this.queuedInput;
      this.queuedInput = [];
      this.queuedInputBytes = 0;
      for (const b of q) this.sendInput(b);
    }
    const w = this.bindWaiters;
    this.bindWaiters = [];
    for (const f of w) f();
  }

  /** @internal */
  _data(bytes: Uint8Array<ArrayBuffer>, stderr = false): void {
    const window = this.client.flow.window;
    if (this._state === 'binding') {
      // Output before the result that binds the channel: a gateway never sends it (§3), but it
      // is kept up to the window, not beyond.
      this.earlyBytes += bytes.length;
      if (this.earlyBytes > window) this.client._violate(`channel ${this.id}: ${this.earlyBytes} bytes before its binding, beyond the window of ${window}`);
      else this.early.push({ t: 'data', bytes, stderr });
      return;
    }
    if (this._state !== 'bound' && this._state !== 'detaching') return;
    if (bytes.length === 0) return;
    // Everything received counts for the window, the paint's bytes too.
    const got = this.received + this.paintGot + bytes.length;
    if (got - this.acked > window) {
      this.client._violate(`channel ${this.id}: ${got - this.acked} bytes unacknowledged, beyond the window of ${window}`);
      return;
    }
    const tail = this.inflight[this.inflight.length - 1];
    if (tail && tail.gen === this.bindGen) tail.bytes += bytes.length;
    else this.inflight.push({ gen: this.bindGen, bytes: bytes.length });
    if (this.paintLeft > 0) {
      // The paint: replay, and no offsets; acknowledged like any output.
      const k = Math.min(this.paintLeft, bytes.length);
      this.paintLeft -= k;
      this.paintGot += k;
      this.emit({ t: 'data', bytes: k === bytes.length ? bytes : bytes.subarray(0, k), replay: true });
      if (this.paintLeft === 0 && this.paintSize) {
        const z = this.paintSize;
        this.paintSize = null;
        this._size(z.cols, z.rows);
      }
      if (k === bytes.length) return;
      bytes = bytes.subarray(k);
    }
    if (this.offset + bytes.length > MAX_OFFSET) {
      this.client._violate(`channel ${this.id}: output past offset 2^53`);
      return;
    }
    const at = this.offset;
    this.received += bytes.length;
    const replayBytes = Math.max(0, Math.min(bytes.length, this._live - at));
    if (replayBytes === bytes.length) this.emit({ t: 'data', bytes, replay: true, stderr });
    else if (replayBytes === 0) this.emit({ t: 'data', bytes, replay: false, stderr });
    else {
      // The frame straddles `live`.
      this.emit({ t: 'data', bytes: bytes.subarray(0, replayBytes), replay: true, stderr });
      this.emit({ t: 'data', bytes: bytes.subarray(replayBytes), replay: false, stderr });
    }
    this.checkDeferredExit();
  }

  /** @internal */
  _gap(lost: number): void {
    if (this._state === 'binding') {
      this.early.push({ t: 'gap', lost });
      return;
    }
    if (this._state !== 'bound' && this._state !== 'detaching') return;
    if (!(lost > 0)) return;
    if (this.offset + lost > MAX_OFFSET) {
      this.client._violate(`channel ${this.id}: a gap of ${lost} bytes at offset ${this.offset} passes 2^53`);
      return;
    }
    this.gapBytes += lost;
    this.emit({ t: 'gap', lost });
    this.checkDeferredExit();
  }

  private checkDeferredExit(): void {
    if (this.deferredExit && this.offset >= this.deferredExit.at) {
      const status = this.deferredExit.status;
      this.deferredExit = null;
      this.deliverExit(status);
    }
  }

  /** @internal The session's applied size; reported when it differs from the last known. */
  _size(cols: number, rows: number): void {
    if (cols === this._cols && rows === this._rows) return;
    this._cols = cols;
    this._rows = rows;
    this.emit({ t: 'size', cols, rows });
  }

  /** @internal session.open: the opener's size is the session's. */
  _setSize(cols: number, rows: number): void {
    this._cols = cols;
    this._rows = rows;
    this._ownSize = { cols, rows };
  }

  /** @internal */
  _exitNotified(status: ExitStatus): void {
    this.deferredExit = null;
    this.deliverExit(status);
  }

  private deliverExit(status: ExitStatus): void {
    this._exit = status;
    if (this.exitDelivered) return;
    this.exitDelivered = true;
    this.emit({ t: 'exit', status });
  }

  /** @internal The binding ended for good. */
  _close(reason: string): void {
    if (this._state === 'closed' || this._state === 'detached') return;
    this._state = 'closed';
    this.closedReason = reason;
    this.forget();
    this.emit({ t: 'closed', reason });
  }

  /** @internal The socket dropped. */
  _socketLost(): void {
    if (this._state === 'bound') {
      this._state = 'unbound';
      this._pendingAck = 0;
    } else if (this._state === 'detaching') {
      // The socket closing detached it.
      this.finishDetach();
    }
    // 'binding' channels are settled by their own request's rejection.
  }

  /** @internal Re-attach on a new socket from the resume offset. */
  async _reattach(): Promise<void> {
    if (this._state !== 'unbound') return;
    const from = this.offset;
    this._state = 'binding';
    let r: SessionAttachResult;
    try {
      const params: SessionAttachParams = { channel: this.id, session: this._session, from };
      // A paint cut short by the drop left half a screen: take a whole one.
      if (this.paintLeft > 0 && this._screenMode !== 'never') params.screen = 'always';
      else if (this._screenMode === 'never') params.screen = 'never';
      if (this._ownSize) {
        params.cols = this._ownSize.cols;
        params.rows = this._ownSize.rows;
      }
      r = await this.client._sendRequestNow('session.attach', params);
    } catch (e) {
      if (this._state !== 'binding') return;
      const kind = e instanceof MuxError ? e.kind : 'internal';
      if (kind === 'disconnected') {
        // Tried again on the next socket.
        this._state = 'unbound';
        this.early = [];
      } else {
        // unknown_session / session_closed: the session is gone (killed elsewhere, reaped).
        // Anything else would fail the same way on every socket: give up on this channel.
        this._close(kind);
      }
      return;
    }
    if (this._state !== 'binding') return;
    if (!this.client._offsetAfter(from, r.offset, 'session.attach')) return;
    this._bound(r.session, r.offset, from, r, true);
  }
}
