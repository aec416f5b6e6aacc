package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/internal/testutil/wstest"
	"github.com/muxterm/muxterm/proto"
)

// A hostile server: a fake is right here, since a real gateway cannot be made to break the
// protocol. Each test's server answers initialize and session.open (with the results the test
// gives), then runs after, and answers other requests with answers[method].

const hostileSession = "0123456789abcdef0123456789abcdef"

type hostile struct {
	init    any                                        // initialize's result (default: a 64 KiB window)
	open    any                                        // session.open's result (default: offset 0)
	after   func(w *hostileWriter)                     // run after the open's result, on the writer
	run     func(w *hostileWriter)                     // run on the request test.after
	answers map[string]func(id json.RawMessage) []byte // other methods; unanswered when absent
}

// hostileWriter writes one socket's messages (one goroutine writes).
type hostileWriter struct {
	ws *websocket.Conn
}

func (w *hostileWriter) text(s string) error {
	return w.ws.WriteMessage(websocket.TextMessage, []byte(s))
}
func (w *hostileWriter) binary(b []byte) error {
	return w.ws.WriteMessage(websocket.BinaryMessage, b)
}
func (w *hostileWriter) notify(method string, params any) error {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
	return w.ws.WriteMessage(websocket.TextMessage, b)
}
func (w *hostileWriter) output(ch uint32, p []byte) error {
	return w.binary(proto.AppendFrame(nil, proto.FrameOutput, ch, p))
}

func goodInit(window int) proto.InitializeResult {
	return proto.InitializeResult{Protocol: proto.Subprotocol, Flow: proto.Flow{Window: window, AckBytes: window / 4}}
}

func serveHostile(t *testing.T, h hostile) string {
	t.Helper()
	if h.init == nil {
		h.init = goodInit(64 << 10)
	}
	if h.open == nil {
		h.open = proto.OpenResult{Session: hostileSession, Channel: 1, Pid: 7}
	}
	release := make(chan struct{})
	return wstest.Serve(t, func(ws *websocket.Conn, _ *http.Request) {
		defer ws.Close()
		type request struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		reqs := make(chan request)
		go func() {
			defer close(reqs)
			for {
				typ, b, err := ws.ReadMessage()
				if err != nil {
					return
				}
				var r request
				if typ != websocket.TextMessage || json.Unmarshal(b, &r) != nil {
					continue // acks
				}
				select {
				case reqs <- r:
				case <-release:
					return
				}
			}
		}()
		w := &hostileWriter{ws: ws}
		for {
			var r request
			var ok bool
			select {
			case r, ok = <-reqs:
				if !ok {
					return
				}
			case <-release:
				return
			}
			switch r.Method {
			case "initialize":
				_ = ws.WriteMessage(websocket.TextMessage, proto.MarshalResponse(r.ID, h.init, nil))
			case "session.open":
				_ = ws.WriteMessage(websocket.TextMessage, proto.MarshalResponse(r.ID, h.open, nil))
				if h.after != nil {
					h.after(w)
				}
			case "test.after":
				if h.run != nil {
					h.run(w)
				}
			default:
				if f := h.answers[r.Method]; f != nil {
					_ = ws.WriteMessage(websocket.TextMessage, f(r.ID))
				}
			}
		}
	}, func() { close(release) })
}

// hostileOpen opens a session on a hostile server and returns the client and the channel; the
// server runs h.after once DialOpen has returned (when the request "test.after" arrives).
func hostileOpen(t *testing.T, h hostile, opts DialOptions) (*Client, *Channel) {
	t.Helper()
	after := h.after
	h.after = nil
	if h.answers == nil {
		h.answers = map[string]func(json.RawMessage) []byte{}
	}
	h.answers["test.after"] = func(json.RawMessage) []byte { return nil }
	h.run = after
	c, ch, err := DialOpen(testCtx(t), serveHostile(t, h), opts, OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatalf("DialOpen: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	l, err := c.link(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.sendOn(l, "test.after", nil, nil); err != nil { // never answered
		t.Fatal(err)
	}
	return c, ch
}

// drainUntilEnd reads ch until it fails, within 5 s (a Read that returns 0, nil for ever, the
// spin a bad gap caused, fails the test), and returns the error.
func drainUntilEnd(t *testing.T, ch *Channel) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	buf := make([]byte, 64<<10)
	for zeros := 0; ; {
		n, err := ch.ReadContext(ctx, buf)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatal("the channel did not end within 5 s")
			}
			return err
		}
		if n == 0 {
			if zeros++; zeros > 1000 {
				t.Fatal("Read returns 0, nil over and over")
			}
		}
	}
}

