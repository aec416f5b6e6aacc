package proto

import "encoding/json"

// The methods a client calls (protocol.md §4). The recording and share-link methods are in
// recording.go and share.go.
const (
	MethodInitialize        = "initialize"
	MethodSessionOpen       = "session.open"
	MethodSessionAttach     = "session.attach"
	MethodSessionDetach     = "session.detach"
	MethodSessionCloseStdin = "session.closeStdin"
	MethodSessionResize     = "session.resize"
	MethodSessionSignal     = "session.signal"
	MethodSessionKill       = "session.kill"
	MethodSessionList       = "session.list"
	MethodSessionLease      = "session.lease"
	MethodSessionCapture    = "session.capture"
)

// The notifications the server sends a client (protocol.md §4, "Notifications"), each with its
// params type below.
const (
	MethodSessionSize   = "session.size"
	MethodSessionGap    = "session.gap"
	MethodSessionExit   = "session.exit"
	MethodSessionClosed = "session.closed"
)

// MethodRestart is the notification a socket gets before it is closed with CloseServiceRestart
// for an upgrade in place: params RestartParams. Its sessions keep running; the client
// reconnects and re-attaches each channel from its offset within params.resumeHoldMs.
const MethodRestart = "gateway.restart"

// CloseServiceRestart is the close code of an upgrade in place (RFC 6455 §7.4.1 registry: 1012
// service restart).
const CloseServiceRestart = 1012

// MethodRelayInput is the owner's notification, on a leased relay socket, of an input frame it
// took off the socket (applied or refused): params RelayInputParams. Only a relay that asked
// for a lease (HeaderRelayLease) gets it; a browser or the Go client of a user never does.
const MethodRelayInput = "relay.input"

// The params of the notifications. The members of each are declared in the order of their
// JSON names, the order in which the server has always written them.

// SessionSizeParams are session.size's params: the session's terminal size changed to
// Cols×Rows.
type SessionSizeParams struct {
	Channel uint32 `json:"channel"`
	Cols    int    `json:"cols"`
	Rows    int    `json:"rows"`
	Session string `json:"session"`
}

// SessionGapParams are session.gap's params: Lost bytes of the channel's output the ring
// dropped before the next frame.
type SessionGapParams struct {
	Channel uint32 `json:"channel"`
	Lost    int64  `json:"lost"`
}

// SessionExitParams are session.exit's params: the process exited with Code, or by Signal
// (null when it was not killed by a signal).
type SessionExitParams struct {
	Channel uint32  `json:"channel"`
	Code    int     `json:"code"`
	Session string  `json:"session"`
	Signal  *string `json:"signal"`
}

// SessionClosedParams are session.closed's params: the channel is unbound, for Reason.
type SessionClosedParams struct {
	Channel uint32 `json:"channel"`
	Reason  string `json:"reason"`
	Session string `json:"session"`
}

// RestartParams are gateway.restart's params: how long each read-write channel's resume hold
// lasts.
type RestartParams struct {
	ResumeHoldMs int64 `json:"resumeHoldMs"`
}

// RelayInputParams are relay.input's params: the owner took an input frame of Bytes bytes of
// payload on Channel.
type RelayInputParams struct {
	Bytes   int64  `json:"bytes"`
	Channel uint32 `json:"channel"`
}

// Message is one text message a client reads: a response (ID, with Result or Error), an
// error response whose id could not be determined (ID null, Error set), or a notification
// (Method and Params, no ID). Decode it with json.Unmarshal; Params and Result stay raw for
// the method's own type.
type Message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *Error          `json:"error"`
}

// IsNotification reports whether m is a notification (it names a method).
func (m *Message) IsNotification() bool { return m.Method != "" }

// HasID reports whether m is a response to a request of the reader's: its id is present and
// not null.
func (m *Message) HasID() bool { return len(m.ID) != 0 && string(m.ID) != "null" }

// MarshalRequest returns the text message of a request with id, method and params (sent as
// null when nil). An error is params' own marshaling error.
func MarshalRequest(id int64, method string, params any) ([]byte, error) {
	return json.Marshal(outgoingRequest{ID: id, JSONRPC: jsonrpcVersion, Method: method, Params: params})
}

// outgoingRequest is a request as a client writes it.
type outgoingRequest struct {
	ID      int64  `json:"id"`
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}
