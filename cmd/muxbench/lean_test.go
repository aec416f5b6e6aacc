package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// fakeSocket feeds leanClient scripted messages and records what it writes.
type fakeSocket struct {
	in     []fakeMsg
	out    []fakeMsg
	closed bool
}

type fakeMsg struct {
	typ int
	b   []byte
}

func (f *fakeSocket) NextReader() (int, io.Reader, error) {
	if len(f.in) == 0 {
		return 0, nil, io.ErrUnexpectedEOF
	}
	m := f.in[0]
	f.in = f.in[1:]
	return m.typ, bytes.NewReader(m.b), nil
}

func (f *fakeSocket) WriteMessage(typ int, b []byte) error {
	f.out = append(f.out, fakeMsg{typ, bytes.Clone(b)})
	return nil
}

func (f *fakeSocket) Close() error { f.closed = true; return nil }

func (f *fakeSocket) output(ch uint32, p string) {
	f.in = append(f.in, fakeMsg{websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameOutput, ch, []byte(p))})
}

func (f *fakeSocket) text(s string) { f.in = append(f.in, fakeMsg{websocket.TextMessage, []byte(s)}) }

// acks returns the acks written, each as channel<<24 | count.
func (f *fakeSocket) acks(t *testing.T) []uint32 {
	t.Helper()
	var out []uint32
	for _, m := range f.out {
		if m.typ != websocket.BinaryMessage || m.b[0] != proto.FrameAck {
			continue
		}
		fr, err := proto.ParseFrame(m.b)
		if err != nil {
			t.Fatalf("the client wrote a bad ack %x: %v", m.b, err)
		}
		out = append(out, fr.Channel<<24|fr.AckCount())
	}
	return out
}

// The echo's channel (hold) is acknowledged once ackBytes are due and the rest when the client
// goes idle; every other channel's output frame as soon as it is consumed. Output on a channel
// never bound is a protocol error.
func TestLeanAcks(t *testing.T) {
	f := &fakeSocket{}
	l := newLean(f)
	l.ackBytes = 10
	a, b := &leanChan{id: 1}, &leanChan{id: 2}
	l.chans[1], l.chans[2] = a, b
	l.hold = a
	f.output(1, "123456")
	f.output(2, "xy")
	f.output(2, "z")
	f.output(1, "7890ab")
	f.output(1, "c")
	for range 5 {
		if _, _, err := l.step(); err != nil {
			t.Fatal(err)
		}
	}
	want := []uint32{2<<24 | 2, 2<<24 | 1, 1<<24 | 12}
	if got := f.acks(t); !slices.Equal(got, want) {
		t.Fatalf("acks: %x, want %x (each frame of channel 2 at once, channel 1 at ackBytes 10)", got, want)
	}
	if a.recv != 13 || a.unacked != 1 || b.recv != 3 || b.unacked != 0 || l.acks != 3 {
		t.Fatalf("accounting: a %+v, b %+v, %d acks", a, b, l.acks)
	}
	if err := l.idle(); err != nil {
		t.Fatal(err)
	}
	if got := f.acks(t); len(got) != 4 || got[3] != 1<<24|1 || l.acks != 4 {
		t.Fatalf("acks after idle: %x (%d counted), want channel 1's last byte", got, l.acks)
	}
	if err := l.idle(); err != nil || len(f.acks(t)) != 4 {
		t.Fatalf("a second idle acknowledged again (%v): %x", err, f.acks(t))
	}
	f.output(7, "z")
	if _, _, err := l.step(); err == nil || !strings.Contains(err.Error(), "not bound") {
		t.Fatalf("output on an unbound channel: %v", err)
	}
	f.in = append(f.in, fakeMsg{websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameInput, 1, []byte("a"))})
	if _, _, err := l.step(); err == nil {
		t.Fatal("an input frame from the gateway was accepted")
	}
}

