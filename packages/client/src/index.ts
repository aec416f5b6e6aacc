// muxterm protocol client (docs/protocol.md, subprotocol `muxterm.v1`).
//
// This module knows nothing of the DOM or of xterm.js: it needs a WebSocket implementation
// (the browser's, or any object shaped like WebSocketLike, passed as `webSocketFactory`),
// timers, queueMicrotask and TextEncoder. An IDE plugin can use it as is.

// ---------------------------------------------------------------------------------------------
// Wire constants and binary frame codec (§2)

export const SUBPROTOCOL = 'muxterm.v1';

export const FrameType = {
  Output: 1,
  Input: 2,
  Ack: 3,
} as const;
export type FrameType = (typeof FrameType)[keyof typeof FrameType];

export const HEADER_BYTES = 5;
export const MAX_CHANNEL = 0xffffffff;

export interface Frame {
  type: number;
  channel: number;
  /** A view into the received buffer (not a copy). */
  payload: Uint8Array<ArrayBuffer>;
}

/** Encodes `[type u8][channel u32 BE][payload]`. */
export function encodeFrame(type: number, channel: number, payload?: Uint8Array): Uint8Array<ArrayBuffer> {
  checkChannel(channel);
  const len = payload ? payload.length : 0;
  const out = new Uint8Array(HEADER_BYTES + len);
  out[0] = type & 0xff;
  new DataView(out.buffer).setUint32(1, channel, false);
  if (payload) out.set(payload, HEADER_BYTES);
  return out;
}

/** An ack frame: type 3, payload exactly 4 bytes, u32 BE count of consumed output bytes. */
export function encodeAck(channel: number, count: number): Uint8Array<ArrayBuffer> {
  if (!Number.isInteger(count) || count < 0 || count > 0xffffffff) {
    throw new RangeError(`ack count out of range: ${count}`);
  }
  const out = encodeFrame(FrameType.Ack, channel, new Uint8Array(4));
  new DataView(out.buffer).setUint32(HEADER_BYTES, count, false);
  return out;
}

/** Decodes a binary message; returns null for a message shorter than the 5-byte header. */
export function decodeFrame(data: ArrayBuffer | ArrayBufferView): Frame | null {
  const bytes =
    data instanceof ArrayBuffer
      ? new Uint8Array(data)
      : new Uint8Array(data.buffer as ArrayBuffer, data.byteOffset, data.byteLength);
  if (bytes.length < HEADER_BYTES) return null;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return {
    type: bytes[0]!,
    channel: view.getUint32(1, false),
    payload: bytes.subarray(HEADER_BYTES),
  };
}

/**
 * Payload bytes per input frame. §2 limits the input payload to `maxInputBytes` per frame but
 * also refuses "an input frame larger than maxInputBytes"; keeping the whole frame (5-byte
 * header + payload) within the limit satisfies both readings.
 */
export function inputChunkBytes(maxInputBytes: number): number {
  return Math.max(1, Math.floor(maxInputBytes) - HEADER_BYTES);
}

function checkChannel(channel: number): void {
  if (!Number.isInteger(channel) || channel < 1 || channel > MAX_CHANNEL) {
    throw new RangeError(`channel out of range: ${channel}`);
  }
}

// ---------------------------------------------------------------------------------------------
// JSON-RPC 2.0 messages (§4)

export type JsonRpcId = number | string;

export interface RequestMeta {
  /** W3C Trace Context, continued by the gateway's spans. */
  traceparent?: string;
}

export interface JsonRpcRequest<P = unknown> {
  jsonrpc: '2.0';
  id: JsonRpcId;
  method: string;
  params?: P;
}

export interface JsonRpcNotification<P = unknown> {
  jsonrpc: '2.0';
  method: string;
  params?: P;
}

export interface JsonRpcErrorObject {
  code: number;
  message: string;
  data?: ErrorData;
}

