// MuxClient: one multiplexed connection to a gateway (docs/protocol.md §4): connect, initialize,
// requests, reconnect with backoff and re-attach of every channel, incoming text and binary
// messages, and batched acknowledgements.

import { DEFAULT_BACKOFF, reconnectDelay, type BackoffOptions } from './backoff.js';
import { Channel } from './channel.js';
import { MAX_RECORDING_READ } from './cast.js';
import { ErrorCode, MuxError, clientClosed, disconnected, reportListenerError, type JsonRpcErrorObject } from './errors.js';
import { FrameType, HEADER_BYTES, MAX_CHANNEL, SUBPROTOCOL, decodeFrame } from './frame.js';
import type {
  ClientInfo,
  FlowParams,
  InitializeResult,
  JsonRpcId,
  JsonRpcRequest,
  Limits,
  Method,
  RequestMap,
  ScreenMode,
  SessionAttachParams,
  SessionCaptureResult,
  SessionInfo,
  SessionKillResult,
  SessionLeaseResult,
  SessionOpenParams,
  RecordingInfo,
} from './messages.js';
import { WS_OPEN, defaultWebSocketFactory, type WebSocketFactory, type WebSocketLike } from './socket.js';
import { DEFAULT_MAX_MESSAGE_BYTES, MAX_OFFSET, checkNotification, checkResult } from './validate.js';

export type ConnectionState = 'idle' | 'connecting' | 'connected' | 'reconnecting' | 'closed';

export interface MuxClientOptions {
  /** Defaults to globalThis.WebSocket. */
  webSocketFactory?: WebSocketFactory;
  client?: ClientInfo;
  capabilities?: Record<string, unknown>;
  backoff?: Partial<BackoffOptions>;
  /** Reconnect after the socket drops (default true). */
  reconnect?: boolean;
  /** Give up on a socket whose `initialize` got no answer in this time (default 10 s). */
  initializeTimeoutMs?: number;
  /**
   * Consumed bytes below `flow.ackBytes` are acknowledged when the consumer goes idle:
   * 0 (default) means at the end of the current task (a microtask), more means after that
   * many milliseconds without reaching `ackBytes`.
   */
  ackIdleMs?: number;
  /**
   * Input typed while a channel waits to be re-attached is kept (at most this many bytes per
   * channel, default 65536) and sent once it is attached again; beyond that it is dropped.
   */
  maxQueuedInputBytes?: number;
  /**
   * The largest message accepted from the gateway (default 16 MiB, as the Go client): a larger
   * one ends the connection with a `protocol` error. Binary messages are bounded tighter, by
   * `limits.maxOutputFrameBytes` plus the header. Passed to the factory as `maxPayload`.
   */
  maxMessageBytes?: number;
  /** For tests: the jitter source. */
  random?: () => number;
}

export interface MuxClientEvents {
  /** The connection state changed. */
  state: (state: ConnectionState) => void;
  /** A socket finished `initialize` (first connect and every reconnect). */
  initialized: (result: InitializeResult) => void;
  /** An error response nobody waits for (`id: null`: bad frames, oversize messages, …). */
  error: (err: MuxError) => void;
}

interface Pending {
  method: string;
  resolve: (v: unknown) => void;
  reject: (e: MuxError) => void;
}

type Listeners = { [K in keyof MuxClientEvents]: Set<MuxClientEvents[K]> };

const DEFAULT_LIMITS: Limits = {
  maxMessageBytes: 65536,
  maxInputBytes: 65536,
  maxChannels: 64,
  maxSessions: 64,
  maxCols: 1000,
  maxRows: 1000,
  maxOutputFrameBytes: 32768,
};
const DEFAULT_FLOW: FlowParams = { window: 262144, ackBytes: 65536 };

/**
 * One multiplexed connection to a muxterm gateway. Survives socket drops: it reconnects with
 * backoff, re-initializes, and re-attaches every channel from its resume offset.
 */
export class MuxClient {
  readonly url: string;
  private readonly factory: WebSocketFactory;
  private readonly opts: Required<Omit<MuxClientOptions, 'webSocketFactory' | 'backoff'>>;
  private readonly backoff: BackoffOptions;

