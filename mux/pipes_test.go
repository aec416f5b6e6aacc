package mux

import (
	"strings"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/internal/testutil/rawmux"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// TestPipeSessionStreamsOnTheWire: a client that declared capabilities.pipes gets a pipe
// session's stdout in output frames and its stderr in stderr frames, then its exit.
func TestPipeSessionStreamsOnTheWire(t *testing.T) {
	_, url := newViewersServer(t, session.Options{})
	c := rawmux.DialCaps(t, url, nil, map[string]any{proto.CapabilityPipes: true})
	var open proto.OpenResult
	c.Result("session.open", map[string]any{"channel": 1, "tty": false,
		"cmd": []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}, &open)
	exit := c.NextNote("session.exit")
	if exit["code"] != float64(3) {
		t.Errorf("exit: got %v, want code 3", exit)
	}
	if out, errOut := string(c.Output(1)), string(c.Stderr(1)); out != "out\n" || errOut != "err\n" {
		t.Errorf("stdout, stderr: got %q, %q, want %q, %q", out, errOut, "out\n", "err\n")
	}
	// An attach that asks for a paint gets none (a pipe session has no screen): the raw replay
	// of both streams instead.
	var att proto.AttachResult
	c.Result("session.attach", map[string]any{"channel": 2, "session": open.Session, "from": 0, "screen": "always"}, &att)
	if att.Screen != 0 || att.TTY == nil || *att.TTY || att.Offset != 0 {
		t.Errorf("attach with screen always: got screen %d, tty %v, offset %d, want 0, false, 0", att.Screen, att.TTY, att.Offset)
	}
	c.NextNote("session.exit")
	if out, errOut := string(c.Output(2)), string(c.Stderr(2)); out != "out\n" || errOut != "err\n" {
		t.Errorf("replay: got %q, %q, want %q, %q", out, errOut, "out\n", "err\n")
	}
	var list proto.ListResult
	c.Result("session.list", map[string]any{}, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].TTY == nil || *list.Sessions[0].TTY {
		t.Errorf("list: got %+v, want one entry with tty false", list)
	}
	if r := string(c.Call("session.capture", map[string]any{"session": open.Session})); !strings.Contains(r, `"invalid_request"`) || !strings.Contains(r, "pipes") {
		t.Errorf("capture of a pipe session: got %s, want invalid_request naming pipes", r)
	}
}

// TestPipeSessionWithoutCapability: a client that did not declare capabilities.pipes never sees
// a stderr frame: stderr's bytes come in output frames.
func TestPipeSessionWithoutCapability(t *testing.T) {
	_, url := newViewersServer(t, session.Options{})
	c := rawmux.Dial(t, url, nil)
	c.Result("session.open", map[string]any{"channel": 1, "tty": false,
		"cmd": []string{"sh", "-c", "echo out; sleep 0.1; echo err >&2"}}, nil)
	c.NextNote("session.exit")
	if out, errOut := string(c.Output(1)), c.Stderr(1); out != "out\nerr\n" || len(errOut) != 0 {
		t.Errorf("output, stderr frames: got %q, %q, want %q, none", out, errOut, "out\nerr\n")
	}
}

// TestCloseStdinOnTheWire: input, then session.closeStdin, reaches the program in that order:
// cat prints its input and exits at its end.
func TestCloseStdinOnTheWire(t *testing.T) {
	_, url := newViewersServer(t, session.Options{})
	c := rawmux.DialCaps(t, url, nil, map[string]any{proto.CapabilityPipes: true})
	var open proto.OpenResult
	c.Result("session.open", map[string]any{"channel": 1, "tty": false, "cmd": []string{"cat"}}, &open)
	ro := rawmux.DialCaps(t, url+"?ro=1", nil, map[string]any{proto.CapabilityPipes: true})
	ro.Result("session.attach", map[string]any{"channel": 4, "session": open.Session}, nil)
	if r := string(ro.Call("session.closeStdin", map[string]any{"channel": 4})); !strings.Contains(r, `"forbidden"`) {
		t.Errorf("closeStdin from a read-only principal: got %s, want forbidden", r)
	}
	c.Input(1, "hi\n")
	c.Result("session.closeStdin", map[string]any{"channel": 1}, nil)
	if exit := c.NextNote("session.exit"); exit["code"] != float64(0) {
		t.Errorf("exit: got %v, want code 0", exit)
	}
	if out := string(c.Output(1)); out != "hi\n" {
		t.Errorf("output: got %q, want %q", out, "hi\n")
	}

	c.Result("session.open", map[string]any{"channel": 2, "cols": 80, "rows": 24, "cmd": []string{"cat"}}, nil)
	if r := string(c.Call("session.closeStdin", map[string]any{"channel": 2})); !strings.Contains(r, `"invalid_request"`) {
		t.Errorf("closeStdin of a PTY session: got %s, want invalid_request", r)
	}
	if r := string(c.Call("session.open", map[string]any{"channel": 3, "tty": "no"})); !strings.Contains(r, `"tty"`) {
		t.Errorf("open with a tty that is not a boolean: got %s, want invalid_params naming tty", r)
	}
	if r := string(c.Call("session.open", map[string]any{"channel": 3})); !strings.Contains(r, `"cols"`) {
		t.Errorf("open of a PTY without a size: got %s, want invalid_params naming cols", r)
	}
}

// TestPipeSessionCreditCountsBothStreams: a pipe session's stdout and stderr share the
// channel's window: a channel that is never read receives exactly the window, of both streams
// together, and a barrier on another channel shows the socket goes on meanwhile.
func TestPipeSessionCreditCountsBothStreams(t *testing.T) {
	const window = 64 << 10
	s := newServer(t, ServerOptions{Window: window}, nil)
	c := s.dial(t)
	ctx := testCtx(t)
	flood, err := c.Open(ctx, client.OpenOptions{Pipes: true, Cmd: []string{"sh", "-c", "while :; do echo out; echo err >&2; done"}})
	if err != nil {
		t.Fatal(err)
	}
	echo, err := c.Open(ctx, client.OpenOptions{Pipes: true, Cmd: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the window to fill", func() bool { return flood.Buffered() >= window })
	for i := range 5 {
		tag := string(rune('a'+i)) + "!"
		if _, err := echo.Write([]byte(tag)); err != nil {
			t.Fatal(err)
		}
		if _, err := echo.ReadUntil(ctx, tag); err != nil {
			t.Fatal(err)
		}
	}
	if got := flood.Buffered(); got != window {
		t.Fatalf("unacknowledged bytes: got %d, want %d", got, window)
	}
	var outs, errs int
	buf := make([]byte, window)
	for outs+errs < window {
		n, stderr, err := flood.ReadStream(ctx, buf)
		if err != nil {
			t.Fatal(err)
		}
		if stderr {
			errs += n
		} else {
			outs += n
		}
	}
	if outs == 0 || errs == 0 {
		t.Errorf("window's bytes: %d of stdout, %d of stderr, want some of each", outs, errs)
	}
	if _, err := c.Kill(ctx, flood.Session()); err != nil {
		t.Fatal(err)
	}
}

// TestPipeSessionOpensOnThisNode: in a cluster, a pipe session is never placed on another node
// (a relay carries neither its stderr frames nor session.closeStdin); a PTY session is offered
// to the placement.
func TestPipeSessionOpensOnThisNode(t *testing.T) {
	rem := &fakeRemote{}
	s := newServer(t, ServerOptions{Remote: rem, Node: "a"}, nil)
	c := s.dial(t)
	ctx := testCtx(t)
	ch, err := c.Open(ctx, client.OpenOptions{Pipes: true, Cmd: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	rem.mu.Lock()
	opens := rem.opens
	rem.mu.Unlock()
	if opens != 0 {
		t.Errorf("placement asked for a pipe session: %d times, want 0", opens)
	}
	if _, err := c.Kill(ctx, ch.Session()); err != nil {
		t.Fatal(err)
	}
	pty, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	rem.mu.Lock()
	opens = rem.opens
	rem.mu.Unlock()
	if opens != 1 {
		t.Errorf("placement asked for a PTY session: %d times, want 1", opens)
	}
	if _, err := c.Kill(ctx, pty.Session()); err != nil {
		t.Fatal(err)
	}
}
