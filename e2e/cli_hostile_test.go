//go:build e2e

package e2e

// The muxterm command against a hostile server (a fake: a real gateway cannot be made to break
// the protocol or to leave a kill unanswered), under a real PTY.

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/internal/testutil/wstest"
	"github.com/muxterm/muxterm/proto"
)

const fakeSession = "0123456789abcdef0123456789abcdef"

// fakeGateway answers initialize, session.open, session.list (one session) and session.attach,
// then runs after on the socket; every other request (kill, detach, resize) goes unanswered.
// Each request's method is sent on seen, if not nil and it has room.
func fakeGateway(t *testing.T, seen chan<- string, after func(ws *websocket.Conn)) string {
	t.Helper()
	release := make(chan struct{})
	return wstest.Serve(t, func(ws *websocket.Conn, _ *http.Request) {
		defer ws.Close()
		go func() { <-release; ws.Close() }()
		for {
			typ, b, err := ws.ReadMessage()
			if err != nil {
				return
			}
			if typ != websocket.TextMessage {
				continue
			}
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			_ = json.Unmarshal(b, &req)
			select {
			case seen <- req.Method:
			default:
			}
			var res any
			switch req.Method {
			case "initialize":
				res = proto.InitializeResult{Protocol: proto.Subprotocol, Flow: proto.Flow{Window: 64 << 10, AckBytes: 16 << 10}}
			case "session.open":
				res = proto.OpenResult{Session: fakeSession, Channel: 1, Pid: 7}
			case "session.list":
				res = proto.ListResult{Sessions: []proto.SessionInfo{{Session: fakeSession, Name: "s", Cols: 80, Rows: 24}}}
			case "session.attach":
				res = proto.AttachResult{Session: fakeSession, Channel: 1, Cols: 80, Rows: 24}
			default:
				continue // never answered
			}
			if ws.WriteMessage(websocket.TextMessage, proto.MarshalResponse(req.ID, res, nil)) != nil {
				return
			}
			if (req.Method == "session.open" || req.Method == "session.attach") && after != nil {
				after(ws)
			}
		}
	}, func() { close(release) })
}

// One session.gap of -1 bytes is a protocol violation: exec ends at once (it neither spins
// nor goes deaf to SIGTERM), with 1 and the reason, and is not redialled.
func TestCLIExecHostileGapEnds(t *testing.T) {
	url := fakeGateway(t, nil, func(ws *websocket.Conn) {
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","method":"session.gap","params":{"channel":1,"lost":-1}}`))
	})
	start := time.Now()
	tm := startTerm(t, cliEnv(t, nil, "MUXTERM_URL="+url, "MUXTERM_TOKEN=t"), false, "exec", "--", "true")
	select {
	case <-tm.exited:
	case <-time.After(5 * time.Second):
		_ = tm.cmd.Process.Signal(syscall.SIGTERM)
		t.Fatalf("exec did not end after a gap of -1 bytes; output %q", tm.output())
	}
	if tm.code != 1 || !strings.Contains(tm.output(), "protocol violation") {
		t.Fatalf("exit %d, output %q: want 1 and the protocol violation", tm.code, tm.output())
	}
	t.Logf("FIGURE exec ended %v after its start against a gap of -1 bytes", time.Since(start).Round(time.Millisecond))
}

// Ctrl-C and SIGTERM end muxterm within a second even when the server never answers the kill
// (exec) or the detach (attach) that they send: before, each waited out its 10 s call timeout.
func TestCLIStopSignalsAgainstSilentServer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		ready string // the request after which muxterm catches stop signals, or "READY" output
		stop  func(tm *term)
		code  int
	}{
		// exec catches them from before it dials; attach from its loop, which first sends the
		// terminal's size.
		{"exec SIGTERM", []string{"exec", "--", "sleep", "1000"}, "session.open", func(tm *term) { _ = tm.cmd.Process.Signal(syscall.SIGTERM) }, 143},
		{"exec Ctrl-C", []string{"exec", "--", "sleep", "1000"}, "session.open", func(tm *term) { tm.send("\x03") }, 130},
		{"exec SIGTERM in its loop", []string{"exec", "--", "sleep", "1000"}, "READY", func(tm *term) { _ = tm.cmd.Process.Signal(syscall.SIGTERM) }, 143},
		{"attach SIGTERM", []string{"attach", "s"}, "session.resize", func(tm *term) { _ = tm.cmd.Process.Signal(syscall.SIGTERM) }, 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := make(chan string, 16)
			url := fakeGateway(t, seen, func(ws *websocket.Conn) {
				_ = ws.WriteMessage(websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameOutput, 1, []byte("READY")))
			})
			tm := startTerm(t, cliEnv(t, nil, "MUXTERM_URL="+url, "MUXTERM_TOKEN=t"), false, tc.args...)
			if tc.ready == "READY" {
				tm.expect("READY") // the pump wrote output: the loop runs
			}
			for m := ""; tc.ready != "READY" && m != tc.ready; {
				select {
				case m = <-seen:
				case <-time.After(10 * time.Second):
					t.Fatalf("no %s from muxterm; output %q", tc.ready, tm.output())
				}
			}
			sent := time.Now()
			tc.stop(tm)
			select {
			case <-tm.exited:
			case <-time.After(5 * time.Second):
				t.Fatalf("muxterm still running 5 s after the stop; output %q", tm.output())
			}
			took := time.Since(sent)
			t.Logf("FIGURE %s: exited %v after the stop, code %d", tc.name, took.Round(time.Millisecond), tm.code)
			if took > time.Second || tm.code != tc.code {
				t.Fatalf("exited after %v with %d, want within 1 s with %d; output %q", took, tm.code, tc.code, tm.output())
			}
		})
	}
}