export interface JsonRpcSuccess<R = unknown> {
  jsonrpc: '2.0';
  id: JsonRpcId;
  result: R;
}

export interface JsonRpcFailure {
  jsonrpc: '2.0';
  /** null for errors about binary frames and unparseable text messages (§5). */
  id: JsonRpcId | null;
  error: JsonRpcErrorObject;
}

export type JsonRpcResponse<R = unknown> = JsonRpcSuccess<R> | JsonRpcFailure;

/** `data.kind` values of §5. */
export type ServerErrorKind =
  | 'parse_error'
  | 'invalid_request'
  | 'method_not_found'
  | 'invalid_params'
  | 'internal'
  | 'unknown_session'
  | 'channel_in_use'
  | 'limit_exceeded'
  | 'session_closed'
  | 'unknown_channel'
  | 'bad_frame'
  | 'forbidden'
  | 'spawn_failed';

/** Kinds this client produces itself (never sent by a gateway). */
export type ClientErrorKind =
  | 'disconnected' // the socket dropped before the response arrived
  | 'client_closed' // MuxClient.close() was called
  | 'protocol'; // the gateway sent something this client cannot use

export type ErrorKind = ServerErrorKind | ClientErrorKind;

export interface ErrorData {
  kind: ErrorKind | (string & {});
  /** invalid_params: the offending param. */
  param?: string;
  /** limit_exceeded: which limit. */
  limit?: string;
  /** spawn_failed: why. */
  reason?: string;
  [key: string]: unknown;
}

export const ErrorCode = {
  ParseError: -32700,
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  Internal: -32603,
  UnknownSession: -32001,
  ChannelInUse: -32002,
  LimitExceeded: -32003,
  SessionClosed: -32004,
  UnknownChannel: -32005,
  BadFrame: -32006,
  Forbidden: -32007,
  SpawnFailed: -32008,
} as const;

/** A failed request. Switch on `kind` (= `data.kind`); `message` is for people. */
export class MuxError extends Error {
  readonly code: number;
  readonly kind: ErrorKind | (string & {});
  readonly data: ErrorData;
  /** The method of the failed request, when known. */
  readonly method: string | undefined;

  constructor(code: number, message: string, data?: Partial<ErrorData>, method?: string) {
    super(message);
    this.name = 'MuxError';
    this.code = code;
    const kind = typeof data?.kind === 'string' ? data.kind : kindForCode(code);
    this.data = { ...data, kind };
    this.kind = kind;
    this.method = method;
  }

  static fromObject(err: JsonRpcErrorObject, method?: string): MuxError {
    return new MuxError(err.code, err.message, err.data, method);
  }
}

function kindForCode(code: number): string {
  for (const [name, c] of Object.entries(ErrorCode)) {
    if (c === code) return name.replace(/[A-Z]/g, (m, i: number) => (i ? '_' : '') + m.toLowerCase());
  }
  return 'internal';
}

export function isMuxError(e: unknown, kind?: string): e is MuxError {
  return e instanceof MuxError && (kind === undefined || e.kind === kind);
}

// --- method params and results

export interface ClientInfo {
  name: string;
  version: string;
}

export interface InitializeParams {
  client: ClientInfo;
  capabilities: Record<string, unknown>;
  _meta?: RequestMeta;
}

export interface Limits {
  maxMessageBytes: number;
  maxInputBytes: number;
  maxChannels: number;
  maxSessions: number;
  maxCols: number;
  maxRows: number;
  maxOutputFrameBytes: number;
  // Absent when the server does not say (docs/protocol.md §4, initialize).
  inputRate?: number;
  inputBurst?: number;
  openRate?: number;
  openBurst?: number;
  pendingRequests?: number;
  maxUnreadResponses?: number;
  inputQueueBytes?: number;
  maxWireMessageBytes?: number;
  maxSockets?: number;
}

export interface FlowParams {
  window: number;
  ackBytes: number;
  /** How long a dropped socket's sessions keep their output for a byte-exact reattach (0: off). */
  resumeHoldMs?: number;
}

