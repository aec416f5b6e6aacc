//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// readN reads exactly n bytes from ch, or fails at ctx's deadline.
func readN(ctx context.Context, t *testing.T, ch *client.Channel, n int) []byte {
	t.Helper()
	out := make([]byte, 0, n)
	buf := make([]byte, 64<<10)
	done := make(chan error, 1)
	go func() {
		for len(out) < n {
			m, err := ch.Read(buf[:min(len(buf), n-len(out))])
			out = append(out, buf[:m]...)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("read %d bytes: got %d, then %v", n, len(out), err)
		}
	case <-ctx.Done():
		t.Fatalf("read %d bytes: timed out", n)
	}
	return out
}

func TestThreeSessionsOutputNeverCrosses(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh")
	c := g.dial(t)
	ctx := ctxT(t, 20*time.Second)
	names := []string{"alpha", "bravo", "charlie"}
	chans := make([]*client.Channel, len(names))
	for i, n := range names {
		ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
			Cmd: []string{"sh", "-c", fmt.Sprintf("for i in 1 2 3 4 5 6 7 8 9 10; do echo %s-$i; done; echo %s-END", n, n)}})
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	for i, ch := range chans {
		out, err := ch.ReadUntil(ctx, names[i]+"-END")
		if err != nil {
			t.Fatal(err)
		}
		for j, other := range names {
			if j != i && strings.Contains(out, other) {
				t.Errorf("channel %s got output of %s: %q", names[i], other, out)
			}
		}
		if got := strings.Count(out, names[i]+"-"); got != 11 {
			t.Errorf("channel %s: got %d lines, want 11", names[i], got)
		}
	}
}

func TestByteExactRandomData(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh")
	c := g.dial(t)
	ctx := ctxT(t, 60*time.Second)
	const size = 1 << 20
	dir := t.TempDir()
	var wg sync.WaitGroup
	for i := range 3 {
		data := make([]byte, size)
		_, _ = rand.Read(data)
		path := filepath.Join(dir, fmt.Sprintf("data%d", i))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		// Raw mode: the terminal passes bytes through untouched.
		ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
			Cmd: []string{"sh", "-c", "stty raw -echo && cat " + path + " && exec sleep 30"}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			got := readN(ctx, t, ch, size)
			if !bytes.Equal(got, data) {
				i := 0
				for i < len(got) && got[i] == data[i] {
					i++
				}
				t.Errorf("session %d: bytes differ from offset %d", i, i)
			}
			if _, err := c.Kill(ctx, ch.Session()); err != nil {
				t.Errorf("kill: %v", err)
			}
		})
	}
	wg.Wait()
}

// expectedSeq is what `seq 1 n` prints in raw mode.
// openSeq opens `seq 1 lines` on c, raw, and keeps the session alive after it.
func openSeq(ctx context.Context, t *testing.T, c *client.Client, lines int) *client.Channel {
	t.Helper()
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"sh", "-c", fmt.Sprintf("stty raw -echo && seq 1 %d && exec sleep 30", lines)}})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// readAndDrop reads n bytes of ch, then drops c mid-stream. It returns what was read and the
// channel's offset, which must be its length.
func readAndDrop(ctx context.Context, t *testing.T, c *client.Client, ch *client.Channel, n int) ([]byte, int64) {
	t.Helper()
	first := readN(ctx, t, ch, n)
	off := ch.Offset()
	c.Close()
	if off != int64(len(first)) {
		t.Fatalf("offset after %d bytes: got %d", len(first), off)
	}
	return first, off
}

// checkResumed checks that an attach resumed exactly at off with nothing lost, and that what
// ch reads from there completes first to want.
func checkResumed(ctx context.Context, t *testing.T, ch *client.Channel, res proto.AttachResult, off int64, first, want []byte) {
	t.Helper()
	if res.Offset != off || res.Lost != 0 {
		t.Fatalf("attach: got offset %d lost %d, want %d and 0", res.Offset, res.Lost, off)
	}
	rest := readN(ctx, t, ch, len(want)-len(first))
	if got := append(first, rest...); !bytes.Equal(got, want) {
		t.Fatalf("resumed stream differs (%d bytes, want %d)", len(got), len(want))
	}
}

