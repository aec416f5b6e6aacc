package proto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// This file holds the JSON-RPC 2.0 side of muxterm.v1 (protocol.md §4, §5):
// message types, wire errors, the request parser and one strict decoder per
// method's params. Everything here is a pure function of its input; nothing
// keeps state, so every function is safe to call from any goroutine.
//
// Decoding rules shared by every Decode function:
//   - params must be a JSON object; absent or null params are an empty object.
//   - Member names match exactly (no case folding, unlike encoding/json), a
//     repeated member is refused, and unknown members are ignored.
//   - A member that is null counts as absent.
//   - Integers are checked on the JSON literal itself (integral value, range)
//     before any conversion, so "80", 1.5, 1e999 and 4294967296 never reach a
//     narrower type. An integral literal such as 80.0 or 8e1 is accepted.
//   - params._meta is best-effort: traceparent/tracestate are kept when they
//     are strings, and anything malformed there is ignored, never refused.
//   - The first problem found is returned as one *Error (invalid_params with
//     data.param, or unknown_session for a malformed session id); the params
//     returned alongside it are partial and must not be used.
//   - Decode functions return *Error, not error: never store a nil *Error in
//     an error variable.

// jsonrpcVersion is the only value of the "jsonrpc" member we speak.
const jsonrpcVersion = "2.0"

// Request is a JSON-RPC 2.0 request or, without ID, a notification. It is
// plain data owned by whoever holds it; ParseRequest's result does not alias
// the input buffer.
type Request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"` // a JSON number or string; nil for a notification
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"` // an object or array; nil when absent or null
}

// IsNotification reports whether r has no id, so it must get no response.
func (r *Request) IsNotification() bool { return len(r.ID) == 0 }

// Response is a JSON-RPC 2.0 response: exactly one of Result and Error is
// set. ID is the request's id, or null (nil) when it could not be determined.
// It is plain data; use MarshalResponse to build the bytes.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// Notification is a JSON-RPC 2.0 notification (no id), such as session.gap.
// It is plain data; use MarshalNotification to build the bytes.
type Notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

// Error codes (protocol.md §5).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603
	CodeUnknownSession = -32001
	CodeChannelInUse   = -32002
	CodeLimitExceeded  = -32003
	CodeSessionClosed  = -32004
	CodeUnknownChannel = -32005
	CodeBadFrame       = -32006
	CodeForbidden      = -32007
	CodeSpawnFailed    = -32008
	CodeStdinClosed    = -32009
)

// Error kinds, the data.kind a program switches on (protocol.md §5).
const (
	KindParseError     = "parse_error"
	KindInvalidRequest = "invalid_request"
	KindMethodNotFound = "method_not_found"
	KindInvalidParams  = "invalid_params"
	KindInternal       = "internal"
	KindUnknownSession = "unknown_session"
	KindChannelInUse   = "channel_in_use"
	KindLimitExceeded  = "limit_exceeded"
	KindSessionClosed  = "session_closed"
	KindUnknownChannel = "unknown_channel"
	KindBadFrame       = "bad_frame"
	KindForbidden      = "forbidden"
	KindSpawnFailed    = "spawn_failed"
	KindStdinClosed    = "stdin_closed"
)

// Error is a JSON-RPC error object. Data always holds "kind" when built by the
// constructors below; Message is for people. An *Error is not changed once
// it has been returned or sent (code that adds data to one it did not just
// build copies it, as mux's withChannel does), so it is safe to share between
// goroutines.
type Error struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

// Error implements error.
func (e *Error) Error() string {
	if k := e.Kind(); k != "" {
		return fmt.Sprintf("%s (%d): %s", k, e.Code, e.Message)
	}
	return fmt.Sprintf("jsonrpc error %d: %s", e.Code, e.Message)
}

// Kind returns data.kind, or "" if there is none.
func (e *Error) Kind() string {
	k, _ := e.Data["kind"].(string)
	return k
}

func newRPCError(code int, kind, msg string, kv ...any) *Error {
	data := map[string]any{"kind": kind}
	for i := 0; i+1 < len(kv); i += 2 {
		data[kv[i].(string)] = kv[i+1]
	}
	return &Error{Code: code, Message: msg, Data: data}
}

// ErrParse reports a text message that is not JSON.
func ErrParse(msg string) *Error { return newRPCError(CodeParseError, KindParseError, msg) }

// ErrInvalidRequest reports a message that is not a JSON-RPC 2.0 request, a
// batch, or a second initialize.
func ErrInvalidRequest(msg string) *Error {
	return newRPCError(CodeInvalidRequest, KindInvalidRequest, msg)
}

