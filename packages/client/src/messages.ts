// JSON-RPC 2.0 messages (docs/protocol.md §4): envelopes, each method's params and result
// (RequestMap), and the server's notifications (NotificationMap). Types only.

import type { JsonRpcErrorObject } from './errors.js';

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
  /** With `tty` false, a nominal size (0 and 0: 80×24): no terminal applies it. */
  cols: number;
  rows: number;
  name?: string;
  /** Ask for a recording (protocol 1.4: a gateway run with --record --record-on-request). */
  record?: boolean;
  /**
   * Protocol 1.4: false runs the program without a terminal: its stdin, stdout and stderr are
   * pipes, its stderr arrives apart (ChannelListener.stderr), and `Channel.closeStdin` ends its
   * input. Absent or true: a PTY.
   */
  tty?: boolean;
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

/**
 * Whether an attach starts with a paint of the session's screen (protocol 1.3, §3 "Screens"):
 * `auto` (the default for a client that declares the `screen` capability, as this one does)
 * paints when the ring cannot replay what was asked; `always` paints; `never` replays raw bytes.
 */
export type ScreenMode = 'auto' | 'always' | 'never';

export interface SessionAttachParams {
  channel: number;
  session: string;
  from?: number;
  /** This viewer's size for the window-size policy (both or neither; ignored for read-only). */
  cols?: number;
  rows?: number;
  screen?: ScreenMode;
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
  /**
   * Protocol 1.3: the length of the paint of the screen the channel's output starts with (0 or
   * absent: none). Its bytes have no offsets; the output from `offset` follows them.
   */
  screen?: number;
  /** Output bytes the session's screen never read (absent when 0: the paint is exact). */
  screenLost?: number;
  /**
   * The size the paint is drawn for (with a paint): a fresh terminal of it. When it differs
   * from `cols`×`rows` (a size applied after the paint), resize to `cols`×`rows` after it.
   */
  screenCols?: number;
  screenRows?: number;
  /** Protocol 1.4: false for a session on pipes (absent for a PTY session). */
  tty?: boolean;
}

export interface SessionCaptureParams {
  session: string;
  format?: 'text' | 'ansi';
  scrollback?: number;
  _meta?: RequestMeta;
}
/** The modes a program set on its screen (session.capture). */
export interface ScreenModes {
  altScreen: boolean;
  appCursor: boolean;
  appKeypad: boolean;
  bracketedPaste: boolean;
  /** 0, or the mouse tracking mode: 9, 1000, 1002, 1003. */
  mouse: number;
  /** 0, or the mouse encoding: 1005, 1006, 1015. */
  mouseEncoding: number;
  focusReporting: boolean;
  cursorVisible: boolean;
}
export interface SessionCaptureResult {
  session: string;
  offset: number;
  cols: number;
  rows: number;
  format: 'text' | 'ansi';
  lost: number;
  /** The screen's text (rows ended by \n) or a paint of it (ANSI), per `format`. */
  screen: string;
  modes: ScreenModes;
}

export interface SessionDetachParams {
  channel: number;
  /** Leave a resume hold, as a dropped socket does (a relaying node's own detach). */
  hold?: boolean;
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

export interface RecordingListParams {
  /** Only this session's recording. */
  session?: string;
  _meta?: RequestMeta;
}
/** One recording (protocol 1.4, recording.list). Its id is its session's. */
export interface RecordingInfo {
  recording: string;
  session: string;
  name?: string;
  command?: string;
  /** Unix milliseconds. */
  started: number;
  cols: number;
  rows: number;
  /** The file's size now. */
  bytes: number;
  /** Still being written: its session runs. */
  active: boolean;
}
export interface RecordingListResult {
  recordings: RecordingInfo[];
}
export interface RecordingReadParams {
  recording: string;
  offset: number;
  /** 1 … 65536 bytes (MAX_RECORDING_READ). */
  length: number;
  _meta?: RequestMeta;
}
export interface RecordingReadResult {
  recording: string;
  offset: number;
  /** The file's bytes from `offset`, base64 (MuxClient.readRecording decodes them). */
  data: string;
  size: number;
  eof: boolean;
}

export interface ShareCreateParams {
  session: string;
  /** 1000 … 604800000 (7 days). */
  ttl_ms: number;
  /** The link may type and resize too. */
  write?: boolean;
  _meta?: RequestMeta;
}
export interface ShareListParams {
  session: string;
  _meta?: RequestMeta;
}
export interface ShareRevokeParams {
  share: string;
  _meta?: RequestMeta;
}
/** A share link (protocol 1.4, share.*): `token` only in share.create's result. */
export interface ShareInfo {
  share: string;
  session: string;
  write: boolean;
  /** RFC 3339, UTC. */
  expires: string;
  /** Sockets open with the link now. */
  viewers: number;
  token?: string;
}
export interface ShareListResult {
  shares: ShareInfo[];
}
export interface ShareRevokeResult {
  share: string;
  /** Sockets the revocation closed (with 4003). */
  closed: number;
}

/** method → [params, result] */
export interface RequestMap {
  initialize: [InitializeParams, InitializeResult];
  'session.open': [SessionOpenParams, SessionOpenResult];
  'session.attach': [SessionAttachParams, SessionAttachResult];
  'session.detach': [SessionDetachParams, SessionDetachResult];
  'session.closeStdin': [SessionDetachParams, SessionDetachResult];
  'session.resize': [SessionResizeParams, SessionResizeResult];
  'session.signal': [SessionSignalParams, Record<string, never>];
  'session.kill': [SessionKillParams, SessionKillResult];
  'session.list': [SessionListParams, SessionListResult];
  'session.lease': [SessionLeaseParams, SessionLeaseResult];
  'session.capture': [SessionCaptureParams, SessionCaptureResult];
  'recording.list': [RecordingListParams, RecordingListResult];
  'recording.read': [RecordingReadParams, RecordingReadResult];
  'share.create': [ShareCreateParams, ShareInfo];
  'share.list': [ShareListParams, ShareListResult];
  'share.revoke': [ShareRevokeParams, ShareRevokeResult];
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
export type ClosedReason = 'killed' | 'exited' | 'reaped' | 'shutdown' | 'node_lost';
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

/**
 * `gateway.restart`: the gateway is being upgraded in place and closes the socket with 1012
 * next; each read-write channel's resume hold lasts `resumeHoldMs` (docs/protocol.md §4,
 * "Reconnecting after a restart"). The client reconnects on the close itself.
 */
export interface RestartParams {
  resumeHoldMs: number;
}

/**
 * method → params of every notification the gateway sends a client. `relay.input` is not
 * among them: the owner node sends it only on a relay's socket that asked for a lease with
 * the cluster token (docs/protocol.md §1), never to a browser or an npm client.
 */
export interface NotificationMap {
  'session.gap': GapParams;
  'session.exit': ExitParams;
  'session.closed': ClosedParams;
  'session.size': SizeParams;
  'gateway.restart': RestartParams;
}