// read returns the waited-for channel's output, consuming other channels' output, responses and
// notifications on the way; session.gap and session.exit are recorded.
func TestLeanReadAndNotifications(t *testing.T) {
	f := &fakeSocket{}
	l := newLean(f)
	l.ackBytes = 64
	cat, fl := &leanChan{id: 1}, &leanChan{id: 2}
	l.chans[1], l.chans[2] = cat, fl
	f.output(2, strings.Repeat("A", 40))
	f.text(`{"jsonrpc":"2.0","method":"session.gap","params":{"channel":2,"lost":100}}`)
	f.text(`{"jsonrpc":"2.0","method":"session.size","params":{"channel":1,"session":"s","cols":80,"rows":24}}`)
	f.text(`{"jsonrpc":"2.0","id":5,"result":{}}`)
	f.output(1, "a")
	n, err := l.read(cat)
	if err != nil || n != 1 {
		t.Fatalf("read = %d, %v; want the echo's 1 byte", n, err)
	}
	if fl.recv != 40 || fl.lost != 100 {
		t.Fatalf("the stream's channel: %+v", fl)
	}
	if _, ok := l.replies[5]; !ok {
		t.Fatal("the response read on the way was not kept")
	}
	f.text(`{"jsonrpc":"2.0","method":"session.exit","params":{"channel":1,"session":"s","code":0,"signal":null}}`)
	f.text(`{"jsonrpc":"2.0","method":"session.closed","params":{"channel":1,"session":"s","reason":"exited"}}`)
	if _, err := l.read(cat); err == nil || !cat.exited {
		t.Fatalf("read of a channel closed without a kill: %v (exited %v)", err, cat.exited)
	}
	// A gap in the echo (hold's channel) fails the client.
	echo := &leanChan{id: 3}
	l.chans[3], l.hold = echo, echo
	f.text(`{"jsonrpc":"2.0","method":"session.gap","params":{"channel":3,"lost":5}}`)
	if _, _, err := l.step(); err == nil || !strings.Contains(err.Error(), "gap") || echo.lost != 5 {
		t.Fatalf("a gap in the echo: %v (lost %d)", err, echo.lost)
	}
}

// call waits for its own response even when others come first, and returns the gateway's
// error; an id-less error fails the client unless it is an ack crossing a killed channel's
// session.closed.
func TestLeanCallsAndErrors(t *testing.T) {
	f := &fakeSocket{}
	l := newLean(f)
	f.text(`{"jsonrpc":"2.0","id":9,"result":{"x":1}}`)
	f.text(`{"jsonrpc":"2.0","id":1,"result":{"session":"abc","channel":1,"pid":1,"offset":0,"live":0}}`)
	ch, err := l.open([]string{"sh"}, nil)
	if err != nil || ch.session != "abc" || ch.id != 1 {
		t.Fatalf("open = %+v, %v", ch, err)
	}
	if len(f.out) != 1 || !bytes.Contains(f.out[0].b, []byte(`"method":"session.open"`)) || !bytes.Contains(f.out[0].b, []byte(`"id":1`)) {
		t.Fatalf("open wrote %v", f.out)
	}
	f.text(`{"jsonrpc":"2.0","id":2,"error":{"code":-32003,"message":"no","data":{"kind":"limit_exceeded","limit":"maxSessions"}}}`)
	if _, err := l.open([]string{"sh"}, nil); err == nil || !strings.Contains(err.Error(), "limit_exceeded") {
		t.Fatalf("refused open: %v", err)
	}
	if _, ok := l.chans[2]; ok {
		t.Fatal("a refused open left its channel bound")
	}
	f.text(`{"jsonrpc":"2.0","id":null,"error":{"code":-32005,"message":"x","data":{"kind":"unknown_channel","channel":1}}}`)
	if _, _, err := l.step(); err == nil {
		t.Fatal("unknown_channel for a live channel was ignored")
	}
	ch.killed = true
	f.text(`{"jsonrpc":"2.0","id":null,"error":{"code":-32005,"message":"x","data":{"kind":"unknown_channel","channel":1}}}`)
	if _, _, err := l.step(); err != nil {
		t.Fatalf("unknown_channel for a killed channel: %v", err)
	}
	f.text(`{"jsonrpc":"2.0","id":null,"error":{"code":-32003,"message":"x","data":{"kind":"limit_exceeded","limit":"inputQueue","channel":1}}}`)
	if _, _, err := l.step(); err == nil {
		t.Fatal("a refused input was ignored")
	}
	// The input frame's bytes.
	f.out = nil
	if err := l.input(ch, []byte("q")); err != nil {
		t.Fatal(err)
	}
	want := []byte{proto.FrameInput, 0, 0, 0, 1, 'q'}
	if len(f.out) != 1 || !bytes.Equal(f.out[0].b, want) || binary.BigEndian.Uint32(f.out[0].b[1:5]) != 1 {
		t.Fatalf("input wrote %x, want %x", f.out, want)
	}
}