export interface InitializeResult {
  server: { name: string; version: string };
  protocol: string;
  limits: Limits;
  flow: FlowParams;
}

export interface ExitStatus {
  /** The exit code, or -1 when the process died of a signal. */
  code: number;
  /** The signal name (e.g. "HUP") or null. */
  signal: string | null;
}

export interface SessionOpenParams {
  channel: number;
  cmd?: string[];
  cwd?: string;
  env?: Record<string, string>;
  cols: number;
  rows: number;
  name?: string;
  _meta?: RequestMeta;
}

export interface SessionOpenResult {
  session: string;
  channel: number;
  pid: number;
  offset: number;
  /** Always 0: a new session has no replay (protocol 1.1; absent from 1.0 gateways). */
  live?: number;
}

export interface SessionAttachParams {
  channel: number;
  session: string;
  from?: number;
  /** This viewer's size for the window-size policy (both or neither; ignored for read-only). */
  cols?: number;
  rows?: number;
  _meta?: RequestMeta;
}

export interface SessionAttachResult {
  session: string;
  channel: number;
  offset: number;
  /**
   * Where the replay ends and live output begins (protocol 1.1): output below it was printed
   * before this attach and must never make the terminal's automatic replies reach the PTY.
   * Absent from a 1.0 gateway (then taken as `end`).
   */
  live?: number;
  lost: number;
  end: number;
  pid: number;
  cols: number;
  rows: number;
  exit: ExitStatus | null;
}

export interface SessionDetachParams {
  channel: number;
  _meta?: RequestMeta;
}
export interface SessionDetachResult {
  session: string;
  channel: number;
}

export interface SessionResizeParams {
  channel: number;
  cols: number;
  rows: number;
  _meta?: RequestMeta;
}
export interface SessionResizeResult {
  cols: number;
  rows: number;
}

export type SignalName =
  | 'INT'
  | 'QUIT'
  | 'TERM'
  | 'HUP'
  | 'KILL'
  | 'TSTP'
  | 'CONT'
  | 'USR1'
  | 'USR2'
  | 'WINCH';

export interface SessionSignalParams {
  channel: number;
  signal: SignalName | `SIG${SignalName}`;
  _meta?: RequestMeta;
}

export interface SessionKillParams {
  session: string;
  _meta?: RequestMeta;
}
export interface SessionKillResult {
  session: string;
  status: 'killed' | 'exited';
  exit: ExitStatus;
  duration_ms: number;
  signals: string[];
  /** Process groups of the session's terminal session signalled (protocol 1.1). */
  groups?: number;
  escapees: number;
  survivors: number;
  /** Checks for survivors that could not be made: survivors is then a lower bound (1.1). */
  unverified?: number;
  offset: number;
}

export interface SessionInfo {
  session: string;
  name: string;
  pid: number;
  cmd: string[];
  /** RFC 3339. */
  created: string;
  cols: number;
  rows: number;
  /** Attached channels on all sockets. */
  viewers: number;
  end: number;
  exit: ExitStatus | null;
}

export interface SessionListParams {
  _meta?: RequestMeta;
}
export interface SessionListResult {
  sessions: SessionInfo[];
}

export interface SessionLeaseParams {
  session: string;
  ttl_ms: number;
  _meta?: RequestMeta;
}
export interface SessionLeaseResult {
  session: string;
  /** RFC 3339. */
  until: string;
}

/** method → [params, result] */
export interface RequestMap {
  initialize: [InitializeParams, InitializeResult];
  'session.open': [SessionOpenParams, SessionOpenResult];
  'session.attach': [SessionAttachParams, SessionAttachResult];
  'session.detach': [SessionDetachParams, SessionDetachResult];
  'session.resize': [SessionResizeParams, SessionResizeResult];
  'session.signal': [SessionSignalParams, Record<string, never>];
  'session.kill': [SessionKillParams, SessionKillResult];
  'session.list': [SessionListParams, SessionListResult];
  'session.lease': [SessionLeaseParams, SessionLeaseResult];
}
export type Method = keyof RequestMap;