// wantViolation checks that the client ended with ErrProtocol and that err (a Read's or a
// call's) says so too.
func wantViolation(t *testing.T, c *Client, err error, what string) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the client did not end", what)
	}
	if !errors.Is(c.Err(), ErrProtocol) {
		t.Errorf("%s: Err: got %v, want ErrProtocol", what, c.Err())
	}
	if !errors.Is(err, ErrProtocol) {
		t.Errorf("%s: got %v, want ErrProtocol", what, err)
	}
}

// A session.gap that is not positive, or takes the stream past 2^53, ends the connection: Read
// returns the violation instead of 0, nil for ever.
func TestHostileGap(t *testing.T) {
	for _, lost := range []any{-1, 0, int64(1) << 53, int64(math.MaxInt64), "7", 1.5} {
		t.Run(fmt.Sprint(lost), func(t *testing.T) {
			c, ch := hostileOpen(t, hostile{after: func(w *hostileWriter) {
				_ = w.output(1, []byte("ok"))
				_ = w.notify("session.gap", map[string]any{"channel": 1, "lost": lost})
			}}, DialOptions{})
			err := drainUntilEnd(t, ch)
			wantViolation(t, c, err, "Read after the gap")
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("Read: got %v, want io.ErrUnexpectedEOF too", err)
			}
		})
	}
}

// A server that ignores the window cannot make a client that does not read buffer more than it:
// the byte past the window ends the connection.
func TestHostileWindowFlood(t *testing.T) {
	const window = 64 << 10
	sent := make(chan int, 1)
	c, ch := hostileOpen(t, hostile{init: goodInit(window), after: func(w *hostileWriter) {
		chunk := bytes.Repeat([]byte("x"), proto.MaxOutputPayload)
		n := 0
		for n < 200<<20 && w.output(1, chunk) == nil {
			n += len(chunk)
		}
		sent <- n
	}}, DialOptions{})
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not end")
	}
	if got := ch.Buffered(); got > window {
		t.Errorf("buffered %d bytes, want at most the window (%d)", got, window)
	}
	t.Logf("FIGURE window flood: buffered %d bytes of a %d-byte window; the server wrote %d bytes before the close", ch.Buffered(), window, <-sent)
	wantViolation(t, c, drainUntilEnd(t, ch), "Read after the flood")
}

