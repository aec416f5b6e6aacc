package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/internal/leakcheck"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/internal/testutil/wstest"
	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// TestMain fails the package on a leaked goroutine, file descriptor or child process.
func TestMain(m *testing.M) {
	leakcheck.Main(m, leakcheck.Options{FDs: true, Children: true})
}

// gateway is mux.Serve behind a loopback HTTP server with a real registry: the server side of
// the protocol, as the binary runs it, with a hook on each accepted socket.
type gateway struct {
	reg *session.Registry
	url string

	mu      sync.Mutex
	sockets []*websocket.Conn // every socket accepted, in order
}

func newGateway(t testing.TB, opts mux.ServerOptions) *gateway {
	t.Helper()
	g := &gateway{reg: session.NewRegistry(session.Options{Shell: "/bin/sh", KillGrace: 100 * time.Millisecond,
		ResumeHold: 10 * time.Second}, nil)}
	testutil.ShutdownAtEnd(t, "registry", g.reg) // after the sockets' Serve calls returned
	ctx, cancel := context.WithCancelCause(context.Background())
	g.url = wstest.Serve(t, func(ws *websocket.Conn, _ *http.Request) {
		g.mu.Lock()
		g.sockets = append(g.sockets, ws)
		g.mu.Unlock()
		o := opts
		o.Registry, o.Principal = g.reg, "tester"
		o.AllowCmd = func([]string) bool { return true }
		_ = mux.Serve(ctx, ws, o)
	}, func() { cancel(mux.ErrShutdown) })
	return g
}

// drop cuts the TCP connection under the n-th accepted socket, as a network failure would: no
// close frame, so the client sees an abnormal end (1006).
func (g *gateway) drop(t *testing.T, n int) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if n >= len(g.sockets) {
		t.Fatalf("socket %d: only %d accepted", n, len(g.sockets))
	}
	if err := g.sockets[n].NetConn().Close(); err != nil {
		t.Fatalf("drop socket %d: %v", n, err)
	}
}

func (g *gateway) accepted() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sockets)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, url string, opts DialOptions) *Client {
	t.Helper()
	c, err := Dial(testCtx(t), url, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// seqOutput is what `seq 1 n` prints through a PTY (onlcr turns each \n into \r\n).
func seqOutput(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\r\n", i)
	}
	return b.Bytes()
}

// readAll reads ch until it has n bytes or ctx ends.
func readAll(ctx context.Context, t *testing.T, ch *Channel, n int) []byte {
	t.Helper()
	out := make([]byte, 0, n)
	buf := make([]byte, 4096)
	for len(out) < n {
		m, err := ch.ReadContext(ctx, buf)
		out = append(out, buf[:m]...)
		if err != nil {
			t.Fatalf("read after %d of %d bytes: %v", len(out), n, err)
		}
	}
	return out
}

// The stream goes on byte-exact across two dropped connections: the client re-attaches from
// the offset it received up to, keeps what it had received and not yet read, and acknowledges
// only to the binding that sent the bytes (a wrong ack would be a bad_frame and stall).
func TestReconnectResumesByteExact(t *testing.T) {
	g := newGateway(t, mux.ServerOptions{Window: 16 << 10})
	var evMu sync.Mutex
	var events []ReconnectEvent
	c := dial(t, g.url, DialOptions{Reconnect: &ReconnectOptions{OnEvent: func(e ReconnectEvent) {
		evMu.Lock()
		events = append(events, e)
		evMu.Unlock()
	}}, OnServerError: func(e *proto.Error) { t.Errorf("server error: %v", e) }})
	ctx := testCtx(t)
	const n = 30000
	want := seqOutput(n)
	ch, err := c.Open(ctx, OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", fmt.Sprintf("stty -echo; echo READY; read go; seq 1 %d; read end", n)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "READY\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	got := readAll(ctx, t, ch, len(want)/3)
	g.drop(t, 0)
	got = append(got, readAll(ctx, t, ch, len(want)/3)...)
	g.drop(t, 1)
	got = append(got, readAll(ctx, t, ch, len(want)-len(got))...)
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		t.Fatalf("stream differs at byte %d of %d: got %q, want %q", i, len(want), tail(got[:min(i+40, len(got))]), tail(want[:i+40]))
	}
	if ch.Lost() != 0 {
		t.Errorf("lost: got %d, want 0", ch.Lost())
	}
	// The channel still takes input on the third socket.
	if _, err := ch.Write([]byte("end\n")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosedCtx(ctx, t, ch.Exited(), "no exit after the last input")
	evMu.Lock()
	defer evMu.Unlock()
	if len(events) != 4 || events[0].Resumed || !events[1].Resumed || events[2].Resumed || !events[3].Resumed {
		t.Errorf("events: got %+v, want drop, resume, drop, resume", events)
	}
	if got := g.accepted(); got != 3 {
		t.Errorf("sockets accepted: got %d, want 3", got)
	}
}

// A session killed while the client was away ends its channel at the resume, with the error
// saying so; the client and its other channels go on.
func TestReconnectEndsChannelOfGoneSession(t *testing.T) {
	g := newGateway(t, mux.ServerOptions{})
	var gone, kept *Channel
	resumed := make(chan ReconnectEvent, 1)
	c := dial(t, g.url, DialOptions{Reconnect: &ReconnectOptions{OnEvent: func(e ReconnectEvent) {
		if !e.Resumed {
			// Runs before the first attempt: the session is gone by the time it re-attaches.
			if _, err := g.reg.Kill(context.Background(), gone.Session(), "tester"); err != nil {
				t.Errorf("kill while away: %v", err)
			}
			return
		}
		resumed <- e
	}}})
	ctx := testCtx(t)
	var err error
	if gone, err = c.Open(ctx, OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"cat"}}); err != nil {
		t.Fatal(err)
	}
	if kept, err = c.Open(ctx, OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "stty raw -echo; exec cat"}}); err != nil {
		t.Fatal(err)
	}
	g.drop(t, 0)
	var ev ReconnectEvent
	select {
	case ev = <-resumed:
	case <-ctx.Done():
		t.Fatal("no resume")
	}
	if len(ev.Ended) != 1 || ev.Ended[0] != gone.ID {
		t.Errorf("ended at the resume: got %v, want [%d]", ev.Ended, gone.ID)
	}
	<-gone.Closed()
	if _, err := gone.Read(make([]byte, 1)); !strings.Contains(fmt.Sprint(err), "resume session") {
		t.Errorf("read of the gone session's channel: got %v, want the resume's error", err)
	}
	if _, err := kept.Write([]byte("still-here")); err != nil {
		t.Fatal(err)
	}
	if _, err := kept.ReadUntil(ctx, "still-here"); err != nil {
		t.Fatal(err)
	}
}