func expectedSeq(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func TestResumeAfterDropIsByteExact(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh")
	ctx := ctxT(t, 60*time.Second)
	want := expectedSeq(100000) // 588,895 bytes: fits the 1 MiB ring
	c1 := g.dial(t)
	ch := openSeq(ctx, t, c1, 100000)
	id := ch.Session()
	first, off := readAndDrop(ctx, t, c1, ch, 100000)
	c2 := g.dial(t)
	ch2, res, err := c2.Attach(ctx, id, &off)
	if err != nil {
		t.Fatal(err)
	}
	checkResumed(ctx, t, ch2, res, off, first, want)
	if _, err := c2.Kill(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// TestResumeHoldAfterDrop: a stream many times the ring keeps running after its socket drops;
// the session holds its output at the dropped channel's offset for --resume-hold, so a reattach
// from what the client consumed misses nothing. With the hold off, the ring overwrites and the
// reattach reports the loss.
func TestResumeHoldAfterDrop(t *testing.T) {
	// 1,988,895 bytes, 7.6 times the 256 KiB ring. The window (64 KiB) fits in the ring beside the
	// high-water mark (128 KiB) and a read batch (32 KiB), so what is in flight at the drop is
	// still in the ring.
	const lines = 300000
	want := expectedSeq(lines)
	t.Run("an explicit detach holds nothing", func(t *testing.T) {
		g := startGateway(t, "--allow-cmd", "sh", "--scrollback", "256KiB", "--window", "64KiB", "--resume-hold", "1h")
		ctx := ctxT(t, 60*time.Second)
		c := g.dial(t)
		ch := openSeq(ctx, t, c, lines)
		readN(ctx, t, ch, 10000)
		if err := ch.Detach(ctx); err != nil {
			t.Fatal(err)
		}
		// With an hour's hold the program would stop about 160 KiB on; detached, it finishes.
		testutil.WaitFor(t, 20*time.Second, "the program to print everything", func() bool {
			l, err := c.List(ctx)
			return err == nil && len(l) == 1 && l[0].End == int64(len(want))
		})
	})
	t.Run("a detach with hold holds as a drop does", func(t *testing.T) {
		g := startGateway(t, "--allow-cmd", "sh", "--scrollback", "256KiB", "--window", "64KiB", "--resume-hold", "1h")
		ctx := ctxT(t, 60*time.Second)
		c := g.dial(t)
		ch := openSeq(ctx, t, c, lines)
		id := ch.Session()
		first := readN(ctx, t, ch, 10000)
		off := ch.Offset()
		if err := ch.DetachHolding(ctx); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, "the stream to run on after the detach", func() bool {
			l, err := c.List(ctx)
			return err == nil && len(l) == 1 && l[0].End > 128<<10
		})
		ch2, res, err := c.Attach(ctx, id, &off)
		if err != nil {
			t.Fatal(err)
		}
		checkResumed(ctx, t, ch2, res, off, first, want)
	})
	for _, tc := range []struct {
		name string
		hold string
	}{{"held", "10s"}, {"hold off", "0"}} {
		t.Run(tc.name, func(t *testing.T) {
			g := startGateway(t, "--allow-cmd", "sh", "--scrollback", "256KiB", "--window", "64KiB", "--resume-hold", tc.hold)
			ctx := ctxT(t, 60*time.Second)
			c1 := g.dial(t)
			ch := openSeq(ctx, t, c1, lines)
			id := ch.Session()
			first, off := readAndDrop(ctx, t, c1, ch, 10000)
			// Let the program run on: into the hold, which pauses it just past the high-water
			// mark (128 KiB) beyond what the client acknowledged (somewhere in [0, off]), or,
			// with no hold, past a ring's worth beyond off.
			past := int64(128 << 10)
			if tc.hold == "0" {
				past = off + 256<<10 + 16<<10
			}
			c2 := g.dial(t)
			testutil.WaitFor(t, 10*time.Second, "the stream to run on after the drop", func() bool {
				l, err := c2.List(ctx)
				return err == nil && len(l) == 1 && l[0].End > past
			})
			ch2, res, err := c2.Attach(ctx, id, &off)
			if err != nil {
				t.Fatal(err)
			}
			if tc.hold == "0" {
				if res.Lost == 0 {
					t.Fatalf("attach with the hold off: lost 0, want the ring to have overwritten offset %d", off)
				}
				return
			}
			checkResumed(ctx, t, ch2, res, off, first, want)
		})
	}
}

// echoLatency sends one byte to a raw `cat` and times its echo.
func echoLatency(ctx context.Context, t *testing.T, ch *client.Channel, n int) []time.Duration {
	t.Helper()
	buf := make([]byte, 64)
	lat := make([]time.Duration, 0, n)
	for i := range n {
		b := []byte{'a' + byte(i%26)}
		start := time.Now()
		if _, err := ch.Write(b); err != nil {
			t.Fatal(err)
		}
		got := 0
		for got < 1 {
			m, err := readWithin(ctx, ch, buf)
			if err != nil {
				t.Fatalf("echo %d: %v", i, err)
			}
			got += m
		}
		lat = append(lat, time.Since(start))
	}
	return lat
}

func readWithin(ctx context.Context, ch *client.Channel, buf []byte) (int, error) {
	type res struct {
		n   int
		err error
	}
	r := make(chan res, 1)
	go func() {
		n, err := ch.Read(buf)
		r <- res{n, err}
	}()
	select {
	case x := <-r:
		return x.n, x.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func TestNoHeadOfLineBlocking(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh", "--allow-cmd", "yes")
	c := g.dial(t)
	ctx := ctxT(t, 60*time.Second)
	flood, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = flood // never read, so never acknowledged
	echo, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"sh", "-c", "stty raw -echo && echo READY && exec cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := echo.ReadUntil(ctx, "READY\n"); err != nil {
		t.Fatal(err)
	}
	lat := echoLatency(ctx, t, echo, 200)
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("echo next to an unacknowledged flood: p50 %v p99 %v", p50, p99)
	// A generous bound: the precise figure belongs to the benchmarks.
	if p99 > 500*time.Millisecond {
		t.Errorf("echo p99 next to a stalled flood: got %v, want < 500ms", p99)
	}
	if res, err := c.Kill(ctx, flood.Session()); err != nil || res.Status != "killed" {
		t.Errorf("kill flood: %+v %v", res, err)
	}
}

func rpcErr(t *testing.T, err error) *proto.Error {
	t.Helper()
	var e *proto.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want a JSON-RPC error", err)
	}
	return e
}

func TestBadInputGetsErrorsAndHarmsNothing(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh")
	c := g.dial(t)
	ctx := ctxT(t, 60*time.Second)
	good, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"sh", "-c", "stty raw -echo && echo READY && exec cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.ReadUntil(ctx, "READY\n"); err != nil {
		t.Fatal(err)
	}
	stillWorks := func(t *testing.T, tag string) {
		t.Helper()
		typeUntil(ctx, t, good, tag, tag)
	}
	// Requests with an id: the error comes back as the response.
	calls := []struct {
		name, method string
		params       any
		kind         string
	}{
		{"unknown method", "session.explode", map[string]any{}, "method_not_found"},
		{"unknown session", "session.attach", map[string]any{"channel": 50, "session": strings.Repeat("ab", 16)}, "unknown_session"},
		{"malformed session id", "session.attach", map[string]any{"channel": 50, "session": "../../etc"}, "unknown_session"},
		{"channel in use", "session.attach", map[string]any{"channel": good.ID, "session": good.Session()}, "channel_in_use"},
		{"absurd resize", "session.resize", map[string]any{"channel": good.ID, "cols": 70000, "rows": 24}, "invalid_params"},
		{"negative resize", "session.resize", map[string]any{"channel": good.ID, "cols": -1, "rows": 24}, "invalid_params"},
		{"fractional resize", "session.resize", map[string]any{"channel": good.ID, "cols": 80.5, "rows": 24}, "invalid_params"},
		{"resize unknown channel", "session.resize", map[string]any{"channel": 77, "cols": 80, "rows": 24}, "unknown_channel"},
		{"channel zero", "session.open", map[string]any{"channel": 0, "cols": 80, "rows": 24}, "invalid_params"},
		{"command not allowed", "session.open", map[string]any{"channel": 60, "cols": 80, "rows": 24, "cmd": []string{"python3"}}, "forbidden"},
		{"bad env", "session.open", map[string]any{"channel": 61, "cols": 80, "rows": 24, "env": map[string]string{"LD_PRELOAD": "/x.so"}}, "invalid_params"},
		{"from beyond end", "session.attach", map[string]any{"channel": 62, "session": good.Session(), "from": 1 << 40}, "invalid_params"},
		{"second initialize", "initialize", map[string]any{}, "invalid_request"},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Call(ctx, tc.method, tc.params, nil)
			if got := rpcErr(t, err).Kind(); got != tc.kind {
				t.Errorf("got kind %q, want %q (%v)", got, tc.kind, err)
			}
			stillWorks(t, "ok-"+strings.ReplaceAll(tc.name, " ", "-")+";")
		})
	}
	// Messages without a usable id: the error comes back with id null. They go out on a second,
	// hand-written socket bound to the same session on the same channel number, so the frames
	// about a bound channel meet a real binding.
	raw := dialRaw(t, g, g.Token)
	if b := raw.call(1, "session.attach", map[string]any{"channel": good.ID, "session": good.Session()}); bytes.Contains(b, []byte(`"error"`)) {
		t.Fatalf("raw attach: %s", b)
	}
	raws := []struct {
		name string
		typ  int
		msg  []byte
		kind string
	}{
		{"malformed json", websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":9,`), "parse_error"},
		{"not json-rpc", websocket.TextMessage, []byte(`[1,2,3]`), "invalid_request"},
		{"short binary frame", websocket.BinaryMessage, []byte{2, 0, 0}, "bad_frame"},
		{"unknown frame type", websocket.BinaryMessage, []byte{9, 0, 0, 0, 1, 'x'}, "bad_frame"},
		{"input on unknown channel", websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameInput, 999, []byte("rm -rf /\r")), "unknown_channel"},
		{"ack beyond in flight", websocket.BinaryMessage, proto.AppendAck(nil, good.ID, 1<<30), "bad_frame"},
		{"oversize text message", websocket.TextMessage, bytes.Repeat([]byte("x"), 200<<10), "limit_exceeded"},
		{"oversize input frame", websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameInput, good.ID, bytes.Repeat([]byte("y"), 100<<10)), "limit_exceeded"},
	}
	for _, tc := range raws {
		t.Run(tc.name, func(t *testing.T) {
			if got := errorKind(t, raw.send(tc.typ, tc.msg)); got != tc.kind {
				t.Errorf("got kind %q, want %q", got, tc.kind)
			}
			stillWorks(t, "ok-"+strings.ReplaceAll(tc.name, " ", "-")+";")
		})
	}
	// Nothing of the oversize input reached the PTY: the good session echoes only the tags.
	stillWorks(t, "final;")
}

