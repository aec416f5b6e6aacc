// Errors (docs/protocol.md §5): the JSON-RPC error object, its `data.kind` values and codes,
// MuxError (what every failed request rejects with), the kinds this client makes itself, and how
// a throwing listener is reported.

export interface JsonRpcErrorObject {
  code: number;
  message: string;
  data?: ErrorData;
}

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
  | 'spawn_failed'
  | 'stdin_closed';

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
  StdinClosed: -32009,
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

export function disconnected(method?: string): MuxError {
  return new MuxError(ErrorCode.Internal, method ? `${method}: connection lost` : 'connection lost', { kind: 'disconnected' }, method);
}

export function clientClosed(): MuxError {
  return new MuxError(ErrorCode.Internal, 'client closed', { kind: 'client_closed' });
}

export function reportListenerError(e: unknown): void {
  // A throwing listener must not break the protocol state machine.
  setTimeout(() => {
    throw e;
  }, 0);
}
