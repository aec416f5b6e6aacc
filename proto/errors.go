package proto

import (
	"fmt"
	"math"
)

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

// Channel returns data.channel, the channel an error names (channel_in_use, unknown_channel,
// and every error about a frame of a bound channel, protocol.md §2), and whether it names one.
// It reads the member as decoded from the wire (a JSON number) or as set by the server (a
// uint32); anything else, or a number that is no channel number, names none.
func (e *Error) Channel() (uint32, bool) {
	switch c := e.Data["channel"].(type) {
	case uint32:
		return c, true
	case float64:
		if c >= 0 && c <= math.MaxUint32 && c == math.Trunc(c) {
			return uint32(c), true
		}
	}
	return 0, false
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