// Without Reconnect a drop ends the client, every channel, and every call in flight.
func TestDropWithoutReconnectEndsClient(t *testing.T) {
	g := newGateway(t, mux.ServerOptions{})
	c := dial(t, g.url, DialOptions{})
	ctx := testCtx(t)
	ch, err := c.Open(ctx, OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	g.drop(t, 0)
	<-c.Done()
	if _, err := ch.Read(make([]byte, 1)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read after the drop: got %v, want io.ErrUnexpectedEOF", err)
	}
	if err := c.Call(ctx, "session.list", nil, nil); err == nil {
		t.Error("a call after the drop succeeded")
	}
	if c.Err() == nil || errors.Is(c.Err(), ErrClosed) {
		t.Errorf("Err after a drop: got %v, want the connection's end", c.Err())
	}
}

// Close can be called twice; both return nil when Close ended the client, and Err says so.
func TestCloseIdempotent(t *testing.T) {
	g := newGateway(t, mux.ServerOptions{})
	c, err := Dial(testCtx(t), g.url, DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("first Close: got %v, want nil", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
	if !errors.Is(c.Err(), ErrClosed) {
		t.Errorf("Err: got %v, want ErrClosed", c.Err())
	}
	if _, err := c.List(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("List after Close: got %v, want ErrClosed", err)
	}
}

// silentServer upgrades, answers initialize, and then never reads again: its socket's buffers
// fill and a client's write can only time out.
func silentServer(t *testing.T, afterInit func(ws *websocket.Conn)) string {
	t.Helper()
	release := make(chan struct{})
	return wstest.Serve(t, func(ws *websocket.Conn, _ *http.Request) {
		defer ws.Close()
		_, b, err := ws.ReadMessage()
		if err != nil {
			return
		}
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(b, &req)
		_ = ws.WriteMessage(websocket.TextMessage, proto.MarshalResponse(req.ID, proto.InitializeResult{Protocol: proto.Subprotocol}, nil))
		if afterInit != nil {
			afterInit(ws)
		}
		<-release
	}, func() { close(release) })
}

// A peer that stops reading cannot block a writer for ever: the write fails after WriteTimeout
// and ends the client.
func TestWriteTimesOut(t *testing.T) {
	url := silentServer(t, nil)
	c := dial(t, url, DialOptions{WriteTimeout: 300 * time.Millisecond,
		Dialer: &websocket.Dialer{NetDialContext: smallBuffers}})
	ch := c.newChannel() // a channel number is all Write needs
	chunk := bytes.Repeat([]byte("x"), 60<<10)
	var err error
	for range 1000 {
		if _, err = ch.Write(chunk); err != nil {
			break
		}
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("write to a peer that never reads: got %v, want a timeout", err)
	}
	<-c.Done()
}

// smallBuffers dials with small socket buffers, so a peer that does not read blocks writes soon.
func smallBuffers(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(16 << 10)
	}
	return conn, err
}

// A text message over MaxMessageBytes ends the client instead of being read into memory.
func TestMaxMessageBytes(t *testing.T) {
	url := silentServer(t, func(ws *websocket.Conn) {
		if _, _, err := ws.ReadMessage(); err != nil { // the client's next request
			return
		}
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","method":"x","params":"`+strings.Repeat("y", 64<<10)+`"}`))
	})
	c := dial(t, url, DialOptions{MaxMessageBytes: 4 << 10})
	if err := c.Call(testCtx(t), "session.list", nil, nil); !errors.Is(err, ErrConnectionLost) || !errors.Is(err, websocket.ErrReadLimit) {
		t.Errorf("call answered by an oversize message: got %v, want ErrConnectionLost and websocket.ErrReadLimit", err)
	}
	<-c.Done()
	if !errors.Is(c.Err(), websocket.ErrReadLimit) {
		t.Errorf("Err: got %v, want websocket.ErrReadLimit", c.Err())
	}
}

// ReadContext gives up when its ctx ends and leaves the channel usable.
func TestReadContextKeepsChannel(t *testing.T) {
	g := newGateway(t, mux.ServerOptions{})
	c := dial(t, g.url, DialOptions{})
	ctx := testCtx(t)
	ch, err := c.Open(ctx, OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "stty raw -echo; exec cat"}})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := ch.ReadContext(short, make([]byte, 10)); !errors.Is(err, context.Canceled) {
		t.Fatalf("ReadContext with an ended ctx: got %v, want context.Canceled", err)
	}
	if _, err := ch.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "after"); err != nil {
		t.Fatalf("the channel after a given-up read: %v", err)
	}
}