export interface GapParams {
  channel: number;
  lost: number;
}
export interface ExitParams {
  channel: number;
  session: string;
  code: number;
  signal: string | null;
}
export type ClosedReason = 'killed' | 'exited' | 'reaped' | 'shutdown';
export interface SizeParams {
  channel: number;
  session: string;
  cols: number;
  rows: number;
}
export interface ClosedParams {
  channel: number;
  session: string;
  reason: ClosedReason | (string & {});
}

/** method → params of server notifications */
export interface NotificationMap {
  'session.gap': GapParams;
  'session.exit': ExitParams;
  'session.closed': ClosedParams;
  'session.size': SizeParams;
}

// ---------------------------------------------------------------------------------------------
// WebSocket abstraction

/**
 * An event handler slot. Its parameter is checked bivariantly (method syntax), so a socket whose
 * handlers take a richer event type (the browser's `Event`, the `ws` package's `WebSocket.Event`)
 * is a WebSocketLike as it is.
 */
export type EventHandler<E> = { bivarianceHack(ev: E): void }['bivarianceHack'];

/**
 * The subset of the WHATWG WebSocket this client uses. The browser's `WebSocket` and the `ws`
 * package's `WebSocket` (Node) both satisfy it.
 */
export interface WebSocketLike {
  binaryType: string;
  readonly readyState: number;
  readonly protocol?: string;
  readonly bufferedAmount?: number;
  send(data: string | Uint8Array<ArrayBuffer>): void;
  close(code?: number, reason?: string): void;
  onopen: EventHandler<unknown> | null;
  onmessage: EventHandler<{ data: unknown }> | null;
  onclose: EventHandler<{ code?: number; reason?: string; wasClean?: boolean }> | null;
  onerror: EventHandler<unknown> | null;
}

export type WebSocketFactory = (url: string, protocols: string | string[]) => WebSocketLike;

const WS_OPEN = 1;

function defaultWebSocketFactory(url: string, protocols: string | string[]): WebSocketLike {
  const WS = (globalThis as unknown as { WebSocket?: new (u: string, p: string | string[]) => unknown }).WebSocket;
  if (!WS) throw new Error('no global WebSocket; pass options.webSocketFactory');
  return new WS(url, protocols) as WebSocketLike;
}

// ---------------------------------------------------------------------------------------------
// Reconnect backoff

export interface BackoffOptions {
  /** First retry delay. */
  initialDelayMs: number;
  /** Cap on the delay. */
  maxDelayMs: number;
  /** Growth per failed attempt. */
  multiplier: number;
  /** 0 … 1: the delay is drawn uniformly from [d·(1−jitter), d]. */
  jitter: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = {
  initialDelayMs: 250,
  maxDelayMs: 10_000,
  multiplier: 2,
  jitter: 0.5,
};

/** Delay before retry number `attempt` (0-based): exponential, capped, with jitter. */
export function backoffDelay(attempt: number, opts: BackoffOptions = DEFAULT_BACKOFF, rand: () => number = Math.random): number {
  const exp = opts.initialDelayMs * Math.pow(opts.multiplier, Math.max(0, attempt));
  const capped = Math.min(opts.maxDelayMs, exp);
  const j = Math.min(1, Math.max(0, opts.jitter));
  return Math.round(capped * (1 - j * rand()));
}

/**
 * Delay before reconnect attempt `attempt`: the backoff, but while the gateway may still hold our
 * sessions' output (`sinceDropMs` < `holdMs`, its `flow.resumeHoldMs`) capped at a quarter of
 * the hold, so a client comes back in time to resume byte-exact. Jitter applies after the cap.
 */
export function reconnectDelay(
  attempt: number,
  opts: BackoffOptions,
  rand: () => number,
  holdMs: number,
  sinceDropMs: number,
): number {
  if (holdMs > 0 && sinceDropMs < holdMs) {
    opts = { ...opts, maxDelayMs: Math.min(opts.maxDelayMs, holdMs / 4) };
  }
  return backoffDelay(attempt, opts, rand);
}

// ---------------------------------------------------------------------------------------------
// Client

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