// A server that fills the window exactly is not a violation (the real gateway's tests, with
// small windows, check that acknowledged bytes make room).
func TestHostileWindowKeptIsFine(t *testing.T) {
	const window = 8 << 10
	url := serveHostile(t, hostile{init: goodInit(window), after: func(w *hostileWriter) {
		_ = w.output(1, bytes.Repeat([]byte("a"), window))
	}})
	c, ch, err := DialOpen(testCtx(t), url, DialOptions{}, OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := readAll(testCtx(t), t, ch, window); len(got) != window {
		t.Fatalf("read %d", len(got))
	}
	if err := c.Err(); err != nil {
		t.Fatalf("a full window ended the client: %v", err)
	}
}

// Messages larger than MaxMessageBytes, and binary messages longer than an output frame, end
// the connection before they are read into memory.
func TestHostileHugeMessages(t *testing.T) {
	const size = 40 << 20
	for _, tc := range []struct {
		name string
		typ  int
	}{{"text", websocket.TextMessage}, {"binary", websocket.BinaryMessage}} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			c, ch := hostileOpen(t, hostile{after: func(w *hostileWriter) {
				// Streamed from one small buffer: the server's side allocates nothing.
				mw, err := w.ws.NextWriter(tc.typ)
				if err != nil {
					return
				}
				chunk := bytes.Repeat([]byte("y"), 64<<10)
				if tc.typ == websocket.BinaryMessage {
					_, _ = mw.Write(proto.AppendFrame(nil, proto.FrameOutput, 1, nil))
				} else {
					_, _ = mw.Write([]byte(`{"jsonrpc":"2.0","method":"session.exit","params":{"x":"`))
				}
				for n := 0; n < size; n += len(chunk) {
					if _, err := mw.Write(chunk); err != nil {
						return
					}
				}
				_ = mw.Close()
			}}, DialOptions{})
			err := drainUntilEnd(t, ch)
			runtime.ReadMemStats(&after)
			wantViolation(t, c, err, "Read after a 40 MiB message")
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("FIGURE 40 MiB %s message: the test process allocated %.1f MiB in all", tc.name, float64(alloc)/(1<<20))
			if alloc > 40<<20 {
				t.Errorf("allocated %d bytes for a refused message, want less than 40 MiB", alloc)
			}
		})
	}
}

// Truncated and malformed messages, frames the server never sends, and known notifications
// and results with wrongly typed members end the connection with ErrProtocol.
func TestHostileMalformed(t *testing.T) {
	for _, tc := range []struct {
		name string
		send func(w *hostileWriter)
	}{
		{"truncated text", func(w *hostileWriter) { _ = w.text(`{"jsonrpc":"2.0","method":"session.exit","par`) }},
		{"not an object", func(w *hostileWriter) { _ = w.text(`[1,2]`) }},
		{"short frame", func(w *hostileWriter) { _ = w.binary([]byte{1, 0, 0}) }},
		{"channel 0", func(w *hostileWriter) { _ = w.output(0, []byte("x")) }},
		{"input frame from the server", func(w *hostileWriter) {
			_ = w.binary(proto.AppendFrame(nil, proto.FrameInput, 1, []byte("x")))
		}},
		{"unknown frame type", func(w *hostileWriter) { _ = w.binary([]byte{9, 0, 0, 0, 1}) }},
		{"output frame over 32 KiB", func(w *hostileWriter) { _ = w.output(1, make([]byte, proto.MaxOutputPayload+1)) }},
		{"session.exit code as a string", func(w *hostileWriter) {
			_ = w.notify("session.exit", map[string]any{"channel": 1, "code": "0"})
		}},
		{"session.closed reason as a number", func(w *hostileWriter) {
			_ = w.notify("session.closed", map[string]any{"channel": 1, "reason": 3})
		}},
		{"session.size of 0 columns", func(w *hostileWriter) {
			_ = w.notify("session.size", map[string]any{"channel": 1, "cols": 0, "rows": 24})
		}},
		{"params as a string", func(w *hostileWriter) { _ = w.text(`{"jsonrpc":"2.0","method":"session.gap","params":"x"}`) }},
		{"error as a string", func(w *hostileWriter) { _ = w.text(`{"jsonrpc":"2.0","id":null,"error":"x"}`) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ch := hostileOpen(t, hostile{after: tc.send}, DialOptions{})
			wantViolation(t, c, drainUntilEnd(t, ch), "Read")
		})
	}
}

// A notification the client does not know, or for a channel it does not have, is not a
// violation: a newer server may send more.
func TestHostileUnknownNotificationIsFine(t *testing.T) {
	c, ch := hostileOpen(t, hostile{after: func(w *hostileWriter) {
		_ = w.notify("session.future", "anything")
		_ = w.notify("session.gap", map[string]any{"channel": 9, "lost": 5})
		_ = w.output(1, []byte("still here"))
	}}, DialOptions{})
	if _, err := ch.ReadUntil(testCtx(t), "still here"); err != nil || c.Err() != nil {
		t.Fatalf("read: %v, client: %v", err, c.Err())
	}
}

