package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/internal/testutil/wstest"
	"github.com/muxterm/muxterm/proto"
)

func TestVisible(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain name", "plain name"},
		{"\x1b]0;pwned\a\x1b[2J", `\x1b]0;pwned\x07\x1b[2J`},
		{"tab\there\r\n", `tab\x09here\x0d\x0a`},
		{"del\x7f", `del\x7f`},
		{"c1 \u009b2J", `c1 \u009b2J`},
		{"lone \x9b byte", `lone \x9b byte`},
		{"héllo ✓", "héllo ✓"},
	} {
		if got := visible(tc.in); got != tc.want {
			t.Errorf("visible(%q): got %q, want %q", tc.in, got, tc.want)
		}
	}
	b, _ := json.Marshal(map[string]string{"name": "a\x1b\x7f\u009bb"})
	got := jsonVisible(b)
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["name"] != "a\x1b\x7f\u009bb" {
		t.Errorf("jsonVisible(%s) = %s: not the same JSON value (%v)", b, got, err)
	}
	if bytes.ContainsAny(got, "\x1b\x7f\u009b") {
		t.Errorf("jsonVisible: %q still holds a control character", got)
	}
}

// peerServer answers initialize and then session.list with list, or with errMsg as an error.
func peerServer(t *testing.T, list []proto.SessionInfo, errMsg string) string {
	t.Helper()
	release := make(chan struct{})
	return wstest.Serve(t, func(ws *websocket.Conn, _ *http.Request) {
		defer ws.Close()
		go func() { <-release; ws.Close() }()
		for {
			_, b, err := ws.ReadMessage()
			if err != nil {
				return
			}
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			_ = json.Unmarshal(b, &req)
			var msg []byte
			switch {
			case req.Method == "initialize":
				msg = proto.MarshalResponse(req.ID, proto.InitializeResult{Protocol: proto.Subprotocol}, nil)
			case errMsg != "":
				msg = proto.MarshalResponse(req.ID, nil, &proto.Error{Code: -32603, Message: errMsg, Data: map[string]any{"kind": "internal"}})
			default:
				msg = proto.MarshalResponse(req.ID, proto.ListResult{Sessions: list}, nil)
			}
			if ws.WriteMessage(websocket.TextMessage, msg) != nil {
				return
			}
		}
	}, func() { close(release) })
}

// runApp runs the CLI in-process with args and returns stdout, stderr and the exit code.
func runApp(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	a := &app{stdout: &out, stderr: &errOut, getenv: func(k string) string {
		if k == "XDG_CONFIG_HOME" {
			return t.TempDir()
		}
		return ""
	}}
	code := a.run(args)
	return out.String(), errOut.String(), code
}

const pwned = "\x1b]0;pwned\a\x1b[2J"

// ls, in every form, prints a session's name, command and other strings with their control
// characters escaped: listing a session cannot drive the lister's terminal.
func TestLsEscapesPeerStrings(t *testing.T) {
	sig := "HUP" + pwned
	url := peerServer(t, []proto.SessionInfo{{Session: "id" + pwned, Name: "n" + pwned, Cmd: []string{"sh", "-c", pwned},
		Created: "2026" + pwned, Exit: &proto.ExitInfo{Code: -1, Signal: &sig}}}, "")
	for _, args := range [][]string{{"ls"}, {"ls", "-q"}, {"ls", "--json"}} {
		out, errOut, code := runApp(t, append([]string{"--url", url, "--token", "t"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
		}
		if strings.ContainsAny(out, "\x1b\a") {
			t.Errorf("%v printed a control character: %q", args, out)
		}
		if !strings.Contains(out, `\x1b]0;pwned`) && !strings.Contains(out, `\u001b]0;pwned`) {
			t.Errorf("%v: %q does not show the escaped name", args, out)
		}
	}
}

// An error message from the gateway is printed escaped too.
func TestServerErrorEscaped(t *testing.T) {
	url := peerServer(t, nil, "bad"+pwned)
	_, errOut, code := runApp(t, "--url", url, "--token", "t", "ls")
	if code != 1 || strings.ContainsAny(errOut, "\x1b\a") || !strings.Contains(errOut, `bad\x1b]0;pwned\x07`) {
		t.Fatalf("exit %d, stderr %q: want 1 and the message escaped", code, errOut)
	}
}