// The lean client against a real multiplexer and real PTYs: keystrokes echo back to back and
// next to a stream on the same socket, the stream is acknowledged (it keeps flowing), and both
// sessions are killed at the end.
func TestLeanEchoAgainstMux(t *testing.T) {
	reg := session.NewRegistry(session.Options{Shell: "/bin/sh", KillGrace: 100 * time.Millisecond}, nil)
	up := websocket.Upgrader{Subprotocols: []string{proto.Subprotocol}}
	sctx, cancel := context.WithCancelCause(context.Background())
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex // guards closing, and orders wg.Add before the cleanup's wg.Wait
		closing bool       // the cleanup has begun: no more connections
	)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if closing {
			mu.Unlock()
			http.Error(w, "closing", http.StatusServiceUnavailable)
			return
		}
		wg.Add(1)
		mu.Unlock()
		defer wg.Done()
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		_ = mux.Serve(sctx, ws, mux.ServerOptions{Registry: reg, Principal: "p", AllowCmd: func([]string) bool { return true }})
	}))
	t.Cleanup(func() {
		mu.Lock()
		closing = true
		mu.Unlock()
		cancel(mux.ErrShutdown)
		wg.Wait()
		hs.Close()
		ctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		if err := reg.Shutdown(ctx); err != nil {
			t.Errorf("registry shutdown: %v", err)
		}
	})
	gw := &gatewayProc{Addr: strings.TrimPrefix(hs.URL, "http://")}
	b := &bench{tagKey: "MUXBENCH_TEST", tagVal: "lean"}
	ctx, c := context.WithTimeout(context.Background(), 60*time.Second)
	defer c()
	for _, m := range []echoMode{{name: "back to back", n: 100}, {name: "streaming", load: true, n: 100}} {
		lat, err := b.leanEcho(ctx, gw, m)
		if err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		if len(lat) != m.n {
			t.Fatalf("%s: %d latencies, want %d", m.name, len(lat), m.n)
		}
		for _, d := range lat {
			if d <= 0 {
				t.Fatalf("%s: latency %v", m.name, d)
			}
		}
		if n := len(reg.List("p")); n != 0 {
			t.Fatalf("%s: %d sessions left after the lean client's kill", m.name, n)
		}
	}
	// A cancelled context unblocks a read and fails the run; kill then kills the sessions over a
	// fresh connection, so that the stream does not go on in the gateway.
	cctx, cc := context.WithCancel(ctx)
	l, err := dialLean(cctx, gw.URL(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	// The stream flows past its window: the client acknowledges as it reads.
	fl, err := l.open([]string{"sh", "-c", floodScript}, nil)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := l.within(30 * time.Second)
	for fl.recv < 4<<20 {
		if _, _, err := l.step(); err != nil {
			t.Fatalf("the stream stopped after %d bytes: %v", fl.recv, err)
		}
	}
	end()
	ch, err := l.open([]string{"sh", "-c", catScript}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.readUntil(ch, "R"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := l.read(ch); done <- err }()
	cc()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("read after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read did not return within 10 s of its context's end")
	}
	if len(reg.List("p")) != 2 {
		t.Fatalf("%d sessions before the kill, want the stream and cat", len(reg.List("p")))
	}
	if err := l.kill(); err != nil {
		t.Fatalf("kill after the context ended: %v", err)
	}
	if n := len(reg.List("p")); n != 0 {
		t.Fatalf("%d sessions left after a cancelled client's kill", n)
	}
	if !fl.closed || !ch.closed {
		t.Fatalf("the channels are not marked closed after the kill: stream %v, cat %v", fl.closed, ch.closed)
	}
}