  private ws: WebSocketLike | null = null;
  /** Increments per socket; stale socket events and responses are recognised by it. */
  private socketGen = 0;
  /** `initialize` answered and every channel re-attach settled on the current socket. */
  private ready = false;
  private _state: ConnectionState = 'idle';
  private attempt = 0;
  private everConnected = false;
  private reconnectTimer: ReturnType<typeof setTimeout> | null = null;
  /** When the last connected socket was lost (ms since the epoch). */
  private droppedAt = 0;
  private initTimer: ReturnType<typeof setTimeout> | null = null;
  private nextId = 1;
  private readonly pending = new Map<JsonRpcId, Pending>();
  private readyWaiters: Array<{ resolve: () => void; reject: (e: MuxError) => void }> = [];
  private readonly listeners: Listeners = { state: new Set(), initialized: new Set(), error: new Set() };

  /** @internal */
  readonly channels = new Map<number, Channel>();
  private nextChannel = 1;
  private ackScheduled = false;
  private ackTimer: ReturnType<typeof setTimeout> | null = null;
  private readonly encoder = new TextEncoder();

  /** Limits and flow parameters of the last `initialize` (defaults of §4 before that). */
  limits: Limits = { ...DEFAULT_LIMITS };
  flow: FlowParams = { ...DEFAULT_FLOW };
  server: InitializeResult['server'] | null = null;
  /** Why the client ended, when the gateway broke the protocol (kind `protocol`); else null. */
  protocolError: MuxError | null = null;

  constructor(url: string, options: MuxClientOptions = {}) {
    this.url = url;
    this.factory = options.webSocketFactory ?? defaultWebSocketFactory;
    this.backoff = { ...DEFAULT_BACKOFF, ...options.backoff };
    this.opts = {
      client: options.client ?? { name: 'muxterm-client', version: '0.1.0' },
      // screen: this client understands paints of the screen (protocol 1.3, Channel's `screen`).
      capabilities: { screen: true, pipes: true, ...(options.capabilities ?? {}) },
      reconnect: options.reconnect ?? true,
      initializeTimeoutMs: options.initializeTimeoutMs ?? 10_000,
      ackIdleMs: options.ackIdleMs ?? 0,
      maxQueuedInputBytes: options.maxQueuedInputBytes ?? 65536,
      maxMessageBytes: options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES,
      random: options.random ?? Math.random,
    };
  }

  get state(): ConnectionState {
    return this._state;
  }

  on<K extends keyof MuxClientEvents>(event: K, fn: MuxClientEvents[K]): () => void {
    (this.listeners[event] as Set<MuxClientEvents[K]>).add(fn);
    return () => {
      (this.listeners[event] as Set<MuxClientEvents[K]>).delete(fn);
    };
  }

  private emit<K extends keyof MuxClientEvents>(event: K, ...args: Parameters<MuxClientEvents[K]>): void {
    for (const fn of [...this.listeners[event]]) {
      try {
        (fn as (...a: Parameters<MuxClientEvents[K]>) => void)(...args);
      } catch (e) {
        reportListenerError(e);
      }
    }
  }

  private setState(s: ConnectionState): void {
    if (this._state === s) return;
    this._state = s;
    this.emit('state', s);
  }

  /** Starts connecting (idempotent). Resolves once the first socket is initialized. */
  connect(): Promise<void> {
    if (this._state === 'closed') return Promise.reject(clientClosed());
    if (this._state === 'idle') {
      this.setState('connecting');
      this.openSocket();
    }
    return this.whenReady();
  }

