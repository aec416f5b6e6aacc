// Package client is the Go client of muxterm.v1 (docs/protocol.md): Dial or DialOpen a
// gateway, then open, attach to, resize, signal, detach from and kill sessions, each bound to a
// Channel whose Read returns the session's output in order and acknowledges it for flow
// control.
//
// It imports the standard library, gorilla/websocket and package proto, nothing else: it pulls
// in neither PTYs nor telemetry and builds on Linux, macOS and Windows. A request made with a
// context from proto.ContextWithMeta carries that W3C trace context as params._meta, so the
// gateway's spans continue the caller's trace. A Client's methods are
// safe for concurrent use; each Channel's Read is meant for one goroutine at a time.
package client
