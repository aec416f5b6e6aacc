package client

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/muxterm/muxterm/proto"
)

// ErrProtocol is the cause of a connection the client ended because the server broke the
// protocol (docs/protocol.md, "What a client may treat as a protocol violation"): a message it
// cannot parse or whose fields have the wrong type or range, an offset that goes backwards, a
// gap that is not positive, more unacknowledged output on a channel than flow.window. Match it
// with errors.Is on Client.Err, on a call's error and on a Channel's Read error. A connection
// ended by it is not redialled, even with Reconnect: the server would do it again.
var ErrProtocol = errors.New("protocol violation")

// MaxOffset bounds every offset and every gap the client accepts: 2^53, the largest integer a
// JavaScript client holds exactly (9 PB of output; no session reaches it).
const MaxOffset = 1 << 53

// MaxWindow bounds the flow.window the client accepts from initialize: the gateway's
// --window takes at most 64 MiB. A channel buffers at most its window of one binding.
const MaxWindow = 64 << 20

// defaultWindow is the window of a server whose initialize gave none (docs/protocol.md §3).
const defaultWindow = 256 << 10

// violation is an error that wraps ErrProtocol.
func violation(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

// windowOf is the window of an initialize result, or a violation.
func windowOf(res proto.InitializeResult) (int, error) {
	f := res.Flow
	switch {
	case f.Window < 0 || f.Window > MaxWindow:
		return 0, violation("initialize: flow.window %d out of range 0 … %d", f.Window, MaxWindow)
	case f.AckBytes < 0 || f.AckBytes > MaxWindow:
		return 0, violation("initialize: flow.ackBytes %d out of range 0 … %d", f.AckBytes, MaxWindow)
	case f.ResumeHoldMs < 0:
		return 0, violation("initialize: flow.resumeHoldMs %d is negative", f.ResumeHoldMs)
	case res.Limits.MaxInputBytes < 0:
		return 0, violation("initialize: limits.maxInputBytes %d is negative", res.Limits.MaxInputBytes)
	case f.Window == 0:
		return defaultWindow, nil
	}
	return f.Window, nil
}

// checkResult decodes a result of method into its type and checks its ranges: a result the
// caller could not use is the server's fault, and ends the connection. Methods the client does
// not know (Call's) are not checked.
func checkResult(method string, raw json.RawMessage) error {
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	decode := func(v any) error {
		if err := json.Unmarshal(raw, v); err != nil {
			return violation("%s: result: %v", method, err)
		}
		return nil
	}
	switch method {
	case proto.MethodInitialize:
		var r proto.InitializeResult
		if err := decode(&r); err != nil {
			return err
		}
		_, err := windowOf(r)
		return err
	case proto.MethodSessionOpen:
		var r proto.OpenResult
		if err := decode(&r); err != nil {
			return err
		}
		if r.Session == "" {
			return violation("session.open: result without a session")
		}
		return checkOffsets(method, "offset", r.Offset, "live", r.Live)
	case proto.MethodSessionAttach:
		var r proto.AttachResult
		if err := decode(&r); err != nil {
			return err
		}
		return checkAttach(r)
	case proto.MethodSessionKill:
		var r proto.KillResult
		if err := decode(&r); err != nil {
			return err
		}
		return checkOffsets(method, "offset", r.Offset)
	case proto.MethodSessionList:
		var r proto.ListResult
		if err := decode(&r); err != nil {
			return err
		}
		for i, s := range r.Sessions {
			if err := checkOffsets(method, fmt.Sprintf("sessions[%d].end", i), s.End); err != nil {
				return err
			}
		}
	case proto.MethodSessionDetach:
		return decode(&proto.DetachResult{})
	case proto.MethodSessionResize:
		return decode(&proto.ResizeResult{})
	case proto.MethodSessionLease:
		return decode(&proto.LeaseResult{})
	case proto.MethodSessionSignal:
		return decode(&struct{}{})
	}
	return nil
}

// checkAttach checks an attach result's offsets against each other: offset ≤ end, live ≤ end.
func checkAttach(r proto.AttachResult) error {
	if r.Session == "" {
		return violation("session.attach: result without a session")
	}
	if err := checkOffsets(proto.MethodSessionAttach, "offset", r.Offset, "live", r.Live, "end", r.End, "lost", r.Lost); err != nil {
		return err
	}
	if r.Offset > r.End || r.Live > r.End {
		return violation("session.attach: offset %d and live %d must not pass end %d", r.Offset, r.Live, r.End)
	}
	if r.Screen < 0 || r.ScreenLost < 0 || r.ScreenLost > MaxOffset {
		return violation("session.attach: screen %d and screenLost %d must not be negative", r.Screen, r.ScreenLost)
	}
	return nil
}

// checkOffsets checks name, value pairs: each in 0 … MaxOffset.
func checkOffsets(method string, pairs ...any) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if v := pairs[i+1].(int64); v < 0 || v > MaxOffset {
			return violation("%s: %s %d out of range 0 … 2^53", method, pairs[i], v)
		}
	}
	return nil
}
