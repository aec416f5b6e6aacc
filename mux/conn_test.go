package mux

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

const principal = "tester"

// server runs mux.Serve behind a loopback HTTP server with a real registry.
type server struct {
	reg  *session.Registry
	url  string
	wg   sync.WaitGroup // Serve calls
	mu   sync.Mutex
	errs []error
	// cancel ends every socket's context with a cause (ErrShutdown, ErrRestart).
	cancel context.CancelCauseFunc
}

func newServer(t *testing.T, opts ServerOptions, onSocket func(ws *websocket.Conn)) *server {
	t.Helper()
	return newServerWith(t, session.Options{}, opts, onSocket)
}

// newServerWith is newServer with a registry of the given session options (Shell and
// KillGrace set if not given).
func newServerWith(t *testing.T, so session.Options, opts ServerOptions, onSocket func(ws *websocket.Conn)) *server {
	t.Helper()
	if so.Shell == "" {
		so.Shell = "/bin/sh"
	}
	if so.KillGrace == 0 {
		so.KillGrace = 100 * time.Millisecond
	}
	s := &server{reg: session.NewRegistry(so, nil)}
	up := websocket.Upgrader{Subprotocols: []string{proto.Subprotocol}}
	ctx, cancel := context.WithCancelCause(context.Background())
	s.cancel = cancel
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		s.wg.Add(1)
		defer s.wg.Done()
		if onSocket != nil {
			onSocket(ws)
		}
		o := opts
		o.Registry, o.Principal = s.reg, principal
		if o.AllowCmd == nil {
			o.AllowCmd = func([]string) bool { return true }
		}
		if err := Serve(ctx, ws, o); err != nil {
			s.mu.Lock()
			s.errs = append(s.errs, err)
			s.mu.Unlock()
		}
	}))
	s.url = "ws" + strings.TrimPrefix(hs.URL, "http")
	t.Cleanup(func() {
		cancel(ErrShutdown)
		s.wg.Wait()
		hs.Close()
		sctx, c2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer c2()
		if err := s.reg.Shutdown(sctx); err != nil {
			t.Errorf("registry shutdown: %v", err)
		}
	})
	return s
}

func (s *server) dial(t *testing.T) *client.Client {
	t.Helper()
	return s.dialWith(t, client.DialOptions{})
}

func (s *server) dialWith(t *testing.T, opts client.DialOptions) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, s.url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestEchoThroughSocket(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	c := s.dial(t)
	ctx := testCtx(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "stty -echo; echo READY; exec cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "READY"); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Write([]byte("hello\r")); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	res, err := c.Kill(ctx, ch.Session())
	if err != nil || res.Status != "killed" {
		t.Fatalf("kill: got %+v %v", res, err)
	}
	if err := ch.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ch.Reason(); got != "killed" {
		t.Errorf("closed reason: got %q, want killed", got)
	}
}

// TestWindowBoundsUnacknowledgedOutput: a channel that is never read receives exactly the
// window and no more, while another channel on the same socket keeps echoing.
func TestWindowBoundsUnacknowledgedOutput(t *testing.T) {
	const window = 64 << 10
	s := newServer(t, ServerOptions{Window: window}, nil)
	c := s.dial(t)
	ctx := testCtx(t)
	flood, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	echo, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "stty raw -echo; echo READY; exec cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := echo.ReadUntil(ctx, "READY"); err != nil {
		t.Fatal(err)
	}
	buffered := flood.Buffered
	testutil.WaitFor(t, 10*time.Second, "the window to fill", func() bool { return buffered() >= window })
	for i := range 20 { // barriers: the socket goes on, the flood stays at the window
		tag := string(rune('a'+i)) + "!"
		if _, err := echo.Write([]byte(tag)); err != nil {
			t.Fatal(err)
		}
		if _, err := echo.ReadUntil(ctx, tag); err != nil {
			t.Fatal(err)
		}
	}
	if got := buffered(); got != window {
		t.Fatalf("unacknowledged bytes: got %d, want %d", got, window)
	}
	// Reading acknowledges; more arrives.
	buf := make([]byte, window)
	n, err := flood.Read(buf)
	if err != nil || n == 0 {
		t.Fatalf("read: %d %v", n, err)
	}
	testutil.WaitFor(t, 10*time.Second, "more output after the ack", func() bool { return flood.Offset()+int64(buffered()) > window })
}