  /** Resolves when the client is connected and every channel is re-attached. */
  whenReady(): Promise<void> {
    if (this._state === 'closed') return Promise.reject(clientClosed());
    if (this.ready) return Promise.resolve();
    return new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject }));
  }

  /** Skips the remaining backoff delay (for example on the browser's `online` event). */
  reconnectNow(): void {
    if (this.reconnectTimer === null) return;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    this.openSocket();
  }

  /**
   * Makes sure the connection still works, for a page that comes back (restored from the
   * back-forward cache, shown again, back online, a laptop that woke): a client waiting to
   * reconnect reconnects now; a connected one asks `session.list` and, when no answer comes
   * within `timeoutMs` (a socket the network silently lost answers nothing, and the browser
   * would not notice for minutes), abandons the socket and reconnects, re-attaching every
   * channel from its offset.
   */
  checkConnection(timeoutMs = 3000): void {
    if (this._state === 'closed' || this._state === 'idle') return;
    if (this._state !== 'connected' || !this.ready) {
      this.reconnectNow();
      return;
    }
    const gen = this.socketGen;
    if (this.ws?.readyState !== WS_OPEN) {
      this.abandonSocket('socket not open');
      return;
    }
    let answered = false;
    const timer = setTimeout(() => {
      if (!answered && gen === this.socketGen) this.abandonSocket('no answer to a liveness check');
    }, timeoutMs);
    this.request('session.list', {}).then(
      () => {
        answered = true;
        clearTimeout(timer);
      },
      () => clearTimeout(timer), // the socket was lost: the reconnect is under way
    );
  }

  /**
   * Closes the socket for good: no reconnect; pending requests reject with `client_closed`.
   * When connected, bound channels are detached first, so their sessions do not wait out the
   * gateway's resume hold for a client that is not coming back. A channel still binding, or
   * one lost with an earlier socket while reconnecting, cannot be detached: the gateway holds
   * its session's output for `flow.resumeHoldMs` at most.
   */
  close(): void {
    if (this._state === 'closed') return;
    const ws = this.ws;
    if (ws && ws.readyState === WS_OPEN && this._state === 'connected') {
      for (const ch of this.channels.values()) {
        if (ch._state !== 'bound') continue;
        const msg: JsonRpcRequest = { jsonrpc: '2.0', id: this.nextId++, method: 'session.detach', params: { channel: ch.id } };
        try {
          ws.send(JSON.stringify(msg)); // the gateway reads it before the close frame
        } catch {
          break;
        }
      }
    }
    this.setState('closed');
    if (this.reconnectTimer !== null) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    this.dropSocket(clientClosed());
    if (ws) {
      try {
        ws.close(1000, 'client closed');
      } catch {
        /* already closed */
      }
    }
    for (const ch of [...this.channels.values()]) ch._close('client_closed');
    const waiters = this.readyWaiters;
    this.readyWaiters = [];
    for (const w of waiters) w.reject(clientClosed());
  }

  // --- requests

  /** Sends a request once the client is ready; resolves with `result`, rejects with MuxError. */
  async request<M extends Method>(method: M, params: RequestMap[M][0]): Promise<RequestMap[M][1]> {
    await this.whenReady();
    return this._sendRequestNow(method, params);
  }

  /** @internal Sends on the current socket right now, ready or not (initialize, re-attach). */
  _sendRequestNow<M extends Method>(method: M, params: RequestMap[M][0]): Promise<RequestMap[M][1]> {
    const ws = this.ws;
    if (!ws || ws.readyState !== WS_OPEN) {
      return Promise.reject(disconnected(method));
    }
    const id = this.nextId++;
    const msg: JsonRpcRequest = { jsonrpc: '2.0', id, method, params };
    return new Promise<RequestMap[M][1]>((resolve, reject) => {
      this.pending.set(id, {
        method,
        resolve: resolve as (v: unknown) => void,
        reject,
      });
      try {
        ws.send(JSON.stringify(msg));
      } catch {
        this.pending.delete(id);
        reject(disconnected(method));
      }
    });
  }

  list(): Promise<SessionInfo[]> {
    return this.request('session.list', {}).then((r) => r.sessions ?? []);
  }

  kill(session: string): Promise<SessionKillResult> {
    return this.request('session.kill', { session });
  }

  /**
   * session.capture (protocol 1.3): what is on a session's screen, as text (the default) or as
   * a paint (`ansi`), with `scrollback` lines of history above it.
   */
  capture(session: string, opts?: { ansi?: boolean; scrollback?: number }): Promise<SessionCaptureResult> {
    return this.request('session.capture', {
      session,
      format: opts?.ansi ? 'ansi' : 'text',
      ...(opts?.scrollback ? { scrollback: opts.scrollback } : {}),
    });
  }

  /** recording.list (protocol 1.4): the recordings the caller may see, oldest first. */
  recordings(session?: string): Promise<RecordingInfo[]> {
    return this.request('recording.list', session ? { session } : {}).then((r) => r.recordings ?? []);
  }

  /**
   * recording.read (protocol 1.4): up to `length` bytes (at most MAX_RECORDING_READ) of a
   * recording's file from `offset`, decoded.
   */
  async readRecording(
    recording: string,
    offset: number,
    length: number = MAX_RECORDING_READ,
  ): Promise<{ data: Uint8Array; size: number; eof: boolean }> {
    const r = await this.request('recording.read', { recording, offset, length });
    let data: Uint8Array;
    try {
      data = Uint8Array.from(atob(r.data), (c: string) => c.charCodeAt(0));
    } catch {
      throw new MuxError(ErrorCode.Internal, 'recording.read: data is not base64', { kind: 'protocol' }, 'recording.read');
    }
    if (r.offset !== offset || data.length > length) {
      throw new MuxError(ErrorCode.Internal, `recording.read at ${offset} for ${length} bytes: ${data.length} bytes at ${r.offset}`,
        { kind: 'protocol' }, 'recording.read');
    }
    return { data, size: r.size, eof: r.eof };
  }

  /** A recording's whole file as it is now (recording.read until its end). */
  async exportRecording(recording: string): Promise<Uint8Array> {
    const parts: Uint8Array[] = [];
    let offset = 0;
    for (;;) {
      const { data, eof } = await this.readRecording(recording, offset);
      parts.push(data);
      offset += data.length;
      if (eof || data.length === 0) break;
    }
    const out = new Uint8Array(offset);
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }

  lease(session: string, ttlMs: number): Promise<SessionLeaseResult> {
    return this.request('session.lease', { session, ttl_ms: ttlMs });
  }

  /** session.open on a fresh channel. */
  async open(params: Omit<SessionOpenParams, 'channel'>): Promise<Channel> {
    await this.whenReady();
    const ch = new Channel(this, this.allocChannel(), '');
    this.channels.set(ch.id, ch);
    try {
      const r = await this._sendRequestNow('session.open', { ...params, channel: ch.id });
      ch._bound(r.session, r.offset ?? 0, null, null);
      ch._setSize(params.cols, params.rows);
      return ch;
    } catch (e) {
      if (this.channels.get(ch.id) === ch) this.channels.delete(ch.id);
      ch._state = 'closed';
      throw e;
    }
  }

  /**
   * session.attach on a fresh channel; `from` omitted replays the oldest retained byte on.
   * `size` is this viewer's terminal size for the window-size policy (protocol 1.1); the
   * session's applied size is `channel.cols`/`channel.rows` once this resolves.
   */
  async attach(
    session: string,
    from?: number,
    size?: { cols: number; rows: number },
    opts?: { screen?: ScreenMode },
  ): Promise<Channel> {
    await this.whenReady();
    const ch = new Channel(this, this.allocChannel(), session);
    this.channels.set(ch.id, ch);
    try {
      const params: SessionAttachParams = { channel: ch.id, session };
      if (from !== undefined) params.from = from;
      if (opts?.screen) params.screen = opts.screen;
      ch._screenMode = opts?.screen;
      if (size) {
        params.cols = size.cols;
        params.rows = size.rows;
        ch._ownSize = { cols: size.cols, rows: size.rows };
      }
      const r = await this._sendRequestNow('session.attach', params);
      if (!this._offsetAfter(from ?? null, r.offset, 'session.attach')) throw this.protocolError;
      ch._bound(r.session, r.offset, from ?? null, r);
      return ch;
    } catch (e) {
      if (this.channels.get(ch.id) === ch) this.channels.delete(ch.id);
      ch._state = 'closed';
      throw e;
    }
  }

  private allocChannel(): number {
    for (let i = 0; i < 16; i++) {
      const c = this.nextChannel;
      this.nextChannel = c >= MAX_CHANNEL ? 1 : c + 1;
      if (!this.channels.has(c)) return c;
    }
    for (let c = 1; c <= MAX_CHANNEL; c++) if (!this.channels.has(c)) return c;
    throw new RangeError('no free channel');
  }

  // --- socket lifecycle

  private openSocket(): void {
    const gen = ++this.socketGen;
    let ws: WebSocketLike;
    try {
      ws = this.factory(this.url, SUBPROTOCOL, { maxPayload: this.opts.maxMessageBytes });
      ws.binaryType = 'arraybuffer';
    } catch {
      this.ws = null;
      this.scheduleReconnect();
      return;
    }
    this.ws = ws;
    ws.onopen = () => {
      if (gen !== this.socketGen) return;
      void this.initialize(gen);
    };
    ws.onmessage = (ev) => {
      if (gen !== this.socketGen) return;
      this.onMessage(ev.data);
    };
    // The `ws` package reports a message over maxPayload as an error (then a close 1006).
    let tooBig = false;
    ws.onerror = (ev) => {
      const e = ev as { error?: { code?: unknown } } | null;
      if (e?.error?.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') tooBig = true;
      /* a close event follows */
    };
    ws.onclose = (ev) => {
      if (gen !== this.socketGen) return;
      if (ev?.code === 1009 || tooBig) {
        // Our own socket refused a message over maxPayload (the `ws` package does, before
        // buffering it), or the gateway says we sent one: either way not for a reconnect.
        this._violate(`a message larger than ${this.opts.maxMessageBytes} bytes (close 1009)`);
        return;
      }
      if (ev?.code === 4003) {
        // The share link this socket was opened with ended (revoked or expired): it
        // authenticates no more, so no reconnect; the client ends with the reason.
        this.dropSocket(disconnected());
        for (const ch of this.channels.values()) ch._socketLost();
        this.close();
        this.emit('error', new MuxError(ErrorCode.Internal, `the share link ended (close 4003${ev.reason ? `: ${ev.reason}` : ''})`, { kind: 'forbidden' }));
        return;
      }
      this.onSocketLost(disconnected());
    };
  }

  private async initialize(gen: number): Promise<void> {
    this.initTimer = setTimeout(() => {
      if (gen !== this.socketGen) return;
      this.abandonSocket('initialize timed out');
    }, this.opts.initializeTimeoutMs);
    let result: InitializeResult;
    try {
      result = await this._sendRequestNow('initialize', {
        client: this.opts.client,
        capabilities: this.opts.capabilities,
      });
    } catch (e) {
      if (gen !== this.socketGen) return;
      if (e instanceof MuxError && e.kind !== 'disconnected') this.emit('error', e);
      this.abandonSocket('initialize failed');
      return;
    } finally {
      if (this.initTimer !== null) clearTimeout(this.initTimer);
      this.initTimer = null;
    }
    if (gen !== this.socketGen) return;
    this.limits = { ...DEFAULT_LIMITS, ...result.limits };
    this.flow = { ...DEFAULT_FLOW, ...result.flow };
    if (!this.flow.window) this.flow.window = DEFAULT_FLOW.window; // 0 or absent: §3's default
    this.server = result.server ?? null;
    this.emit('initialized', result);

    // Re-attach every channel that was bound before the socket dropped, from its offset.
    const reattach: Promise<unknown>[] = [];
    for (const ch of [...this.channels.values()]) {
      if (ch._state === 'unbound') reattach.push(ch._reattach());
    }
    await Promise.allSettled(reattach);
    if (gen !== this.socketGen) return;
    if ([...this.channels.values()].some((c) => c._state === 'unbound')) {
      // A re-attach lost its answer; try again on a fresh socket.
      this.abandonSocket('re-attach failed');
      return;
    }
    this.attempt = 0;
    this.everConnected = true;
    this.ready = true;
    if (this._state !== 'closed') this.setState('connected');
    const waiters = this.readyWaiters;
    this.readyWaiters = [];
    for (const w of waiters) w.resolve();
  }

  /** Closes the current socket ourselves and goes through the reconnect path. */
  private abandonSocket(reason: string): void {
    const ws = this.ws;
    this.onSocketLost(disconnected());
    try {
      ws?.close(4000, reason);
    } catch {
      /* ignore */
    }
  }

  private onSocketLost(err: MuxError): void {
    if (this._state === 'closed') return;
    this.dropSocket(err);
    for (const ch of this.channels.values()) ch._socketLost();
    if (!this.opts.reconnect) {
      this.close();
      return;
    }
    if (this._state === 'connected') this.droppedAt = Date.now();
    this.setState(this.everConnected ? 'reconnecting' : 'connecting');
    this.scheduleReconnect();
  }

  /** Forgets the current socket: pending requests reject, ack state is dropped. */
  private dropSocket(err: MuxError): void {
    const ws = this.ws;
    this.ws = null;
    this.ready = false;
    this.socketGen++;
    if (this.initTimer !== null) clearTimeout(this.initTimer);
    this.initTimer = null;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onerror = ws.onclose = null;
    }
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) p.reject(new MuxError(ErrorCode.Internal, `${p.method}: ${err.message}`, err.data, p.method));
  }

  private scheduleReconnect(): void {
    if (this._state === 'closed' || this.reconnectTimer !== null) return;
    const delay = reconnectDelay(this.attempt++, this.backoff, this.opts.random,
      this.flow.resumeHoldMs ?? 0, Date.now() - this.droppedAt);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.openSocket();
    }, delay);
  }

  // --- incoming

  private onMessage(data: unknown): void {
    if (typeof data === 'string') {
      // A string's UTF-8 takes at least one byte per UTF-16 unit: checked before it is parsed.
      if (data.length > this.opts.maxMessageBytes) {
        this._violate(`a text message of more than ${this.opts.maxMessageBytes} bytes`);
        return;
      }
      this.onText(data);
    } else if (data instanceof ArrayBuffer || ArrayBuffer.isView(data)) {
      const max = HEADER_BYTES + Math.min(this.limits.maxOutputFrameBytes, this.opts.maxMessageBytes);
      if (data.byteLength > max) {
        this._violate(`a binary message of ${data.byteLength} bytes, longer than an output frame (${max})`);
        return;
      }
      this.onBinary(data as ArrayBuffer | ArrayBufferView);
    } else {
      this._violate('a message that is neither text nor binary');
    }
  }

  private onText(text: string): void {
    let msg: unknown;
    try {
      msg = JSON.parse(text);
    } catch {
      this._violate('a text message that is not JSON');
      return;
    }
    if (typeof msg !== 'object' || msg === null || Array.isArray(msg)) {
      this._violate('a text message that is not a JSON object');
      return;
    }
    const m = msg as Record<string, unknown>;
    if (m['method'] !== undefined) {
      if (typeof m['method'] !== 'string') this._violate('method is not a string');
      else if (m['id'] === undefined) this.onNotification(m['method'], m['params']);
      return; // the gateway sends no requests in v1
    }
    const id = m['id'];
    const error = m['error'];
    if (error !== undefined && (typeof error !== 'object' || error === null || typeof (error as JsonRpcErrorObject).code !== 'number' ||
      typeof (error as JsonRpcErrorObject).message !== 'string')) {
      this._violate('error is not a JSON-RPC error object');
      return;
    }
    if (id === null || id === undefined) {
      if (error) this.emit('error', MuxError.fromObject(error as JsonRpcErrorObject));
      return;
    }
    if (typeof id !== 'number' && typeof id !== 'string') {
      this._violate('id is neither a number nor a string');
      return;
    }
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    if (error) {
      p.reject(MuxError.fromObject(error as JsonRpcErrorObject, p.method));
      return;
    }
    const problem = checkResult(p.method, m['result']);
    if (problem !== null) {
      this._violate(problem);
      p.reject(this.protocolError!);
      return;
    }
    p.resolve(m['result']);
  }

  private onNotification(method: string, params: unknown): void {
    const problem = checkNotification(method, params);
    if (problem !== null) {
      this._violate(problem);
      return;
    }
    const p = (params ?? {}) as Record<string, unknown>;
    const ch = typeof p['channel'] === 'number' ? this.channels.get(p['channel']) : undefined;
    if (!ch) return;
    switch (method) {
      case 'session.gap':
        ch._gap(p['lost'] as number);
        break;
      case 'session.exit':
        ch._exitNotified({ code: p['code'] as number, signal: (p['signal'] as string | null | undefined) ?? null });
        break;
      case 'session.closed':
        ch._close(p['reason'] as string);
        break;
      case 'session.size':
        ch._size(p['cols'] as number, p['rows'] as number);
        break;
    }
  }

  private onBinary(data: ArrayBuffer | ArrayBufferView): void {
    const f = decodeFrame(data);
    if (!f) {
      this._violate('a binary message shorter than the 5-byte header');
      return;
    }
    if ((f.type !== FrameType.Output && f.type !== FrameType.Stderr) || f.channel === 0) {
      this._violate(`a frame of type ${f.type} on channel ${f.channel} (the gateway sends output and stderr frames only)`);
      return;
    }
    this.channels.get(f.channel)?._data(f.payload, f.type === FrameType.Stderr);
  }

  /**
   * @internal The gateway broke the protocol (docs/protocol.md, "What a client may treat as a
   * protocol violation"): the client ends for good, as `close()` would, without a reconnect (the
   * gateway would do it again). The `error` event, every pending request and every waiter get a
   * MuxError of kind `protocol`; each channel closes with the reason `protocol`.
   */
  _violate(problem: string): void {
    if (this._state === 'closed') return;
    const err = new MuxError(ErrorCode.Internal, `protocol violation: ${problem}`, { kind: 'protocol' });
    this.protocolError = err;
    const ws = this.ws;
    this.setState('closed');
    if (this.reconnectTimer !== null) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    this.dropSocket(err);
    if (ws) {
      try {
        ws.close(4002, 'protocol violation'); // browsers refuse 1002 from a script
      } catch {
        /* already closed */
      }
    }
    for (const ch of [...this.channels.values()]) ch._close('protocol');
    const waiters = this.readyWaiters;
    this.readyWaiters = [];
    for (const w of waiters) w.reject(err);
    this.emit('error', err);
  }

  /** @internal Checks an offset the gateway gave (a resume's `offset` against `from`). */
  _offsetAfter(from: number | null, offset: number, what: string): boolean {
    if (from !== null && offset < from) {
      this._violate(`${what}: offset ${offset} is before from ${from}`);
      return false;
    }
    return offset <= MAX_OFFSET;
  }

  // --- outgoing binary

  /** @internal Sends a binary frame on the current socket; false if there is none. */
  _sendFrame(frame: Uint8Array<ArrayBuffer>): boolean {
    const ws = this.ws;
    if (!ws || ws.readyState !== WS_OPEN) return false;
    try {
      ws.send(frame);
      return true;
    } catch {
      return false;
    }
  }

  /** @internal */
  _encode(s: string): Uint8Array {
    return this.encoder.encode(s);
  }

  /** @internal `initialize` answered and every re-attach settled on the current socket. */
  get _ready(): boolean {
    return this.ready;
  }

  /** @internal */
  get _maxQueuedInputBytes(): number {
    return this.opts.maxQueuedInputBytes;
  }

  /** @internal A channel has consumed bytes waiting to be acknowledged. */
  _scheduleAck(ch: Channel): void {
    if (ch._pendingAck >= this.flow.ackBytes) {
      ch._flushAck();
      return;
    }
    if (this.opts.ackIdleMs > 0) {
      if (this.ackTimer !== null) clearTimeout(this.ackTimer);
      this.ackTimer = setTimeout(() => {
        this.ackTimer = null;
        this.flushAcks();
      }, this.opts.ackIdleMs);
      return;
    }
    if (this.ackScheduled) return;
    this.ackScheduled = true;
    queueMicrotask(() => {
      this.ackScheduled = false;
      this.flushAcks();
    });
  }

  /** Sends every pending acknowledgement now. */
  flushAcks(): void {
    for (const ch of this.channels.values()) ch._flushAck();
  }
}
