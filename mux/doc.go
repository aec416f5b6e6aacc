// Package mux is the server side of the muxterm.v1 wire protocol described in
// docs/protocol.md: the per-connection multiplexer that binds channels to
// sessions and schedules output fairly, the per-channel credit used for flow
// control (credit.go), the rate limits (limits.go) and the converters from
// session types to the protocol's results (convert.go). The multiplexer is in
// five files: Serve, its options and the socket's close (conn.go); a channel
// and its binding to a viewer or a relay (channel.go); the one goroutine that
// reads the socket and dispatches (read.go); the handler of each method
// (handlers.go); the one goroutine that writes it (write.go). Sessions of
// other nodes are reached through Remote (remote.go); an upgrade in place
// ends a socket with restart.go's notification. The
// wire format itself (frames, JSON-RPC envelope, errors, params and results)
// lives in package proto, which the Go client (package client) shares.
//
// The credit type and the rate limiter are small value types with no I/O, so
// they are tested on their own. The multiplexer sees the WebSocket only
// through a small interface (read message, write message, write control,
// close); its tests run over a real gorilla/websocket connection on
// 127.0.0.1, except the timer tests (pings, the pong wait, the time to
// initialize), which run Serve over an in-memory Socket inside a
// testing/synctest bubble, on a fake clock (fakesocket_test.go).
//
// Dependencies point one way: cmd/gateway → gateway → mux → session, and mux
// → proto. Package mux never imports Echo, nor package gateway, nor package
// client outside its tests. Protocol outcomes (session errors, bad frames,
// refused params) are turned into wire errors (*proto.Error, with data.kind)
// here and nowhere below.
package mux