// readToOffset reads ch until its offset reaches want, failing the test if the stream errs or
// stalls until ctx ends (then it closes c, which ends the reader).
func readToOffset(t *testing.T, ctx context.Context, c *client.Client, ch *client.Channel, want int64) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for ch.Offset() < want {
			if _, err := ch.Read(buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", ch.Offset(), want, err)
		}
	case <-ctx.Done():
		c.Close()
		<-done
		t.Fatalf("stalled after %d of %d bytes", ch.Offset(), want)
	}
}

// TestTinyWindowNeverStalls streams 4 MiB through a 1 KiB window: thousands of times the
// writer finds output and no credit and leaves the channel to the next ack. An ack that came
// between the writer's look at the credit and its marking the channel starved would be a lost
// wakeup, and the stream would stop short.
func TestTinyWindowNeverStalls(t *testing.T) {
	const total = 4 << 20
	s := newServer(t, ServerOptions{Window: 1024}, nil)
	c := s.dial(t)
	ctx := testCtx(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"sh", "-c", fmt.Sprintf("stty raw -echo; echo READY; head -c %d /dev/zero", total)}})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(len("READY\n") + total) // raw mode: no CR added
	readToOffset(t, ctx, c, ch, want)
	if got := ch.Offset(); got != want || ch.Lost() != 0 {
		t.Fatalf("got %d bytes and %d lost, want %d and none", got, ch.Lost(), want)
	}
}