// Input larger than limits.maxInputBytes is split into frames the gateway accepts, in order.
func TestWriteSplitsLargeInput(t *testing.T) {
	g := newGateway(t, mux.ServerOptions{MaxInputBytes: 1 << 10})
	c := dial(t, g.url, DialOptions{OnServerError: func(e *proto.Error) { t.Errorf("server error: %v", e) }})
	ctx := testCtx(t)
	ch, err := c.Open(ctx, OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "stty raw -echo; echo READY; exec cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "READY\n"); err != nil {
		t.Fatal(err)
	}
	in := bytes.Repeat([]byte("0123456789abcdef"), 512) // 8 KiB: 9 frames at 1 KiB minus the header
	if n, err := ch.Write(in); err != nil || n != len(in) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if got := readAll(ctx, t, ch, len(in)); !bytes.Equal(got, in) {
		t.Errorf("echo of a split input differs")
	}
}

// DialOpen opens a session in the same round trip as initialize, and the channel acknowledges
// with the flow parameters initialize returned.
func TestDialOpen(t *testing.T) {
	g := newGateway(t, mux.ServerOptions{Window: 64 << 10})
	ctx := testCtx(t)
	c, ch, err := DialOpen(ctx, g.url, DialOptions{}, OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"sh", "-c", "stty -echo; echo READY; exec cat"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if got := c.Init().Flow; got.Window != 64<<10 || c.ackEvery() != got.AckBytes {
		t.Errorf("flow: window %d, acks every %d; want 65536 and ackBytes %d", got.Window, c.ackEvery(), got.AckBytes)
	}
	if _, err := ch.ReadUntil(ctx, "READY"); err != nil {
		t.Fatal(err)
	}
}

// scriptedServer answers initialize, then hands every later request to the test: it reads one
// request from reqs' sender and writes what the test sends on replies.
func scriptedServer(t *testing.T) (url string, reqs <-chan map[string]any, replies chan<- []byte) {
	t.Helper()
	reqCh := make(chan map[string]any)
	repCh := make(chan []byte)
	url = silentServer(t, func(ws *websocket.Conn) {
		go func() {
			for b := range repCh {
				if ws.WriteMessage(websocket.TextMessage, b) != nil {
					return
				}
			}
		}()
		for {
			_, b, err := ws.ReadMessage()
			if err != nil {
				close(reqCh)
				return
			}
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			reqCh <- m
		}
	})
	t.Cleanup(func() { close(repCh) })
	return url, reqCh, repCh
}

// dialOpenAsync runs DialOpen of an 80x24 shell at url in a goroutine; its error comes on the
// channel (a client it returned is closed).
func dialOpenAsync(ctx context.Context, url string) <-chan error {
	errc := make(chan error, 1)
	go func() {
		c, _, err := DialOpen(ctx, url, DialOptions{}, OpenOptions{Cols: 80, Rows: 24})
		if err == nil {
			c.Close()
		}
		errc <- err
	}()
	return errc
}

// nextRequest is the next request scriptedServer read, failing t after 10 s without one.
func nextRequest(t *testing.T, reqs <-chan map[string]any) map[string]any {
	t.Helper()
	select {
	case m, ok := <-reqs:
		if !ok {
			t.Fatal("the server's socket ended")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no request")
	}
	return nil
}

// An open or attach whose caller stopped waiting is undone when its result comes after all:
// the session the gateway opened is killed, the binding it made is detached, and the channel
// number is not reused meanwhile.
func TestGivenUpBindingIsUndone(t *testing.T) {
	url, reqs, replies := scriptedServer(t)
	c := dial(t, url, DialOptions{})
	next := func() map[string]any { return nextRequest(t, reqs) }
	for _, tc := range []struct {
		method, undo string
		do           func(ctx context.Context) error
		result       string
	}{
		{"session.open", "session.kill", func(ctx context.Context) error {
			_, err := c.Open(ctx, OpenOptions{Cols: 80, Rows: 24})
			return err
		}, `{"session":"%s","channel":%v,"pid":1,"offset":0,"live":0}`},
		{"session.attach", "session.detach", func(ctx context.Context) error {
			_, _, err := c.Attach(ctx, strings.Repeat("ab", 16), nil)
			return err
		}, `{"session":"%s","channel":%v,"offset":0,"live":0,"lost":0,"end":0,"pid":1,"cols":80,"rows":24,"exit":null}`},
	} {
		t.Run(tc.method, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- tc.do(ctx) }()
			req := next()
			if req["method"] != tc.method {
				t.Fatalf("request: got %v, want %s", req["method"], tc.method)
			}
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("%s after cancel: got %v, want context.Canceled", tc.method, err)
			}
			params := req["params"].(map[string]any)
			sid := strings.Repeat("cd", 16)
			replies <- []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":`+tc.result+`}`, req["id"], sid, params["channel"]))
			undo := next()
			if undo["method"] != tc.undo {
				t.Fatalf("after the late result: got %v, want %s", undo["method"], tc.undo)
			}
			up := undo["params"].(map[string]any)
			if tc.undo == "session.kill" && up["session"] != sid {
				t.Errorf("kill of session %v, want %s", up["session"], sid)
			}
			if tc.undo == "session.detach" && up["channel"] != params["channel"] {
				t.Errorf("detach of channel %v, want %v", up["channel"], params["channel"])
			}
			// Until the undo is answered, the number stays reserved.
			c.mu.Lock()
			_, reserved := c.channels[uint32(params["channel"].(float64))]
			c.mu.Unlock()
			if !reserved {
				t.Errorf("channel %v was freed before its binding was undone", params["channel"])
			}
			replies <- []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{}}`, undo["id"]))
		})
	}
}

// TestManualAck: with DialOptions.ManualAck, Read acknowledges nothing, so a program that prints
// without end fills exactly one window; Channel.Ack(n) lets exactly n more bytes come. SetNotify
// is called as output arrives.
func TestManualAck(t *testing.T) {
	const window = 4096
	g := newGateway(t, mux.ServerOptions{Window: window})
	c := dial(t, g.url, DialOptions{ManualAck: true})
	ctx := testCtx(t)
	ch, err := c.Open(ctx, OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "exec yes"}})
	if err != nil {
		t.Fatal(err)
	}
	wake := make(chan struct{}, 1)
	ch.SetNotify(func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	got := 0
	buf := make([]byte, 1024)
	readUntil := func(total int) {
		t.Helper()
		for got < total {
			if ch.Buffered() == 0 {
				select {
				case <-wake:
				case <-ctx.Done():
					t.Fatalf("read %d bytes, want %d: %v", got, total, ctx.Err())
				}
				continue
			}
			n, err := ch.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		if got != total {
			t.Fatalf("read %d bytes, want exactly %d", got, total)
		}
	}
	readUntil(window)
	if _, err := c.List(ctx); err != nil { // a round trip: the server wrote what it could
		t.Fatal(err)
	}
	if n := ch.Buffered(); n != 0 {
		t.Fatalf("without an ack: %d more bytes arrived beyond the window", n)
	}
	if err := ch.Ack(1000); err != nil {
		t.Fatal(err)
	}
	readUntil(window + 1000)
	if _, err := c.List(ctx); err != nil {
		t.Fatal(err)
	}
	if n := ch.Buffered(); n != 0 {
		t.Fatalf("after Ack(1000): %d bytes beyond them arrived", n)
	}
}

// TestManualAckWithReconnectRefused: the two options cannot be combined (after a reconnect the
// caller's acks may count bytes of the binding before), and Dial and DialOpen say so before
// they dial: the error is the options', not that nothing listens at the address.
func TestManualAckWithReconnectRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "ws://" + l.Addr().String() + "/ws"
	l.Close()
	opts := DialOptions{ManualAck: true, Reconnect: &ReconnectOptions{}}
	ctx := testCtx(t)
	want := "ManualAck and Reconnect cannot be combined"
	if c, err := Dial(ctx, url, opts); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Dial: client %v, err %v; want %q", c, err, want)
	}
	if c, ch, err := DialOpen(ctx, url, opts, OpenOptions{Cols: 80, Rows: 24}); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("DialOpen: client %v, channel %v, err %v; want %q", c, ch, err, want)
	}
}

// A DialOpen whose caller gives up after session.open went out leaves no session running: the
// open's result, come after all, is followed by a session.kill of what it started, answered
// before DialOpen returns the caller's error.
func TestDialOpenGivenUpKillsItsSession(t *testing.T) {
	url, reqs, replies := scriptedServer(t)
	next := func() map[string]any { return nextRequest(t, reqs) }
	ctx, cancel := context.WithCancel(context.Background())
	errc := dialOpenAsync(ctx, url)
	open := next()
	if open["method"] != "session.open" {
		t.Fatalf("request: got %v, want session.open", open["method"])
	}
	cancel()
	sid := strings.Repeat("ef", 16)
	params := open["params"].(map[string]any)
	replies <- []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{"session":"%s","channel":%v,"pid":1,"offset":0,"live":0}}`,
		open["id"], sid, params["channel"]))
	kill := next()
	if kill["method"] != "session.kill" || kill["params"].(map[string]any)["session"] != sid {
		t.Fatalf("after the late result: %v %v, want session.kill of %s", kill["method"], kill["params"], sid)
	}
	select {
	case err := <-errc:
		t.Fatalf("DialOpen returned (%v) before its kill was answered", err)
	default:
	}
	replies <- []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{"survivors":0}}`, kill["id"]))
	if err := <-errc; err == nil || err.Error() != "session.open: context canceled" {
		t.Fatalf("DialOpen after cancel: %v, want only the caller's cancel (the kill answered)", err)
	}
}

// A DialOpen given up whose open is never answered returns within the grace, with the caller's
// error and one that says no answer came, not the grace's own cancellation.
func TestDialOpenGivenUpUnanswered(t *testing.T) {
	url, reqs, _ := scriptedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	errc := dialOpenAsync(ctx, url)
	if open := nextRequest(t, reqs); open["method"] != "session.open" {
		t.Fatalf("request: got %v, want session.open", open["method"])
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "no answer within 2s after the caller gave up") {
			t.Fatalf("DialOpen: %v; want the caller's cancel and no answer within the grace", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DialOpen did not return within 10 s of its cancel (grace 2 s)")
	}
}

// A DialOpen whose caller gives up while the server has not even answered the upgrade ends at
// once (here: a listener that accepts and never answers).
func TestDialOpenGivenUpWhileConnecting(t *testing.T) {
	addr, accepted := testutil.MuteListener(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errc := dialOpenAsync(ctx, "ws://"+addr+"/ws")
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("DialOpen did not connect")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("DialOpen after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DialOpen did not end within 10 s of its ctx's cancel, while the upgrade hung")
	}
}
