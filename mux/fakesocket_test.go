package mux

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/session"

	"github.com/muxterm/muxterm/internal/testutil"
)

// fakeSocket is a Socket in memory, for timer tests inside a synctest bubble (no real socket
// or PTY may be used there): its read deadline runs on the bubble's fake clock. Like gorilla's
// connection, it hands a pong to the pong handler from within NextReader, and once a read
// has failed every later read fails.
type fakeSocket struct {
	mu          sync.Mutex // guards the fields below
	answerPings bool       // queue a pong for every ping written
	in          []fakeFrame
	deadline    time.Time
	pong        func(string) error
	readErr     error // the first read error, returned ever after
	closed      bool
	text        [][]byte        // text messages written
	pings       []time.Duration // when each ping was written, since start
	start       time.Time
	changed     chan struct{} // capacity 1: the input, the deadline or closed changed
}

type fakeFrame struct {
	typ  int
	data []byte
}

func newFakeSocket(answerPings bool) *fakeSocket {
	return &fakeSocket{answerPings: answerPings, start: time.Now(), changed: make(chan struct{}, 1)}
}

func (f *fakeSocket) poke() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// send queues a message from the client.
func (f *fakeSocket) send(typ int, data string) {
	f.mu.Lock()
	f.in = append(f.in, fakeFrame{typ, []byte(data)})
	f.mu.Unlock()
	f.poke()
}

func (f *fakeSocket) NextReader() (int, io.Reader, error) {
	for {
		f.mu.Lock()
		switch {
		case f.readErr != nil:
		case f.closed:
			f.readErr = net.ErrClosed
		case len(f.in) > 0:
			m := f.in[0]
			f.in = f.in[1:]
			pong := f.pong
			f.mu.Unlock()
			if m.typ == websocket.PongMessage {
				if pong != nil {
					if err := pong(string(m.data)); err != nil {
						return 0, nil, err
					}
				}
				continue
			}
			return m.typ, bytes.NewReader(m.data), nil
		case !f.deadline.IsZero() && !time.Now().Before(f.deadline):
			f.readErr = os.ErrDeadlineExceeded
		}
		if err := f.readErr; err != nil {
			f.mu.Unlock()
			return 0, nil, err
		}
		var timeout <-chan time.Time
		if !f.deadline.IsZero() {
			t := time.NewTimer(time.Until(f.deadline))
			defer t.Stop()
			timeout = t.C
		}
		f.mu.Unlock()
		select {
		case <-f.changed:
		case <-timeout:
		}
	}
}

func (f *fakeSocket) WriteMessage(typ int, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return net.ErrClosed
	}
	if typ == websocket.TextMessage {
		f.text = append(f.text, bytes.Clone(data))
	}
	return nil
}

func (f *fakeSocket) WriteControl(typ int, data []byte, _ time.Time) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return net.ErrClosed
	}
	if typ == websocket.PingMessage {
		f.pings = append(f.pings, time.Since(f.start))
		if f.answerPings {
			f.in = append(f.in, fakeFrame{websocket.PongMessage, bytes.Clone(data)})
		}
	}
	f.mu.Unlock()
	f.poke()
	return nil
}

func (f *fakeSocket) SetReadDeadline(t time.Time) error {
	f.mu.Lock()
	f.deadline = t
	f.mu.Unlock()
	f.poke()
	return nil
}

func (f *fakeSocket) SetWriteDeadline(time.Time) error { return nil }

func (f *fakeSocket) SetPongHandler(h func(string) error) {
	f.mu.Lock()
	f.pong = h
	f.mu.Unlock()
}

func (f *fakeSocket) SetReadLimit(int64) {}

func (f *fakeSocket) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.poke()
	return nil
}

func (f *fakeSocket) pingTimes() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.pings...)
}

func (f *fakeSocket) texts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.text)
}

// serveFake runs Serve over f in the background (inside the caller's bubble) with the default
// timers; the returned channel is closed when Serve has returned.
func serveFake(t *testing.T, f *fakeSocket) <-chan struct{} {
	t.Helper()
	reg := session.NewRegistry(session.Options{Shell: "/bin/sh"}, nil) // no session is opened
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Serve(context.Background(), f, ServerOptions{Registry: reg, Principal: principal})
	}()
	return done
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A client that stops reading (so never answers a ping) is dropped exactly PongWait after its
// last message, with pings sent every 5/12 of PongWait meanwhile. On the fake clock: the
// default 60 s take no real time. (The initialize itself does not move the deadline set at the
// upgrade, min(PongWait, 30 s); the message after it does. That a dropped socket detaches its
// sessions without killing them is TestSocketEndDetachesButKeepsSessions's.)
func TestSilentSocketIsClosedAfterPongWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSocket(false)
		done := serveFake(t, f)
		f.send(websocket.TextMessage, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
		time.Sleep(time.Second)
		f.send(websocket.TextMessage, `{"jsonrpc":"2.0","id":2,"method":"session.list","params":{}}`)
		synctest.Wait()
		if f.texts() != 2 {
			t.Fatalf("initialize and session.list: %d replies, want 2", f.texts())
		}
		pongWait := ServerOptions{}.withDefaults().PongWait
		testutil.Advance(pongWait - time.Nanosecond)
		if isDone(done) {
			t.Fatal("closed before PongWait")
		}
		testutil.Advance(time.Nanosecond)
		if !isDone(done) {
			t.Fatal("the silent socket was not closed at PongWait")
		}
		want := []time.Duration{pongWait * 5 / 12, pongWait * 10 / 12}
		if got := f.pingTimes(); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("pings at %v, want %v", got, want)
		}
	})
}

// A socket that answers pings but never initializes is closed once the time to initialize is
// up (30 s): pongs keep only an initialized socket alive.
func TestPongsDoNotKeepAnUninitializedSocket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSocket(true)
		done := serveFake(t, f)
		testutil.Advance(firstMsgTimeout - time.Nanosecond)
		if isDone(done) {
			t.Fatal("closed before the time to initialize was up")
		}
		if len(f.pingTimes()) == 0 {
			t.Fatal("no ping before the deadline: the test proves nothing")
		}
		testutil.Advance(time.Nanosecond)
		if !isDone(done) {
			t.Fatal("an uninitialized socket answering pings was not closed at the deadline")
		}
	})
}

// An initialized socket that answers pings stays open past PongWait, and one that then goes
// silent is dropped PongWait after its last pong.
func TestPongsKeepAnInitializedSocket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSocket(true)
		done := serveFake(t, f)
		f.send(websocket.TextMessage, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
		pongWait := ServerOptions{}.withDefaults().PongWait
		testutil.Advance(3 * pongWait)
		if isDone(done) {
			t.Fatal("a socket answering pings was closed")
		}
		f.mu.Lock()
		f.answerPings = false
		f.mu.Unlock()
		pings := f.pingTimes()
		last := pings[len(pings)-1] // the last ping answered
		testutil.Advance(last + pongWait - 3*pongWait - time.Nanosecond)
		if isDone(done) {
			t.Fatal("closed before PongWait after the last pong")
		}
		testutil.Advance(time.Nanosecond)
		if !isDone(done) {
			t.Fatal("not closed PongWait after the last pong")
		}
	})
}