// ErrMethodNotFound reports an unknown method; data.method names it.
func ErrMethodNotFound(method string) *Error {
	return newRPCError(CodeMethodNotFound, KindMethodNotFound,
		fmt.Sprintf("method %q not found", method), "method", method)
}

// ErrInvalidParams reports a param that is missing, of the wrong type or out
// of range; data.param names it.
func ErrInvalidParams(param, msg string) *Error {
	return newRPCError(CodeInvalidParams, KindInvalidParams, msg, "param", param)
}

// ErrInternal reports a bug in the gateway; the socket goes on.
func ErrInternal(msg string) *Error { return newRPCError(CodeInternal, KindInternal, msg) }

// ErrUnknownSession reports a session that does not exist for this principal.
// A malformed id gets the same error, so nothing distinguishes the two.
func ErrUnknownSession(id string) *Error {
	return newRPCError(CodeUnknownSession, KindUnknownSession, "unknown session", "session", id)
}

// ErrChannelInUse reports a channel that is already bound.
func ErrChannelInUse(ch uint32) *Error {
	return newRPCError(CodeChannelInUse, KindChannelInUse,
		fmt.Sprintf("channel %d is already bound", ch), "channel", ch)
}

// ErrLimitExceeded reports a limit that was hit; data.limit names it
// (maxChannels, maxSessions, maxInputBytes, inputQueue, inputRate, openRate,
// maxMessageBytes, pendingRequests).
func ErrLimitExceeded(limit, msg string) *Error {
	return newRPCError(CodeLimitExceeded, KindLimitExceeded, msg, "limit", limit)
}

// ErrSessionClosed reports a session that is being torn down or is gone;
// data.reason says why (killed, exited, reaped, shutdown).
func ErrSessionClosed(id, reason string) *Error {
	return newRPCError(CodeSessionClosed, KindSessionClosed,
		"session closed: "+reason, "session", id, "reason", reason)
}

// ErrUnknownChannel reports a channel that is not bound.
func ErrUnknownChannel(ch uint32) *Error {
	return newRPCError(CodeUnknownChannel, KindUnknownChannel,
		fmt.Sprintf("channel %d is not bound", ch), "channel", ch)
}

// ErrBadFrame reports a malformed binary frame (short header, unknown type,
// bad ack, channel 0, ack overflow). It is always sent with id null.
func ErrBadFrame(msg string) *Error { return newRPCError(CodeBadFrame, KindBadFrame, msg) }

// ErrForbidden reports an operation this principal may not perform, such as
// a command not on the allow-list.
func ErrForbidden(msg string) *Error { return newRPCError(CodeForbidden, KindForbidden, msg) }

// ErrSpawnFailed reports a process that could not be started; data.reason
// says why.
func ErrSpawnFailed(reason string) *Error {
	return newRPCError(CodeSpawnFailed, KindSpawnFailed, "spawn failed: "+reason, "reason", reason)
}

// ErrStdinClosed reports input for a pipe session whose stdin the client closed
// (session.closeStdin); nothing of it was written.
func ErrStdinClosed(session string) *Error {
	return newRPCError(CodeStdinClosed, KindStdinClosed, "stdin of the session is closed; nothing was written", "session", session)
}

// ParseRequest parses one text message as a JSON-RPC 2.0 request. It refuses
// non-JSON (parse_error); and arrays (batches), other non-objects, a repeated
// member, jsonrpc other than "2.0", a missing, empty or non-string method, an
// id that is not a number or a string, and params that are neither object nor
// array (invalid_request). A message without id parses as a notification; the
// caller decides what to do with it. It never panics, whatever b holds.
//
// On error the *Request is nil, unless a valid id was read before the problem
// was found: then it holds only that ID, so the caller can answer with it.
// Otherwise the caller answers with id null. The result never aliases b.
func ParseRequest(b []byte) (*Request, *Error) {
	if !json.Valid(b) {
		return nil, ErrParse("message is not valid JSON")
	}
	b = bytes.TrimLeft(b, " \t\r\n")
	switch b[0] { // json.Valid: b holds at least one value
	case '{':
	case '[':
		return nil, ErrInvalidRequest("batches are not supported")
	default:
		return nil, ErrInvalidRequest("a request must be a JSON object")
	}
	m, dup, err := objectMembers(b)
	if err != nil {
		return nil, ErrParse("message is not valid JSON") // unreachable after json.Valid
	}
	if dup != "" {
		return nil, ErrInvalidRequest(fmt.Sprintf("member %q appears more than once", dup))
	}

	// The id comes first, so that later errors can be answered with it.
	var id json.RawMessage
	if raw, ok := m["id"]; ok {
		switch raw[0] {
		case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			id = raw
		default:
			return nil, ErrInvalidRequest("id must be a number or a string")
		}
	}
	fail := func(e *Error) (*Request, *Error) {
		if id == nil {
			return nil, e
		}
		return &Request{ID: id}, e
	}

	if v, ok := jsonString(m["jsonrpc"]); !ok || v != jsonrpcVersion {
		return fail(ErrInvalidRequest(`jsonrpc must be "2.0"`))
	}
	method, ok := jsonString(m["method"])
	if !ok || method == "" {
		return fail(ErrInvalidRequest("method must be a non-empty string"))
	}
	var params json.RawMessage
	if raw, ok := m["params"]; ok && !isJSONNull(raw) {
		if raw[0] != '{' && raw[0] != '[' {
			return fail(ErrInvalidRequest("params must be an object or an array"))
		}
		params = raw
	}
	return &Request{JSONRPC: jsonrpcVersion, ID: id, Method: method, Params: params}, nil
}

