// Package mux implements the muxterm.v1 wire protocol described in
// docs/protocol.md: the binary frame codec (frame.go), the JSON-RPC 2.0
// control messages with their strict parameter validation (rpc.go), the
// per-channel credit used for flow control (credit.go), the per-connection
// multiplexer that binds channels to sessions and schedules output fairly, and
// a Go client that speaks the same protocol.
//
// The codec, the control parser and the credit type are pure functions and
// small value types with no I/O, so they can be fuzzed and tested on their own.
// The multiplexer sees the WebSocket only through a small interface (read
// message, write message, write control, close), so the same tests run over
// net.Pipe and over a real gorilla/websocket connection.
//
// Dependencies point one way: cmd/gateway → gateway → mux → session. Package
// mux may import muxterm/session; it never imports Echo, nor package gateway.
// Protocol outcomes (session errors, bad frames, refused params) are turned
// into wire errors (*Error, with data.kind) here and nowhere below.
package mux
