// Package proto is the muxterm.v1 wire protocol described in docs/protocol.md, shared by the
// server side (package mux), the Go client (package client), the cluster's relays and
// muxbench: the binary frame codec (frame.go); every method and notification name, each
// notification's params, the message a client reads (Message) and the request it writes
// (MarshalRequest) (methods.go); the JSON-RPC 2.0 envelope (envelope.go); its errors and kinds
// (errors.go); the params of each request (params.go); the request parser and each request's
// strict params decoder (decode.go), with the readers of JSON members and integer literals they
// share (strictjson.go); the results every method returns (results.go); recordings
// (recording.go) and share links (share.go).
//
// A change to the wire is made here and in packages/client/src/messages.ts (the npm client's
// types); the compiler then finds every Go user. Only internal/testutil/rawmux, a test client
// that takes nothing but the frame codec and the error type from here, spells the JSON-RPC
// messages out again, on purpose: it checks the server against a second reading of the docs.
//
// Everything here is a pure function of its input or plain data, with no I/O and no state, so
// every function is safe to call from any goroutine and can be fuzzed on its own. The package
// imports the standard library only and builds on every GOOS: a program that only speaks the
// protocol pulls in neither PTYs nor telemetry.
package proto

// Subprotocol is the WebSocket subprotocol of this protocol version.
const Subprotocol = "muxterm.v1"

// Headers of a relay's upgrade, node to node in a cluster (docs/protocol.md §1): the principal
// the relay acts for, and "1" when that principal is read-only. A gateway believes them only
// from a client that presented the cluster token; from anyone else they are ignored.
const (
	HeaderOnBehalfOf = "Muxterm-On-Behalf-Of"
	HeaderReadOnly   = "Muxterm-Read-Only"
	// HeaderRelayLease (milliseconds) asks the owner to take the relay's input only under a
	// lease (docs/protocol.md §1, "At most once"): the owner pings with LeasePing and the
	// time it sent the ping, takes input only within the lease of the latest ping whose pong
	// it read, and tells the relay each input frame it took with MethodRelayInput.
	HeaderRelayLease = "Muxterm-Relay-Lease"
)

// LeasePing prefixes the payload of the owner's lease pings on a relay's socket; the rest is
// the owner's send time (nanoseconds on its own clock), which the pong echoes.
const LeasePing = "muxterm-lease "
