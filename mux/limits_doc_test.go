package mux

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// rawResponse is a response as a client reads it.
type rawResponse struct {
	ID     json.RawMessage
	Result json.RawMessage
	Error  *proto.Error
}

// rawCall sends one request on a raw socket and returns the response with its id.
func rawCall(t *testing.T, ws *websocket.Conn, id, msg string) rawResponse {
	t.Helper()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	for {
		typ, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		var r rawResponse
		if typ == websocket.TextMessage && json.Unmarshal(b, &r) == nil && string(r.ID) == id {
			return r
		}
	}
}

// TestInitializeReportsEveryLimit: every limit a client can hit is in initialize's limits
// (protocol.md §4), with the values the gateway enforces.
func TestInitializeReportsEveryLimit(t *testing.T) {
	s := newServer(t, ServerOptions{MaxSockets: 5}, nil)
	ws := rawDial(t, s)
	r := rawCall(t, ws, "1", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	var res struct{ Limits map[string]float64 }
	if err := json.Unmarshal(r.Result, &res); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"pendingRequests": maxPending, "maxUnreadResponses": maxQueuedCtrl,
		"inputQueueBytes": 64 << 10, "maxWireMessageBytes": 16 << 20, "maxSockets": 5,
		"maxChannels": DefaultMaxChannels, "maxSessions": DefaultMaxSessions,
	} {
		if got, ok := res.Limits[name]; !ok || got != want {
			t.Errorf("limits.%s: got %v (present %v), want %v", name, got, ok, want)
		}
	}
}

// TestParamsAsArrayIsInvalidParams: params must be an object (protocol.md §4); an array is
// invalid_params, for every method.
func TestParamsAsArrayIsInvalidParams(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	ws := rawDial(t, s)
	rawCall(t, ws, "1", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	for i, m := range []string{"session.open", "session.attach", "session.list", "session.kill"} {
		id := string(rune('a' + i))
		r := rawCall(t, ws, `"`+id+`"`, `{"jsonrpc":"2.0","id":"`+id+`","method":"`+m+`","params":[1,80,24]}`)
		if r.Error == nil || r.Error.Data["kind"] != "invalid_params" {
			t.Errorf("%s with params as an array: got %+v, want invalid_params", m, r.Error)
		}
	}
}

// TestOpenInAMissingCwdNamesIt: a cwd that does not exist fails with spawn_failed naming the
// directory, not as "fork/exec /bin/sh: no such file or directory".
func TestOpenInAMissingCwdNamesIt(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	c := s.dial(t)
	const dir = "/nonexistent/muxterm-cwd"
	_, err := c.Open(testCtx(t), client.OpenOptions{Cols: 80, Rows: 24, Cwd: dir})
	if err == nil || !strings.Contains(err.Error(), "cwd "+dir+": no such file or directory") {
		t.Fatalf("open in %s: got %v, want an error naming the directory", dir, err)
	}
}