// TestAckBetweenCreditCheckAndStarve drives the one interleaving TestTinyWindowNeverStalls can
// only hope for: the writer finds no credit, then, before it marks the channel starved, the
// program has printed everything and every byte in flight is acknowledged. No ack and no new
// output follow, so only the writer's second look at the credit can re-queue the channel;
// without it the stream stops at the first window.
func TestAckBetweenCreditCheckAndStarve(t *testing.T) {
	const window, total = 1024, 16 << 10
	opts := ServerOptions{Window: window}
	starving := make(chan struct{}) // the writer is in the hook: the client may read now
	var once sync.Once
	var s *server
	opts.testHookBeforeStarve = func(ch *channel) {
		// Act on the last starve only: everything printed (and the program still running, so
		// no exit wakes the channel) and the channel not queued again by a late wake-up.
		if infos := s.reg.List(principal); len(infos) != 1 || infos[0].End != total || ch.queued.Load() {
			return
		}
		once.Do(func() {
			close(starving)
			// This runs on the writer: no t.Fatal here. If the ack never came, the stream
			// stalls and the test fails below.
			for deadline := time.Now().Add(10 * time.Second); ch.credit.available() != window; {
				if time.Now().After(deadline) {
					t.Errorf("the window was not acknowledged within 10s")
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	s = newServer(t, opts, nil)
	c := s.dial(t)
	ctx := testCtx(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"sh", "-c", fmt.Sprintf("stty raw -echo; head -c %d /dev/zero; exec sleep 60", total)}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-starving:
	case <-ctx.Done():
		t.Fatal("the writer never ran out of credit")
	}
	readToOffset(t, ctx, c, ch, total)
}

// TestClientAcksADrainedReadAtOnce: a reader that drained its buffer with fewer than ackBytes
// unacknowledged and then stops reading (it waits for the exit instead) must still free that
// credit: here the program's remaining output fits the window only if those bytes are acked,
// and the exit notification follows the last byte.
func TestClientAcksADrainedReadAtOnce(t *testing.T) {
	const window = 4096 // ackBytes 1024
	s := newServer(t, ServerOptions{Window: window}, nil)
	c := s.dial(t)
	ctx := testCtx(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"sh", "-c", "stty raw -echo; head -c 500 /dev/zero; read x; head -c 4000 /dev/zero"}})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, window)
	for got := 0; got < 500; {
		n, err := ch.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if _, err := ch.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch.Exited():
	case <-ctx.Done():
		t.Fatalf("no exit: %d bytes buffered", ch.Buffered())
	}
	if got := ch.Buffered(); got != 4000 {
		t.Errorf("buffered at the exit: got %d, want 4000", got)
	}
}

// TestAttachReplyFailureUnsubscribes: a subscription whose reply could not be written is undone,
// so the session stays reapable (docs/architecture.md, invariant 3: a failure right after
// subscribing still unsubscribes).
func TestAttachReplyFailureUnsubscribes(t *testing.T) {
	var sock *websocket.Conn
	var sockMu sync.Mutex
	hookRan := make(chan struct{})
	opts := ServerOptions{}
	opts.testHookAfterSubscribe = func() {
		// The client vanishes right after the subscribe, before the reply is written.
		sockMu.Lock()
		sock.Close()
		sockMu.Unlock()
		close(hookRan)
	}
	s := newServer(t, opts, func(ws *websocket.Conn) {
		sockMu.Lock()
		sock = ws
		sockMu.Unlock()
	})
	sess, _, err := s.reg.Open(session.Spec{Argv: []string{"sleep", "60"}, Cols: 80, Rows: 24, Owner: principal}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := s.dial(t)
	ctx := testCtx(t)
	if _, _, err := c.Attach(ctx, sess.ID(), nil); err == nil {
		t.Fatal("attach succeeded over a dead socket")
	}
	<-hookRan
	testutil.WaitFor(t, 10*time.Second, "the viewer to be released", func() bool { return sess.Info().Viewers == 0 })
	since := sess.UnwatchedSince()
	if since.IsZero() {
		t.Fatal("the session was pinned as watched")
	}
	if _, ok := s.reg.Claim(sess.ID(), sess, since.Add(time.Hour), time.Minute); !ok {
		t.Fatal("the session is not reapable after the failed attach")
	}
	s.reg.Teardown(ctx, sess)
}

// TestShutdownClosesChannelsWith1001: cancelling with ErrShutdown tells every channel and
// closes the socket with 1001; the sessions are untouched by the socket's end.
func TestSocketEndDetachesButKeepsSessions(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	c := s.dial(t)
	ctx := testCtx(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.reg.Get(ch.Session(), principal)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	testutil.WaitFor(t, 10*time.Second, "the socket's viewer to go", func() bool { return sess.Info().Viewers == 0 })
	if st := sess.State(); st != session.StateRunning {
		t.Fatalf("state after the socket ended: got %v, want running", st)
	}
	c2 := s.dial(t)
	list, err := c2.List(ctx)
	if err != nil || len(list) != 1 || list[0].Session != ch.Session() {
		t.Fatalf("list: got %+v %v", list, err)
	}
}

func TestKillOfUnknownSession(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	c := s.dial(t)
	_, err := c.Kill(testCtx(t), strings.Repeat("0", 32))
	var e *proto.Error
	if !errors.As(err, &e) || e.Kind() != proto.KindUnknownSession {
		t.Fatalf("got %v, want unknown_session", err)
	}
}

// TestInputRightAfterOpenReply: a client that types as soon as it has the open's reply is
// served even when the channel is not yet published to the writer (found by muxbench's churn:
// 5 in 10,050 cycles answered unknown_channel).
func TestInputRightAfterOpenReply(t *testing.T) {
	release := make(chan struct{})
	opts := ServerOptions{}
	opts.testHookBeforeActivate = func() { <-release }
	s := newServer(t, opts, nil)
	var errMu sync.Mutex
	var serverErrs []*proto.Error
	c := s.dialWith(t, client.DialOptions{OnServerError: func(e *proto.Error) {
		errMu.Lock()
		serverErrs = append(serverErrs, e)
		errMu.Unlock()
	}})
	ctx := testCtx(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "stty raw -echo; exec cat"}})
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	if _, err := ch.Write([]byte("typed-early")); err != nil {
		close(release)
		t.Fatal(err)
	}
	if err := ch.Resize(ctx, 100, 30); err != nil {
		close(release)
		t.Fatalf("resize before the channel is published: %v", err)
	}
	// The resize's reply is the barrier: the input before it was handled.
	errMu.Lock()
	errs := serverErrs
	errMu.Unlock()
	if len(errs) != 0 {
		close(release)
		t.Fatalf("input right after the open's reply: got %v, want no error", errs[0])
	}
	close(release)
	if _, err := ch.ReadUntil(ctx, "typed-early"); err != nil {
		t.Fatal(err)
	}
}

// A client may send requests right behind initialize without waiting for its result: the server
// handles a socket's messages in order. After an initialize that failed, the next message is
// again a first message, and anything but initialize closes the socket.
func TestRequestsPipelinedBehindInitialize(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	dial := func() *websocket.Conn {
		d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}}
		ws, _, err := d.Dial(s.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.Close() })
		if err := ws.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		return ws
	}
	send := func(ws *websocket.Conn, msgs ...string) {
		for _, m := range msgs {
			if err := ws.WriteMessage(websocket.TextMessage, []byte(m)); err != nil {
				t.Fatal(err)
			}
		}
	}
	const open = `{"jsonrpc":"2.0","id":2,"method":"session.open","params":{"channel":1,"cmd":["sh","-c","printf PIPELINED; exec sleep 60"],"cols":80,"rows":24}}`

	ws := dial()
	send(ws, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, open)
	var ids []string
	var out []byte
	for len(ids) < 2 || !bytes.Contains(out, []byte("PIPELINED")) {
		typ, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("after %v and %q: %v", ids, out, err)
		}
		if typ == websocket.BinaryMessage {
			f, err := proto.ParseFrame(b)
			if err != nil || f.Type != proto.FrameOutput {
				t.Fatalf("frame %x: %v", b, err)
			}
			out = append(out, f.Payload...)
			continue
		}
		var r struct {
			ID     json.RawMessage
			Result json.RawMessage
			Error  *proto.Error
		}
		if err := json.Unmarshal(b, &r); err != nil || r.Error != nil || len(r.Result) == 0 {
			t.Fatalf("response %s: want a result", b)
		}
		ids = append(ids, string(r.ID))
	}
	if strings.Join(ids, ",") != "1,2" {
		t.Errorf("responses: got ids %v, want 1 then 2", ids)
	}

	ws = dial()
	send(ws, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"client":5}}`, open)
	_, b, err := ws.ReadMessage()
	if err != nil || !bytes.Contains(b, []byte(`"error"`)) {
		t.Fatalf("failed initialize: got %s, %v; want an error response", b, err)
	}
	_, _, err = ws.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation {
		t.Fatalf("open behind a failed initialize: got %v, want close 1008", err)
	}

	// Once the close is decided nothing starts, not even behind a valid initialize.
	c := s.dial(t)
	before, err := c.List(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	ws = dial()
	send(ws, `{"jsonrpc":"2.0","id":1,"method":"session.list","params":{}}`,
		`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}`, open)
	for {
		typ, b, err := ws.ReadMessage()
		if err != nil {
			if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation {
				t.Fatalf("behind a non-initialize first message: got %v, want close 1008", err)
			}
			break
		}
		t.Errorf("behind a non-initialize first message: got message type %d %s, want only the close", typ, b)
	}
	after, err := c.List(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("sessions: %d before, %d after; want nothing opened behind the violation", len(before), len(after))
	}
}

// DialOpen opens a session in the same round trip as initialize, and its channel uses the
// flow parameters initialize returned.
func TestDialOpen(t *testing.T) {
	s := newServer(t, ServerOptions{Window: 64 << 10}, nil)
	ctx := testCtx(t)
	c, ch, err := client.DialOpen(ctx, s.url, client.DialOptions{},
		client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "stty -echo; echo READY; exec cat"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if c.Init().Flow.Window != 64<<10 {
		t.Errorf("flow: window %d, want 65536", c.Init().Flow.Window)
	}
	if _, err := ch.ReadUntil(ctx, "READY"); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Write([]byte("pipelined\r")); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "pipelined"); err != nil {
		t.Fatal(err)
	}

	// A refused open closes the client and says why.
	_, _, err = client.DialOpen(ctx, s.url, client.DialOptions{}, client.OpenOptions{Cols: 0, Rows: 24, Cmd: []string{"true"}})
	var e *proto.Error
	if !errors.As(err, &e) {
		t.Errorf("open with 0 columns: got %v, want a JSON-RPC error", err)
	}
}
