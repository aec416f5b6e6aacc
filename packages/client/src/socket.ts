// The WebSocket this client needs (WebSocketLike: the browser's and the `ws` package's both fit)
// and the default factory, the global WebSocket.

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

/**
 * Makes the client's WebSocket. `options.maxPayload` is the largest message the client accepts
 * (MuxClientOptions.maxMessageBytes): a factory whose WebSocket can refuse larger ones before
 * buffering them should (the `ws` package: `new WebSocket(url, protocols, { maxPayload })`); the
 * client checks every message's size either way.
 */
export type WebSocketFactory = (url: string, protocols: string | string[], options: { maxPayload: number }) => WebSocketLike;

export const WS_OPEN = 1;

export function defaultWebSocketFactory(url: string, protocols: string | string[]): WebSocketLike {
  const WS = (globalThis as unknown as { WebSocket?: new (u: string, p: string | string[]) => unknown }).WebSocket;
  if (!WS) throw new Error('no global WebSocket; pass options.webSocketFactory');
  return new WS(url, protocols) as WebSocketLike;
}
