// Package client is the Go client of muxterm.v1 (docs/protocol.md): Dial or DialOpen a
// gateway, then open, attach to, resize, signal, detach from and kill sessions, each bound to a
// Channel whose Read returns the session's output in order and acknowledges it for flow
// control. A session opened with OpenOptions.Pipes runs without a terminal: Channel.ReadStream
// tells its stderr from its stdout, and Channel.CloseStdin ends its input.
//
// It imports the standard library, gorilla/websocket and package proto, nothing else: it pulls
// in neither PTYs nor telemetry and builds on Linux, macOS and Windows. A Client's methods are
// safe for concurrent use; each Channel's Read is meant for one goroutine at a time.
package client