func TestFirstMessageMustBeInitialize(t *testing.T) {
	g := startGateway(t)
	h := http.Header{"Authorization": {"Bearer " + g.Token}}
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}, HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial(g.WS, h)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":1,"method":"session.list"}`)); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err = ws.ReadMessage()
	if !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
		t.Fatalf("got %v, want close 1008", err)
	}
}

func TestAuthRefusedBeforeAnySession(t *testing.T) {
	g := startGateway(t)
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	cases := []struct {
		name   string
		header http.Header
		proto  []string
		status int
	}{
		{"no token", http.Header{}, []string{proto.Subprotocol}, http.StatusUnauthorized},
		{"wrong token", http.Header{"Authorization": {"Bearer nope"}}, []string{proto.Subprotocol}, http.StatusUnauthorized},
		{"basic auth", http.Header{"Authorization": {"Basic " + g.Token}}, []string{proto.Subprotocol}, http.StatusUnauthorized},
		{"foreign origin", http.Header{"Authorization": {"Bearer " + g.Token}, "Origin": {"http://evil.example"}}, []string{proto.Subprotocol}, http.StatusForbidden},
		{"cookie without origin", http.Header{"Cookie": {g.cookie() + "=" + g.Token}}, []string{proto.Subprotocol}, http.StatusForbidden},
		{"cookie with foreign origin", http.Header{"Cookie": {g.cookie() + "=" + g.Token}, "Origin": {"http://evil.example"}}, []string{proto.Subprotocol}, http.StatusForbidden},
		{"no subprotocol", http.Header{"Authorization": {"Bearer " + g.Token}}, nil, http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dd := d
			dd.Subprotocols = tc.proto
			ws, resp, err := dd.Dial(g.WS, tc.header)
			if err == nil {
				ws.Close()
				t.Fatalf("upgrade succeeded, want HTTP %d", tc.status)
			}
			if resp == nil || resp.StatusCode != tc.status {
				t.Fatalf("got %v, want HTTP %d", resp, tc.status)
			}
			if !resp.Close && resp.Header.Get("Connection") != "close" {
				t.Errorf("refusal without Connection: close")
			}
			if tc.status == http.StatusBadRequest && resp.Header.Get("Sec-WebSocket-Protocol") != proto.Subprotocol {
				t.Errorf("400 does not name the supported subprotocol")
			}
		})
	}
	// The browser path works: same origin and the cookie.
	hdr := http.Header{"Cookie": {g.cookie() + "=" + g.Token}, "Origin": {g.Base}}
	c, err := client.Dial(ctxT(t, 10*time.Second), g.WS, client.DialOptions{Header: hdr})
	if err != nil {
		t.Fatalf("same-origin cookie dial: %v", err)
	}
	defer c.Close()
	list, err := c.List(ctxT(t, 10*time.Second))
	if err != nil || len(list) != 0 {
		t.Fatalf("sessions after refused upgrades: got %v %v, want none", list, err)
	}
	// Health endpoints answer without a token.
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(g.Base + p)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %v %v", p, resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
}