  constructor(url: string, options: MuxClientOptions = {}) {
    this.url = url;
    this.factory = options.webSocketFactory ?? defaultWebSocketFactory;
    this.backoff = { ...DEFAULT_BACKOFF, ...options.backoff };
    this.opts = {
      client: options.client ?? { name: 'muxterm-client', version: '0.1.0' },
      capabilities: options.capabilities ?? {},
      reconnect: options.reconnect ?? true,
      initializeTimeoutMs: options.initializeTimeoutMs ?? 10_000,
      ackIdleMs: options.ackIdleMs ?? 0,
      maxQueuedInputBytes: options.maxQueuedInputBytes ?? 65536,
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
  async attach(session: string, from?: number, size?: { cols: number; rows: number }): Promise<Channel> {
    await this.whenReady();
    const ch = new Channel(this, this.allocChannel(), session);
    this.channels.set(ch.id, ch);
    try {
      const params: SessionAttachParams = { channel: ch.id, session };
      if (from !== undefined) params.from = from;
      if (size) {
        params.cols = size.cols;
        params.rows = size.rows;
        ch._ownSize = { cols: size.cols, rows: size.rows };
      }
      const r = await this._sendRequestNow('session.attach', params);
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
      ws = this.factory(this.url, SUBPROTOCOL);
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
    ws.onerror = () => {
      /* a close event follows */
    };
    ws.onclose = () => {
      if (gen !== this.socketGen) return;
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
      this.onText(data);
    } else if (data instanceof ArrayBuffer || ArrayBuffer.isView(data)) {
      this.onBinary(data as ArrayBuffer | ArrayBufferView);
    }
  }

  private onText(text: string): void {
    let msg: Record<string, unknown>;
    try {
      msg = JSON.parse(text) as Record<string, unknown>;
    } catch {
      this.emit('error', new MuxError(ErrorCode.ParseError, 'gateway sent invalid JSON', { kind: 'protocol' }));
      return;
    }
    if (!msg || typeof msg !== 'object') return;
    if (typeof msg['method'] === 'string') {
      if (msg['id'] === undefined) this.onNotification(msg['method'], msg['params']);
      return; // the gateway sends no requests in v1
    }
    const id = msg['id'] as JsonRpcId | null | undefined;
    const error = msg['error'] as JsonRpcErrorObject | undefined;
    if (id === null || id === undefined) {
      if (error) this.emit('error', MuxError.fromObject(error));
      return;
    }
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    if (error) p.reject(MuxError.fromObject(error, p.method));
    else p.resolve(msg['result']);
  }

  private onNotification(method: string, params: unknown): void {
    const p = (params ?? {}) as Record<string, unknown>;
    const ch = typeof p['channel'] === 'number' ? this.channels.get(p['channel']) : undefined;
    if (!ch) return;
    switch (method) {
      case 'session.gap':
        ch._gap(Number(p['lost']) || 0);
        break;
      case 'session.exit':
        ch._exitNotified({ code: Number(p['code']), signal: (p['signal'] as string | null) ?? null });
        break;
      case 'session.closed':
        ch._close(String(p['reason'] ?? 'closed'));
        break;
      case 'session.size': {
        const cols = Number(p['cols']);
        const rows = Number(p['rows']);
        if (cols > 0 && rows > 0) ch._size(cols, rows);
        break;
      }
    }
  }

  private onBinary(data: ArrayBuffer | ArrayBufferView): void {
    const f = decodeFrame(data);
    if (!f || f.type !== FrameType.Output) return;
    this.channels.get(f.channel)?._data(f.payload);
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

// ---------------------------------------------------------------------------------------------
// Channels

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
  /** `lost` bytes of the stream are gone (a session.gap, or an attach whose `from` was too old). */
  gap?(lost: number, channel: Channel): void;
  /** The process exited (delivered once, after the output that preceded the exit). */
  exit?(status: ExitStatus, channel: Channel): void;
  /** The binding ended for good: a §4 reason, or `unknown_session` / `session_closed` when a
   * re-attach found the session gone, or `client_closed`. */
  closed?(reason: string, channel: Channel): void;
  /** Bound again after a reconnect (result of the re-attach). */
  reattached?(result: SessionAttachResult, channel: Channel): void;
  /**
   * The session's applied size changed (`session.size`, or a re-attach's result that differs
   * from the size last known): draw the session at this size (§3, terminal size).
   */
  size?(cols: number, rows: number, channel: Channel): void;
}

type ChannelEvent =
  | { t: 'data'; bytes: Uint8Array<ArrayBuffer>; replay: boolean }
  | { t: 'gap'; lost: number }
  | { t: 'exit'; status: ExitStatus }
  | { t: 'closed'; reason: string }
  | { t: 'reattached'; result: SessionAttachResult }
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
  private gapBytes = 0;
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

  private early: Array<{ t: 'data'; bytes: Uint8Array<ArrayBuffer> } | { t: 'gap'; lost: number }> = [];
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
          l.data?.(ev.bytes, this, ev.replay);
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
    this.bindGen++;
    this._state = 'bound';
    if (reattach && attach) this.emit({ t: 'reattached', result: attach });
    // Bytes the ring no longer held when `from` was older than the ring: `offset - from`
    // (= result.lost). They are already part of `offset`, so they are reported, not counted.
    const lost = attach && from !== null ? Math.max(0, offset - from) : 0;
    if (lost > 0) this.emit({ t: 'gap', lost });
    if (attach?.exit && !this.exitDelivered) {
      this._exit = attach.exit;
      this.deferredExit = { at: attach.end, status: attach.exit };
    }
    const early = this.early;
    this.early = [];
    for (const ev of early) {
      if (ev.t === 'data') this._data(ev.bytes);
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
  _data(bytes: Uint8Array<ArrayBuffer>): void {
    if (this._state === 'binding') {
      this.early.push({ t: 'data', bytes });
      return;
    }
    if (this._state !== 'bound' && this._state !== 'detaching') return;
    if (bytes.length === 0) return;
    const at = this.offset;
    this.received += bytes.length;
    const tail = this.inflight[this.inflight.length - 1];
    if (tail && tail.gen === this.bindGen) tail.bytes += bytes.length;
    else this.inflight.push({ gen: this.bindGen, bytes: bytes.length });
    const replayBytes = Math.max(0, Math.min(bytes.length, this._live - at));
    if (replayBytes === bytes.length) this.emit({ t: 'data', bytes, replay: true });
    else if (replayBytes === 0) this.emit({ t: 'data', bytes, replay: false });
    else {
      // The frame straddles `live`.
      this.emit({ t: 'data', bytes: bytes.subarray(0, replayBytes), replay: true });
      this.emit({ t: 'data', bytes: bytes.subarray(replayBytes), replay: false });
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
    this._bound(r.session, r.offset, from, r, true);
  }
}

// ---------------------------------------------------------------------------------------------

function disconnected(method?: string): MuxError {
  return new MuxError(ErrorCode.Internal, method ? `${method}: connection lost` : 'connection lost', { kind: 'disconnected' }, method);
}

function clientClosed(): MuxError {
  return new MuxError(ErrorCode.Internal, 'client closed', { kind: 'client_closed' });
}

function reportListenerError(e: unknown): void {
  // A throwing listener must not break the protocol state machine.
  setTimeout(() => {
    throw e;
  }, 0);
}

// ---------------------------------------------------------------------------------------------
// Replay never produces input (§3): terminal replies and the guard

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