// MarshalResponse returns the text message answering the request with id:
// the error if err is non-nil, else result ({} when result is nil, as for
// session.signal). A nil or invalid id is sent as null. If result or err.Data
// cannot be marshaled (a bug), the answer is an internal error with the same
// id, so a request always gets exactly one well-formed response.
func MarshalResponse(id json.RawMessage, result any, err *Error) []byte {
	if len(id) == 0 || !json.Valid(id) {
		id = nil
	}
	resp := Response{JSONRPC: jsonrpcVersion, ID: id}
	switch {
	case err != nil:
		resp.Error = err
	case result == nil:
		resp.Result = struct{}{}
	default:
		resp.Result = result
	}
	b, mErr := json.Marshal(resp)
	if mErr != nil {
		resp.Result = nil
		resp.Error = ErrInternal("marshal response: " + mErr.Error())
		b, _ = json.Marshal(resp) // strings and a valid id only: cannot fail
	}
	return b
}

// MarshalNotification returns the text message of notification method with
// params (omitted when nil). params are built by the gateway itself, so a
// value that cannot be marshaled is a bug, and MarshalNotification panics.
func MarshalNotification(method string, params any) []byte {
	b, err := json.Marshal(Notification{JSONRPC: jsonrpcVersion, Method: method, Params: params})
	if err != nil {
		panic(fmt.Sprintf("proto: marshal notification %s: %v", method, err))
	}
	return b
}

