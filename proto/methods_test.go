package proto

import (
	"encoding/json"
	"testing"
)

// TestNotificationParamsBytes: each notification's params type marshals to the bytes of the
// JSON object with the same members (members in the order of their names), so the server's
// notifications are the same bytes whichever it builds them from.
func TestNotificationParamsBytes(t *testing.T) {
	sig := "KILL"
	tests := []struct {
		method string
		typed  any
		object map[string]any
	}{
		{MethodSessionSize, SessionSizeParams{Channel: 3, Session: "s", Cols: 80, Rows: 24},
			map[string]any{"channel": 3, "session": "s", "cols": 80, "rows": 24}},
		{MethodSessionGap, SessionGapParams{Channel: 3, Lost: 1 << 40},
			map[string]any{"channel": 3, "lost": 1 << 40}},
		{MethodSessionExit, SessionExitParams{Channel: 3, Session: "s", Code: 137, Signal: &sig},
			map[string]any{"channel": 3, "session": "s", "code": 137, "signal": "KILL"}},
		{MethodSessionExit, SessionExitParams{Channel: 3, Session: "s"},
			map[string]any{"channel": 3, "session": "s", "code": 0, "signal": nil}},
		{MethodSessionClosed, SessionClosedParams{Channel: 3, Session: "s", Reason: "killed"},
			map[string]any{"channel": 3, "session": "s", "reason": "killed"}},
		{MethodRestart, RestartParams{ResumeHoldMs: 30000}, map[string]any{"resumeHoldMs": 30000}},
		{MethodRelayInput, RelayInputParams{Channel: 3, Bytes: 5}, map[string]any{"channel": 3, "bytes": 5}},
	}
	for _, tt := range tests {
		got, want := MarshalNotification(tt.method, tt.typed), MarshalNotification(tt.method, tt.object)
		if string(got) != string(want) {
			t.Errorf("%s: %s, want %s", tt.method, got, want)
		}
	}
}

// TestMarshalRequest: a request is written as id, jsonrpc, method, params; nil params as null.
func TestMarshalRequest(t *testing.T) {
	tests := []struct {
		params any
		want   string
	}{
		{KillParams{Session: "s"}, `{"id":7,"jsonrpc":"2.0","method":"session.kill","params":{"session":"s"}}`},
		{nil, `{"id":7,"jsonrpc":"2.0","method":"session.kill","params":null}`},
	}
	for _, tt := range tests {
		b, err := MarshalRequest(7, MethodSessionKill, tt.params)
		if err != nil || string(b) != tt.want {
			t.Errorf("MarshalRequest(%v) = %s, %v; want %s", tt.params, b, err, tt.want)
		}
	}
	if _, err := MarshalRequest(1, "x", make(chan int)); err == nil {
		t.Errorf("MarshalRequest of unmarshalable params: no error, want one")
	}
}

// TestMessage: a client's incoming message tells a notification, a response and an error
// without an id apart.
func TestMessage(t *testing.T) {
	tests := []struct {
		in               string
		notification, id bool
		method, result   string
		errKind          string
	}{
		{`{"jsonrpc":"2.0","method":"session.gap","params":{"channel":1,"lost":2}}`, true, false, "session.gap", "", ""},
		{`{"jsonrpc":"2.0","id":4,"result":{"ok":true}}`, false, true, "", `{"ok":true}`, ""},
		{`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x","data":{"kind":"parse_error"}}}`, false, false, "", "", KindParseError},
		{`{"jsonrpc":"2.0","error":{"code":-32700,"message":"x","data":{"kind":"parse_error"}}}`, false, false, "", "", KindParseError},
	}
	for _, tt := range tests {
		var m Message
		if err := json.Unmarshal([]byte(tt.in), &m); err != nil {
			t.Fatalf("Unmarshal(%s): %v", tt.in, err)
		}
		kind := ""
		if m.Error != nil {
			kind = m.Error.Kind()
		}
		if m.IsNotification() != tt.notification || m.HasID() != tt.id || m.Method != tt.method || string(m.Result) != tt.result || kind != tt.errKind {
			t.Errorf("%s: notification %v, id %v, method %q, result %s, error kind %q; want %v, %v, %q, %s, %q",
				tt.in, m.IsNotification(), m.HasID(), m.Method, m.Result, kind, tt.notification, tt.id, tt.method, tt.result, tt.errKind)
		}
	}
}