// Results of the wrong type or range fail the call and end the connection with ErrProtocol.
func TestHostileResults(t *testing.T) {
	resp := func(result string) func(id json.RawMessage) []byte {
		return func(id json.RawMessage) []byte {
			return []byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":` + result + `}`)
		}
	}
	for _, tc := range []struct {
		name, method, result string
		call                 func(ctx context.Context, c *Client) error
	}{
		{"list entries of the wrong type", "session.list", `{"sessions":[1,"x"]}`, func(ctx context.Context, c *Client) error {
			_, err := c.List(ctx)
			return err
		}},
		{"list entry with a numeric name", "session.list", `{"sessions":[{"session":"s","name":7}]}`, func(ctx context.Context, c *Client) error {
			_, err := c.List(ctx)
			return err
		}},
		{"list entry with a negative end", "session.list", `{"sessions":[{"session":"s","end":-5}]}`, func(ctx context.Context, c *Client) error {
			_, err := c.List(ctx)
			return err
		}},
		{"kill result as an array", "session.kill", `[]`, func(ctx context.Context, c *Client) error {
			_, err := c.Kill(ctx, hostileSession)
			return err
		}},
		{"attach offset past end", "session.attach", `{"session":"s","channel":2,"offset":10,"live":5,"end":5}`, func(ctx context.Context, c *Client) error {
			_, _, err := c.Attach(ctx, "s", nil)
			return err
		}},
		{"attach offset before from", "session.attach", `{"session":"s","channel":2,"offset":3,"live":9,"end":9}`, func(ctx context.Context, c *Client) error {
			from := int64(5)
			_, _, err := c.Attach(ctx, "s", &from)
			return err
		}},
		{"attach offset past 2^53", "session.attach", `{"session":"s","channel":2,"offset":9007199254740993,"live":9007199254740993,"end":9007199254740993}`, func(ctx context.Context, c *Client) error {
			_, _, err := c.Attach(ctx, "s", nil)
			return err
		}},
		{"resize result with string columns", "session.resize", `{"cols":"80","rows":24}`, func(ctx context.Context, c *Client) error {
			c.mu.Lock()
			ch := c.channels[1]
			c.mu.Unlock()
			return ch.Resize(ctx, 80, 24)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := hostileOpen(t, hostile{answers: map[string]func(json.RawMessage) []byte{tc.method: resp(tc.result)}}, DialOptions{})
			wantViolation(t, c, tc.call(testCtx(t), c), tc.name)
		})
	}
}

// Results of initialize and session.open out of range fail the dial.
func TestHostileDialResults(t *testing.T) {
	for _, tc := range []struct {
		name       string
		init, open any
	}{
		{"window over 64 MiB", goodInit(1 << 30), nil},
		{"negative window", goodInit(-1), nil},
		{"init as a string", "muxterm", nil},
		{"open without a session", nil, map[string]any{"channel": 1}},
		{"open offset negative", nil, map[string]any{"session": hostileSession, "offset": -1}},
		{"open offset a string", nil, map[string]any{"session": hostileSession, "offset": "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := DialOpen(testCtx(t), serveHostile(t, hostile{init: tc.init, open: tc.open}), DialOptions{},
				OpenOptions{Cols: 80, Rows: 24})
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("DialOpen: got %v, want ErrProtocol", err)
			}
		})
	}
}

// A violation is not redialled, even with Reconnect: the server would break the protocol again.
func TestHostileNotRedialled(t *testing.T) {
	c, ch := hostileOpen(t, hostile{after: func(w *hostileWriter) {
		_ = w.notify("session.gap", map[string]any{"channel": 1, "lost": -1})
	}}, DialOptions{Reconnect: &ReconnectOptions{Within: 5 * time.Second}})
	err := drainUntilEnd(t, ch)
	wantViolation(t, c, err, "Read")
	if strings.Contains(c.Err().Error(), "reconnect") {
		t.Errorf("Err: %v, want no reconnect", c.Err())
	}
}