// Meta is params._meta: W3C Trace Context carried by a request. It is
// otherwise ignored.
type Meta struct {
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// Limits are the server's limits as announced in the initialize result.
// DecodeOpen and DecodeResize read MaxCols and MaxRows; a limit <= 0 accepts
// no value at all.
type Limits struct {
	MaxMessageBytes     int `json:"maxMessageBytes"`
	MaxInputBytes       int `json:"maxInputBytes"`
	MaxChannels         int `json:"maxChannels"`
	MaxSessions         int `json:"maxSessions"`
	MaxCols             int `json:"maxCols"`
	MaxRows             int `json:"maxRows"`
	MaxOutputFrameBytes int `json:"maxOutputFrameBytes"`
	// Rate limits (protocol.md §4, initialize); absent (zero) means unlimited. InputRate and
	// InputBurst are input payload bytes per second per session and the bucket size;
	// OpenRate and OpenBurst are session.open calls per second per principal and the bucket
	// size.
	InputRate  int     `json:"inputRate,omitempty"`
	InputBurst int     `json:"inputBurst,omitempty"`
	OpenRate   float64 `json:"openRate,omitempty"`
	OpenBurst  int     `json:"openBurst,omitempty"`
	// PendingRequests bounds session.open and session.kill calls in flight per socket
	// (limit_exceeded "pendingRequests"); MaxUnreadResponses the responses and notifications a
	// client may leave unread before the socket closes with 1008; InputQueueBytes the input a
	// session queues for a program that is not reading (limit_exceeded "inputQueue");
	// MaxWireMessageBytes the message beyond which the socket closes with 1009; MaxSockets the
	// sockets one principal may hold (429 on the upgrade beyond). Each is absent (zero) when
	// the server does not say; muxterm's gateway says them all.
	PendingRequests     int `json:"pendingRequests,omitempty"`
	MaxUnreadResponses  int `json:"maxUnreadResponses,omitempty"`
	InputQueueBytes     int `json:"inputQueueBytes,omitempty"`
	MaxWireMessageBytes int `json:"maxWireMessageBytes,omitempty"`
	MaxSockets          int `json:"maxSockets,omitempty"`
}

// ClientInfo names the client in initialize params.
type ClientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// InitializeParams are the params of initialize. Every member is optional.
type InitializeParams struct {
	Client       ClientInfo     `json:"client"`
	Capabilities map[string]any `json:"capabilities,omitempty"`
	Meta         *Meta          `json:"_meta,omitempty"`
}

// OpenParams are the params of session.open. Channel, Cols and Rows are
// required; the rest are optional (zero means the default of protocol.md).
type OpenParams struct {
	Channel uint32            `json:"channel"`
	Cmd     []string          `json:"cmd,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cols    int               `json:"cols"`
	Rows    int               `json:"rows"`
	Name    string            `json:"name,omitempty"`
	// Record asks for a recording of the session, where the gateway records on request.
	Record bool `json:"record,omitempty"`
	// TTY false runs the program on pipes (stdin, stdout, stderr), without a terminal; nil or
	// true on a PTY. Cols and Rows are optional with TTY false.
	TTY  *bool `json:"tty,omitempty"`
	Meta *Meta `json:"_meta,omitempty"`
}

// Pipes reports whether the params ask for a session on pipes (tty false).
func (p OpenParams) Pipes() bool { return p.TTY != nil && !*p.TTY }

// AttachParams are the params of session.attach. From is nil when absent
// (replay from the oldest retained byte). Cols and Rows are the attaching
// viewer's terminal size, both 0 when it declares none.
type AttachParams struct {
	Channel uint32 `json:"channel"`
	Session string `json:"session"`
	From    *int64 `json:"from,omitempty"`
	Cols    int    `json:"cols,omitempty"`
	Rows    int    `json:"rows,omitempty"`
	// Screen is ScreenAuto, ScreenAlways, ScreenNever, or "" (absent: ScreenAuto for a client
	// that declared CapabilityScreen, else ScreenNever): whether the attach starts with a paint
	// of the session's screen (protocol.md §4 session.attach).
	Screen string `json:"screen,omitempty"`
	Meta   *Meta  `json:"_meta,omitempty"`
}

// The values of session.attach's screen.
const (
	ScreenAuto   = "auto"
	ScreenAlways = "always"
	ScreenNever  = "never"
)

// CaptureParams are the params of session.capture. Format is CaptureText or CaptureANSI;
// Scrollback the lines of history above the screen to include.
type CaptureParams struct {
	Session    string `json:"session"`
	Format     string `json:"format,omitempty"`
	Scrollback int    `json:"scrollback,omitempty"`
	Meta       *Meta  `json:"_meta,omitempty"`
}

// The values of session.capture's format.
const (
	CaptureText = "text"
	CaptureANSI = "ansi"
)

// MaxCaptureScrollback bounds session.capture's scrollback.
const MaxCaptureScrollback = 100000

// MaxCaptureBytes bounds session.capture's answer (its JSON message): a larger one is refused
// with limit_exceeded "captureBytes".
const MaxCaptureBytes = 8 << 20

// DetachParams are the params of session.detach.
type DetachParams struct {
	Channel uint32 `json:"channel"`
	// Hold detaches as a dropped socket does: the session holds its output for a resume
	// (--resume-hold). A relay that shares its socket with other channels detaches so when its
	// own client's socket dropped.
	Hold bool  `json:"hold,omitempty"`
	Meta *Meta `json:"_meta,omitempty"`
}

// CloseStdinParams are the params of session.closeStdin: the channel bound to a pipe session.
type CloseStdinParams = DetachParams

// ResizeParams are the params of session.resize.
type ResizeParams struct {
	Channel uint32 `json:"channel"`
	Cols    int    `json:"cols"`
	Rows    int    `json:"rows"`
	Meta    *Meta  `json:"_meta,omitempty"`
}

// SignalParams are the params of session.signal. Signal is the name as sent.
type SignalParams struct {
	Channel uint32 `json:"channel"`
	Signal  string `json:"signal"`
	Meta    *Meta  `json:"_meta,omitempty"`
}

// KillParams are the params of session.kill.
type KillParams struct {
	Session string `json:"session"`
	Meta    *Meta  `json:"_meta,omitempty"`
}

// LeaseParams are the params of session.lease. TTLMs 0 ends the lease.
type LeaseParams struct {
	Session string `json:"session"`
	TTLMs   int64  `json:"ttl_ms"`
	Meta    *Meta  `json:"_meta,omitempty"`
}

// ListParams are the params of session.list.
type ListParams struct {
	Meta *Meta `json:"_meta,omitempty"`
}

// Bounds of validated params (protocol.md §3, §4).
const (
	maxNameBytes  = 256
	maxLeaseTTLMs = 86_400_000 // 24 h
	sessionIDLen  = 32         // lowercase hex digits: 128 random bits
	// maxWinsizeDim bounds cols and rows whatever Limits says, because the PTY
	// takes them as uint16 (struct winsize).
	maxWinsizeDim = math.MaxUint16
)

// Signals are the signal names session.signal accepts, without the optional SIG prefix, in
// upper case (protocol.md §4). The server maps each to its own platform's signal.
var Signals = []string{"INT", "QUIT", "TERM", "HUP", "KILL", "TSTP", "CONT", "USR1", "USR2", "WINCH"}

// DecodeInitialize decodes and validates the params of initialize. All members
// are optional; client must be an object whose name and version are strings,
// and capabilities an object.
func DecodeInitialize(raw json.RawMessage) (InitializeParams, *Error) {
	var p InitializeParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if c, ok := m["client"]; ok && !isJSONNull(c) {
		cm, dup, err := objectMembers(c)
		if err != nil || dup != "" {
			return p, ErrInvalidParams("client", "client must be an object with string members name and version")
		}
		if p.Client.Name, e = optionalString(cm, "name", "client.name"); e != nil {
			return p, e
		}
		if p.Client.Version, e = optionalString(cm, "version", "client.version"); e != nil {
			return p, e
		}
	}
	if c, ok := m["capabilities"]; ok && !isJSONNull(c) {
		if c[0] != '{' || json.Unmarshal(c, &p.Capabilities) != nil {
			return p, ErrInvalidParams("capabilities", "capabilities must be an object")
		}
	}
	return p, nil
}

// DecodeOpen decodes and validates the params of session.open: channel in
// 1..4294967295; tty absent or a boolean; cols and rows in 1..lim.MaxCols and
// 1..lim.MaxRows (with tty false both may be absent, or 0); cmd, if
// given, a non-empty array of strings without NUL whose first element is not
// empty; cwd without NUL; env names matching [A-Za-z_][A-Za-z0-9_]*, not
// LD_*, BASH_ENV, ENV or IFS, with string values without NUL; name at most
// 256 bytes. Whether cmd may run and cwd exists is for the caller to check.
func DecodeOpen(raw json.RawMessage, lim Limits) (OpenParams, *Error) {
	var p OpenParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if p.Channel, e = requiredChannel(m); e != nil {
		return p, e
	}
	if t, ok := m["tty"]; ok && !isJSONNull(t) {
		var tty bool
		if json.Unmarshal(t, &tty) != nil {
			return p, ErrInvalidParams("tty", "tty must be a boolean")
		}
		p.TTY = &tty
	}
	if !p.Pipes() || !zeroOrAbsent(m, "cols") || !zeroOrAbsent(m, "rows") {
		if p.Cols, p.Rows, e = requiredSize(m, lim); e != nil {
			return p, e
		}
	}
	if p.Cmd, e = decodeCmd(m); e != nil {
		return p, e
	}
	if p.Cwd, e = optionalString(m, "cwd", "cwd"); e != nil {
		return p, e
	}
	if strings.IndexByte(p.Cwd, 0) >= 0 {
		return p, ErrInvalidParams("cwd", "cwd must not contain NUL")
	}
	if p.Env, e = decodeEnv(m); e != nil {
		return p, e
	}
	if p.Name, e = optionalString(m, "name", "name"); e != nil {
		return p, e
	}
	if len(p.Name) > maxNameBytes {
		return p, ErrInvalidParams("name", fmt.Sprintf("name must be at most %d bytes", maxNameBytes))
	}
	if p.Record, e = optionalBool(m, "record"); e != nil {
		return p, e
	}
	return p, nil
}

// zeroOrAbsent reports whether member name is absent, null or the number 0.
func zeroOrAbsent(m map[string]json.RawMessage, name string) bool {
	v, ok := m[name]
	return !ok || isJSONNull(v) || string(v) == "0"
}

// DecodeAttach decodes and validates the params of session.attach: channel
// in 1..4294967295, session a well-formed id (anything else is
// unknown_session, as for an id that does not exist), from absent or >= 0,
// cols and rows both absent or both within the limits as for session.open.
// Whether from lies beyond the session's end is for the caller to check.
func DecodeAttach(raw json.RawMessage, lim Limits) (AttachParams, *Error) {
	var p AttachParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if p.Channel, e = requiredChannel(m); e != nil {
		return p, e
	}
	if p.Session, e = requiredSessionID(m); e != nil {
		return p, e
	}
	from, present, e := intMember(m, "from", 0, math.MaxInt64)
	if e != nil {
		return p, e
	}
	if present {
		p.From = &from
	}
	if p.Screen, e = optionalString(m, "screen", "screen"); e != nil {
		return p, e
	}
	switch p.Screen {
	case "", ScreenAuto, ScreenAlways, ScreenNever:
	default:
		return p, ErrInvalidParams("screen", `screen must be "auto", "always" or "never"`)
	}
	_, hasCols := m["cols"]
	_, hasRows := m["rows"]
	if hasCols || hasRows {
		if p.Cols, p.Rows, e = requiredSize(m, lim); e != nil {
			return p, e
		}
	}
	return p, nil
}

// DecodeDetach decodes and validates the params of session.detach.
func DecodeDetach(raw json.RawMessage) (DetachParams, *Error) {
	var p DetachParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if raw, ok := m["hold"]; ok && !isJSONNull(raw) {
		switch string(raw) {
		case "true":
			p.Hold = true
		case "false":
		default:
			return p, ErrInvalidParams("hold", "hold must be a boolean")
		}
	}
	p.Channel, e = requiredChannel(m)
	return p, e
}

// DecodeResize decodes and validates the params of session.resize: channel
// in 1..4294967295, cols in 1..lim.MaxCols and rows in 1..lim.MaxRows, and
// never above 65535 whatever lim says. Anything else is invalid_params, and
// the returned sizes then mean nothing.
func DecodeResize(raw json.RawMessage, lim Limits) (ResizeParams, *Error) {
	var p ResizeParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if p.Channel, e = requiredChannel(m); e != nil {
		return p, e
	}
	p.Cols, p.Rows, e = requiredSize(m, lim)
	return p, e
}

// DecodeSignal decodes and validates the params of session.signal and
// returns the signal's name from Signals: the param is one of them, optionally
// prefixed with SIG, in upper case.
func DecodeSignal(raw json.RawMessage) (SignalParams, string, *Error) {
	var p SignalParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, "", e
	}
	p.Meta = decodeMeta(m)
	if p.Channel, e = requiredChannel(m); e != nil {
		return p, "", e
	}
	s, present, e := stringMember(m, "signal", "signal")
	if e != nil {
		return p, "", e
	}
	name := strings.TrimPrefix(s, "SIG")
	if !present || !slices.Contains(Signals, name) {
		return p, "", ErrInvalidParams("signal", "signal must be one of "+strings.Join(Signals, ", "))
	}
	p.Signal = s
	return p, name, nil
}

// DecodeKill decodes and validates the params of session.kill.
func DecodeKill(raw json.RawMessage) (KillParams, *Error) {
	var p KillParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	p.Session, e = requiredSessionID(m)
	return p, e
}

// DecodeLease decodes and validates the params of session.lease: session a
// well-formed id, ttl_ms required in 0..86400000 (0 ends the lease).
func DecodeLease(raw json.RawMessage) (LeaseParams, *Error) {
	var p LeaseParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if p.Session, e = requiredSessionID(m); e != nil {
		return p, e
	}
	p.TTLMs, e = requiredInt(m, "ttl_ms", 0, maxLeaseTTLMs)
	return p, e
}

// DecodeCapture decodes and validates the params of session.capture: session a well-formed
// id, format absent, "text" or "ansi", scrollback absent or in 0..MaxCaptureScrollback.
func DecodeCapture(raw json.RawMessage) (CaptureParams, *Error) {
	var p CaptureParams
	m, e := paramsObject(raw)
	if e != nil {
		return p, e
	}
	p.Meta = decodeMeta(m)
	if p.Session, e = requiredSessionID(m); e != nil {
		return p, e
	}
	if p.Format, e = optionalString(m, "format", "format"); e != nil {
		return p, e
	}
	switch p.Format {
	case "":
		p.Format = CaptureText
	case CaptureText, CaptureANSI:
	default:
		return p, ErrInvalidParams("format", `format must be "text" or "ansi"`)
	}
	n, _, e := intMember(m, "scrollback", 0, MaxCaptureScrollback)
	p.Scrollback = int(n)
	return p, e
}

// DecodeList decodes the params of session.list, which has none but _meta.
func DecodeList(raw json.RawMessage) (ListParams, *Error) {
	m, e := paramsObject(raw)
	if e != nil {
		return ListParams{}, e
	}
	return ListParams{Meta: decodeMeta(m)}, nil
}

// errNotObject is returned by objectMembers for a JSON value that is not an
// object.
var errNotObject = errors.New("not a JSON object")

// objectMembers splits the JSON object raw into its members, each value
// trimmed of surrounding space. Member names are compared exactly. If a name
// appears twice it returns that name as dup, and no members.
func objectMembers(raw []byte) (members map[string]json.RawMessage, dup string, err error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, "", err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, "", errNotObject
	}
	members = make(map[string]json.RawMessage)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, "", err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, "", errNotObject
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, "", err
		}
		if _, seen := members[name]; seen {
			return nil, name, nil
		}
		members[name] = bytes.TrimSpace(v)
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, "", errNotObject // trailing data
	}
	return members, "", nil
}

// paramsObject returns the members of params; absent or null params are an
// empty object.
func paramsObject(raw json.RawMessage) (map[string]json.RawMessage, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || isJSONNull(raw) {
		return map[string]json.RawMessage{}, nil
	}
	m, dup, err := objectMembers(raw)
	if err != nil {
		return nil, ErrInvalidParams("params", "params must be a JSON object")
	}
	if dup != "" {
		return nil, ErrInvalidParams(dup, fmt.Sprintf("%s appears more than once", dup))
	}
	return m, nil
}

// decodeMeta keeps params._meta.traceparent and tracestate when they are
// strings. It never fails: tracing must not break a request.
func decodeMeta(m map[string]json.RawMessage) *Meta {
	raw, ok := m["_meta"]
	if !ok {
		return nil
	}
	mm, dup, err := objectMembers(raw)
	if err != nil || dup != "" {
		return nil
	}
	var meta Meta
	meta.Traceparent, _ = jsonString(mm["traceparent"])
	meta.Tracestate, _ = jsonString(mm["tracestate"])
	if meta == (Meta{}) {
		return nil
	}
	return &meta
}

func isJSONNull(raw []byte) bool { return string(raw) == "null" }

// jsonString decodes raw if it is a JSON string.
func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// stringMember returns member name of m, which must be a string if present
// and not null; param names it in the error.
func stringMember(m map[string]json.RawMessage, name, param string) (s string, present bool, e *Error) {
	raw, ok := m[name]
	if !ok || isJSONNull(raw) {
		return "", false, nil
	}
	s, ok = jsonString(raw)
	if !ok {
		return "", true, ErrInvalidParams(param, param+" must be a string")
	}
	return s, true, nil
}

func optionalString(m map[string]json.RawMessage, name, param string) (string, *Error) {
	s, _, e := stringMember(m, name, param)
	return s, e
}

// intMember returns member name of m if it is present and not null. It must be
// a JSON number with an integral value in lo..hi; this is checked on the
// literal, before any conversion.
func intMember(m map[string]json.RawMessage, name string, lo, hi int64) (v int64, present bool, e *Error) {
	raw, ok := m[name]
	if !ok || isJSONNull(raw) {
		return 0, false, nil
	}
	v, ok = jsonInteger(raw)
	if !ok || v < lo || v > hi {
		return 0, true, ErrInvalidParams(name, fmt.Sprintf("%s must be an integer in %d..%d", name, lo, hi))
	}
	return v, true, nil
}

// requiredInt is intMember for a member that must be present.
func requiredInt(m map[string]json.RawMessage, name string, lo, hi int64) (int64, *Error) {
	v, present, e := intMember(m, name, lo, hi)
	if e == nil && !present {
		e = ErrInvalidParams(name, fmt.Sprintf("%s is required: an integer in %d..%d", name, lo, hi))
	}
	return v, e
}

func requiredChannel(m map[string]json.RawMessage) (uint32, *Error) {
	v, e := requiredInt(m, "channel", 1, math.MaxUint32)
	if e != nil {
		return 0, e
	}
	return uint32(v), nil // 1..MaxUint32: checked above
}

// requiredSize returns cols and rows, each in 1..its limit and never above
// maxWinsizeDim, so the caller may convert them to uint16.
func requiredSize(m map[string]json.RawMessage, lim Limits) (cols, rows int, e *Error) {
	c, e := requiredInt(m, "cols", 1, int64(min(lim.MaxCols, maxWinsizeDim)))
	if e != nil {
		return 0, 0, e
	}
	r, e := requiredInt(m, "rows", 1, int64(min(lim.MaxRows, maxWinsizeDim)))
	if e != nil {
		return 0, 0, e
	}
	return int(c), int(r), nil
}

// requiredSessionID returns member "session", which must be a string. A string
// that is not a well-formed id is unknown_session, like an id that does not
// exist.
func requiredSessionID(m map[string]json.RawMessage) (string, *Error) {
	s, present, e := stringMember(m, "session", "session")
	if e != nil {
		return "", e
	}
	if !present {
		return "", ErrInvalidParams("session", "session is required: a session id")
	}
	if !wellFormedSessionID(s) {
		return "", ErrUnknownSession(s)
	}
	return s, nil
}

// wellFormedSessionID reports whether s is 32 lowercase hex digits.
func wellFormedSessionID(s string) bool {
	if len(s) != sessionIDLen {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// decodeCmd returns member "cmd": absent, or a non-empty array of strings
// without NUL whose first element, the program, is not empty.
func decodeCmd(m map[string]json.RawMessage) ([]string, *Error) {
	raw, ok := m["cmd"]
	if !ok || isJSONNull(raw) {
		return nil, nil
	}
	// Elements are decoded one by one: unmarshaling into []string would
	// silently turn a null element into "".
	var elems []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &elems) != nil {
		return nil, ErrInvalidParams("cmd", "cmd must be an array of strings")
	}
	cmd := make([]string, len(elems))
	for i, el := range elems {
		a, ok := jsonString(el)
		if !ok {
			return nil, ErrInvalidParams("cmd", "cmd must be an array of strings")
		}
		if strings.IndexByte(a, 0) >= 0 {
			return nil, ErrInvalidParams("cmd", "cmd must not contain NUL")
		}
		cmd[i] = a
	}
	if len(cmd) == 0 || cmd[0] == "" {
		return nil, ErrInvalidParams("cmd", "cmd must name a program: cmd[0] must not be empty")
	}
	return cmd, nil
}

// decodeEnv returns member "env": absent, or an object of string values
// without NUL whose names pass envNameAllowed.
func decodeEnv(m map[string]json.RawMessage) (map[string]string, *Error) {
	raw, ok := m["env"]
	if !ok || isJSONNull(raw) {
		return nil, nil
	}
	members, dup, err := objectMembers(raw)
	if err != nil {
		return nil, ErrInvalidParams("env", "env must be an object of strings")
	}
	if dup != "" {
		return nil, ErrInvalidParams("env", fmt.Sprintf("env variable %q appears more than once", dup))
	}
	env := make(map[string]string, len(members))
	for name, v := range members {
		if msg := envNameProblem(name); msg != "" {
			return nil, ErrInvalidParams("env", msg)
		}
		s, ok := jsonString(v)
		if !ok {
			return nil, ErrInvalidParams("env", fmt.Sprintf("env variable %s must be a string", name))
		}
		if strings.IndexByte(s, 0) >= 0 {
			return nil, ErrInvalidParams("env", fmt.Sprintf("env variable %s must not contain NUL", name))
		}
		env[name] = s
	}
	return env, nil
}

// envNameProblem returns why name may not be set in a child's environment, or
// "" if it may: it must match [A-Za-z_][A-Za-z0-9_]* and must not be one the
// dynamic loader or the shell runs code from (LD_*, BASH_ENV, ENV, IFS).
func envNameProblem(name string) string {
	if name == "" {
		return "env variable names must not be empty"
	}
	for i := range len(name) {
		c := name[i]
		letter := c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return fmt.Sprintf("env variable name %q must match [A-Za-z_][A-Za-z0-9_]*", name)
		}
	}
	if strings.HasPrefix(name, "LD_") || name == "BASH_ENV" || name == "ENV" || name == "IFS" {
		return fmt.Sprintf("env variable %s is refused", name)
	}
	return ""
}

// jsonInteger returns the value of the JSON number literal lit if that value
// is an integer that fits in an int64: 80, -7, 80.0, 8e1 and 800e-1 are, 1.5,
// 1e-1, 1e19 and "80" are not. It works on the digits alone, so neither a
// huge exponent nor a long literal costs more than one pass over lit.
func jsonInteger(lit []byte) (int64, bool) {
	s := lit
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	n := leadingDigits(s)
	if n == 0 {
		return 0, false // not a number: a string, true, null, an object...
	}
	intPart := s[:n]
	s = s[n:]
	var frac []byte
	if len(s) > 0 && s[0] == '.' {
		s = s[1:]
		n = leadingDigits(s)
		if n == 0 {
			return 0, false
		}
		frac = s[:n]
		s = s[n:]
	}
	// exp saturates at expLimit, far beyond any literal's digit count, so
	// the arithmetic below cannot overflow and a saturated exponent still
	// decides correctly (the value is 0, or too large, or not integral).
	const expLimit = 1 << 40
	var exp int64
	if len(s) > 0 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		expNeg := false
		if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
			expNeg = s[0] == '-'
			s = s[1:]
		}
		n = leadingDigits(s)
		if n == 0 {
			return 0, false
		}
		for _, c := range s[:n] {
			if exp < expLimit {
				exp = exp*10 + int64(c-'0')
			}
		}
		if expNeg {
			exp = -exp
		}
		s = s[n:]
	}
	if len(s) != 0 {
		return 0, false
	}

	// value = digits × 10^exp10, digits = intPart followed by frac.
	digits := make([]byte, 0, len(intPart)+len(frac))
	digits = append(append(digits, intPart...), frac...)
	exp10 := exp - int64(len(frac))
	digits = bytes.TrimLeft(digits, "0")
	if len(digits) == 0 {
		return 0, true
	}
	for digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		exp10++
	}
	if exp10 < 0 {
		return 0, false // a fraction is left
	}
	if int64(len(digits))+exp10 > 19 { // >= 10^19 > MaxInt64
		return 0, false
	}
	var u uint64 // < 10^19 < MaxUint64 throughout
	for _, c := range digits {
		u = u*10 + uint64(c-'0')
	}
	for range exp10 {
		u *= 10
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return int64(-u), true // -(1<<63) wraps to MinInt64, as intended
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

func leadingDigits(s []byte) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}
