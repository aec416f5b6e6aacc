package mux

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// TestRestartSends1012AndKeepsSessions: cancelling with ErrRestart sends gateway.restart and
// closes with 1012, sends no session.closed, leaves the session running with a resume hold
// at the channel's offset, and Serve reports no error.
func TestRestartSends1012AndKeepsSessions(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	ctx := testCtx(t)
	c := s.dial(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "echo hi; exec sleep 60"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "hi"); err != nil {
		t.Fatal(err)
	}
	// A bare socket sees the notification and the close code.
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}, HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial(s.url, http.Header{})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.WriteMessage(websocket.TextMessage,
		[]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"client":{"name":"t","version":"0"}}}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ws.ReadMessage(); err != nil { // initialize's result
		t.Fatal(err)
	}
	s.cancel(ErrRestart)
	var methods []string
	var closeErr *websocket.CloseError
	for {
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, b, err := ws.ReadMessage()
		if err != nil {
			if !errors.As(err, &closeErr) {
				t.Fatalf("read: %v", err)
			}
			break
		}
		var m struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(b, &m) == nil && m.Method != "" {
			methods = append(methods, m.Method+string(m.Params))
		}
	}
	if closeErr.Code != proto.CloseServiceRestart || len(methods) != 1 || methods[0] != `gateway.restart{"resumeHoldMs":0}` {
		t.Fatalf("got %v then close %d, want gateway.restart then 1012", methods, closeErr.Code)
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("client socket not closed")
	}
	if !errors.As(c.Err(), &closeErr) || closeErr.Code != proto.CloseServiceRestart {
		t.Fatalf("client socket ended with %v, want 1012", c.Err())
	}
	if ch.Reason() != "" {
		t.Fatalf("channel closed with reason %q: a restart must not close sessions", ch.Reason())
	}
	sess, err := s.reg.Get(ch.Session(), principal)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the viewer to go", func() bool { return sess.Info().Viewers == 0 })
	if st := sess.State(); st != session.StateRunning {
		t.Fatalf("state after the restart: %v, want running", st)
	}
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) != 0 {
		t.Fatalf("Serve returned %v, want nil for a restart", s.errs)
	}
}