func TestGracefulShutdownLeavesNoChild(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh", "--kill-grace", "200ms")
	c := g.dial(t)
	ctx := ctxT(t, 30*time.Second)
	var pids []int
	var chans []*client.Channel
	for _, cmd := range [][]string{
		nil, // the shell
		{"sh", "-c", "echo READY; exec sleep 300"},
		{"sh", "-c", "trap '' HUP TERM; echo READY; while :; do sleep 1; done"},
	} {
		ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: cmd})
		if err != nil {
			t.Fatal(err)
		}
		if cmd != nil {
			if _, err := ch.ReadUntil(ctx, "READY"); err != nil {
				t.Fatal(err)
			}
		}
		pids = append(pids, ch.Pid())
		chans = append(chans, ch)
	}
	took := g.Stop(10 * time.Second)
	t.Logf("shutdown took %v", took)
	for _, ch := range chans {
		select {
		case <-ch.Closed():
		case <-ctx.Done():
			t.Fatal("channel not closed")
		}
		if ch.Reason() != "shutdown" {
			t.Errorf("channel %d: got reason %q, want shutdown", ch.ID, ch.Reason())
		}
	}
	<-c.Done()
	if !websocket.IsCloseError(c.Err(), websocket.CloseGoingAway) {
		t.Errorf("got %v, want close 1001", c.Err())
	}
	for _, pid := range pids {
		testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("pid %d to be gone", pid), func() bool { return !testutil.Alive(pid) })
	}
	if took > 5*time.Second {
		t.Errorf("shutdown took %v, want well under 10s", took)
	}
}
