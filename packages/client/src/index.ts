// @muxterm/client: the muxterm protocol client (docs/protocol.md, subprotocol `muxterm.v1`).
//
// It knows nothing of the DOM or of xterm.js: it needs a WebSocket implementation (the
// browser's, or any object shaped like WebSocketLike, passed as `webSocketFactory`), timers,
// queueMicrotask, TextEncoder, TextDecoder and atob (recordings). An IDE plugin can use it as is.
//
// This file is the package's public surface and nothing else: every name the package exports is
// listed here, from the module that defines it. Names the modules export to each other only
// (WS_OPEN, disconnected, …) are not part of it.
//
//   frame.ts     wire constants and the binary frame codec (§2)
//   messages.ts  JSON-RPC envelopes, method params and results, notifications (§4)
//   errors.ts    MuxError, error kinds and codes (§5)
//   socket.ts    WebSocketLike and the default factory
//   backoff.ts   reconnect delays
//   client.ts    MuxClient: socket lifecycle, requests, reconnect and re-attach, acks
//   channel.ts   Channel: one bound session, resume offset, credit, input, events
//   replay.ts    terminal replies and ReplayGuard (§3)
//   cast.ts      recordings: the asciicast v2 parser (§4 recording.read)

export { SUBPROTOCOL, FrameType, HEADER_BYTES, MAX_CHANNEL, encodeFrame, encodeAck, decodeFrame, inputChunkBytes } from './frame.js';
export type { Frame } from './frame.js';

export type {
  JsonRpcId,
  RequestMeta,
  JsonRpcRequest,
  JsonRpcNotification,
  JsonRpcSuccess,
  JsonRpcFailure,
  JsonRpcResponse,
  ClientInfo,
  InitializeParams,
  Limits,
  FlowParams,
  InitializeResult,
  ExitStatus,
  SessionOpenParams,
  SessionOpenResult,
  SessionAttachParams,
  SessionAttachResult,
  SessionDetachParams,
  SessionDetachResult,
  SessionResizeParams,
  SessionResizeResult,
  SignalName,
  SessionSignalParams,
  SessionKillParams,
  SessionKillResult,
  SessionInfo,
  SessionListParams,
  SessionListResult,
  SessionLeaseParams,
  SessionLeaseResult,
  ScreenMode,
  ScreenModes,
  SessionCaptureParams,
  SessionCaptureResult,
  RecordingListParams,
  RecordingInfo,
  RecordingListResult,
  RecordingReadParams,
  RecordingReadResult,
  ShareCreateParams,
  ShareListParams,
  ShareRevokeParams,
  ShareInfo,
  ShareListResult,
  ShareRevokeResult,
  RequestMap,
  Method,
  GapParams,
  ExitParams,
  ClosedReason,
  SizeParams,
  ClosedParams,
  RestartParams,
  NotificationMap,
} from './messages.js';

export { ErrorCode, MuxError, isMuxError } from './errors.js';
export type { JsonRpcErrorObject, ServerErrorKind, ClientErrorKind, ErrorKind, ErrorData } from './errors.js';

export type { EventHandler, WebSocketLike, WebSocketFactory } from './socket.js';

export { DEFAULT_BACKOFF, backoffDelay, reconnectDelay } from './backoff.js';
export type { BackoffOptions } from './backoff.js';

export { MuxClient } from './client.js';
export type { ConnectionState, MuxClientOptions, MuxClientEvents } from './client.js';

export { Channel } from './channel.js';
export type { ChannelState, ChannelListener } from './channel.js';

export { isTerminalReply, ReplayGuard } from './replay.js';
export type { TerminalWrite } from './replay.js';

export { CastError, MAX_CAST_LINE, MAX_RECORDING_READ, parseCast } from './cast.js';
export type { Cast, CastEvent, CastHeader } from './cast.js';
