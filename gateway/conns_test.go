package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
)

// guardServer serves h behind a ConnGuard on 127.0.0.1, closed in cleanup; setup, if any,
// changes the guard before it serves. idle receives a value each time a connection goes idle
// in the guard's view (after its ConnState ran), so a test can wait for it.
func guardServer(t *testing.T, o GuardOptions, h http.Handler, setup ...func(*ConnGuard)) (g *ConnGuard, addr string, idle <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g = NewConnGuard(o)
	for _, f := range setup {
		f(g)
	}
	idleCh := make(chan struct{}, 64)
	state := func(c net.Conn, st http.ConnState) {
		g.ConnState(c, st)
		if st == http.StateIdle {
			select {
			case idleCh <- struct{}{}:
			default:
			}
		}
	}
	srv := &http.Server{Handler: h, ConnState: state, ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: time.Minute}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(g.Listener(ln))
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return g, ln.Addr().String(), idleCh
}

// dialTCP connects to addr; the connection is closed when the test ends.
func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// loopbackHandoverListener is a HandoverListener on a loopback port of its own.
func loopbackHandoverListener(t *testing.T) *HandoverListener {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := NewHandoverListener(raw)
	if err != nil {
		raw.Close()
		t.Fatal(err)
	}
	return hl
}

// keepAlive dials addr and does one GET /, leaving the connection idle and open.
func keepAlive(t *testing.T, addr string) net.Conn {
	t.Helper()
	c := dialTCP(t, addr)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("keep-alive request: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = c.SetDeadline(time.Time{})
	return c
}

// closedByPeer reports whether the gateway closed c (EOF or reset within 5 s).
func closedByPeer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// waitActive waits until n pending connections are answering a request.
func waitActive(t *testing.T, g *ConnGuard, n int) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("%d active connections", n), func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		active := 0
		for c := range g.pending {
			if c.active && c.idleSince.IsZero() {
				active++
			}
		}
		return active == n
	})
}

// TestConnGuardEvictsTheLongestIdle: over the per-address bound, a new connection takes the
// place of the longest idle keep-alive connection of that address, then of the oldest that sent
// nothing; one answering a request is never evicted, and with nothing to evict the newcomer
// gets 503 and Connection: close.
func TestConnGuardEvictsTheLongestIdle(t *testing.T) {
	block := make(chan struct{})
	g, addr, idle := guardServer(t, GuardOptions{MaxPending: 100, MaxPendingPerAddr: 2,
		Logger: slog.New(slog.DiscardHandler)},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/block" {
				<-block
			}
			_, _ = io.WriteString(w, "ok\n")
		}))
	defer close(block)
	wentIdle := func() {
		t.Helper()
		select {
		case <-idle:
		case <-time.After(5 * time.Second):
			t.Fatal("a connection did not go idle")
		}
	}
	a := keepAlive(t, addr)
	wentIdle()
	b := keepAlive(t, addr)
	wentIdle()
	c := keepAlive(t, addr) // over 2: a, idle the longest, goes
	if !closedByPeer(a) {
		t.Fatal("the longest idle connection was not evicted")
	}
	if got := g.Pending(); got != 2 {
		t.Errorf("pending: got %d, want 2", got)
	}
	_ = b
	// Busy: one connection answering a request that blocks, one idle (c).
	busy := dialTCP(t, addr)
	// Accepting busy evicted b (idle longer than c).
	fmt.Fprintf(busy, "GET /block HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	if !closedByPeer(b) {
		t.Fatal("b was not evicted for busy")
	}
	waitActive(t, g, 1)
	// d evicts c, the last idle one; then e finds only busy and d (active or fresh): d, which
	// sent nothing, goes.
	d := dialTCP(t, addr)
	if !closedByPeer(c) {
		t.Fatal("c was not evicted for d")
	}
	e := dialTCP(t, addr)
	if !closedByPeer(d) {
		t.Fatal("d, which sent nothing, was not evicted for e")
	}
	// e now sends a request that blocks too: both pending connections are answering, so the
	// next one is refused.
	fmt.Fprintf(e, "GET /block HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	waitActive(t, g, 2)
	f := dialTCP(t, addr)
	_ = f.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(f), nil)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Fatalf("with every pending connection answering: got %v %v, want 503 and Connection: close", resp, err)
	}
	_ = busy.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := busy.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a connection answering a request was closed: %v", err)
	}
}

// TestConnGuardEvictsWhenDescriptorsRunLow: once the descriptors held reach the reserve's
// threshold, a new connection evicts enough pending connections to bring them back below it,
// idle keep-alives first (the longest idle first), then those that sent nothing; never one
// answering a request. The count is the descriptors held, not the new descriptor's number.
func TestConnGuardEvictsWhenDescriptorsRunLow(t *testing.T) {
	block := make(chan struct{})
	var open atomic.Int64 // what the guard is told the process holds
	open.Store(50)
	g, addr, idle := guardServer(t, GuardOptions{Logger: slog.New(slog.DiscardHandler)},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/block" {
				<-block
			}
			_, _ = io.WriteString(w, "ok\n")
		}),
		func(g *ConnGuard) {
			g.limit, g.reserve = 100, 10 // threshold 90
			g.openFDs = func(atLeast int) int { return max(int(open.Load()), atLeast) }
		})
	defer close(block)
	wentIdle := func() {
		t.Helper()
		select {
		case <-idle:
		case <-time.After(5 * time.Second):
			t.Fatal("a connection did not go idle")
		}
	}
	silent := dialTCP(t, addr) // the oldest, but it sent nothing
	busy := dialTCP(t, addr)
	fmt.Fprintf(busy, "GET /block HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	waitActive(t, g, 1)
	var kept []net.Conn
	for range 4 {
		kept = append(kept, keepAlive(t, addr))
		wentIdle()
	}
	if got := g.Pending(); got != 6 {
		t.Fatalf("pending below the threshold: got %d, want 6", got)
	}

	open.Store(92) // with the newcomer: 3 over the threshold's last free descriptor
	fresh := dialTCP(t, addr)
	for i, c := range kept[:3] {
		if !closedByPeer(c) {
			t.Errorf("idle connection %d of 4 (oldest first) was not evicted", i)
		}
	}
	waitPending(t, g, 4) // silent, busy, kept[3], fresh
	open.Store(93)       // 4 over: kept[3], then silent and fresh, oldest first; busy stays
	last := dialTCP(t, addr)
	for name, c := range map[string]net.Conn{"the last idle": kept[3], "the oldest silent": silent} {
		if !closedByPeer(c) {
			t.Errorf("%s connection was not evicted", name)
		}
	}
	if !closedByPeer(fresh) {
		t.Errorf("the other silent connection was not evicted")
	}
	waitPending(t, g, 2) // busy and last
	_ = busy.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := busy.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a connection answering a request was closed: %v", err)
	}
	_ = last.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(last, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	if resp, err := http.ReadResponse(bufio.NewReader(last), nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the connection admitted by evicting: got %v %v, want 200", resp, err)
	}
}

// waitPending waits until the guard counts n pending connections.
func waitPending(t *testing.T, g *ConnGuard, n int) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("%d pending connections", n), func() bool {
		return g.Pending() == n
	})
}

// emfileListener fails the next fail accepts with EMFILE, as a full descriptor table does.
type emfileListener struct {
	net.Listener
	fail atomic.Int32
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.fail.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(),
			Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	l.fail.Store(0)
	return l.Listener.Accept()
}

// TestConnGuardAcceptEvictsOnEMFILE: an accept that fails for want of a descriptor evicts the
// longest idle pending connections (reserve+1 of them) and accepts again at once, returning
// the waiting client rather than the error (on which net/http would sleep); with nothing to
// evict it refuses the first client in the backlog with 503 and returns the error.
func TestConnGuardAcceptEvictsOnEMFILE(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &emfileListener{Listener: raw}
	g := NewConnGuard(GuardOptions{Logger: slog.New(slog.DiscardHandler)})
	g.reserve = 1 // evicts 2 a time
	ln := g.Listener(fl)
	defer ln.Close()
	addr := raw.Addr().String()

	accept := func() (net.Conn, error) {
		t.Helper()
		c, err := ln.Accept()
		if c != nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	var clients, served []net.Conn
	for range 3 {
		clients = append(clients, dialTCP(t, addr))
		c, err := accept()
		if err != nil {
			t.Fatal(err)
		}
		served = append(served, c)
		g.ConnState(c, http.StateActive)
		g.ConnState(c, http.StateIdle)
	}
	fl.fail.Store(1)
	dialTCP(t, addr) // the newcomer
	c, err := accept()
	if err != nil {
		t.Fatalf("accept after EMFILE with idle connections to evict: %v", err)
	}
	for i, want := range []bool{true, true, false} {
		_ = clients[i].SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, err := clients[i].Read(make([]byte, 1))
		if got := err != nil && !errors.Is(err, os.ErrDeadlineExceeded); got != want {
			t.Errorf("idle connection %d (oldest first) evicted: got %v, want %v", i, got, want)
		}
	}
	if got := g.Pending(); got != 2 {
		t.Errorf("pending after evicting: got %d, want 2", got)
	}

	// Nothing idle: both pending connections are answering a request.
	g.ConnState(served[2], http.StateActive)
	g.ConnState(c, http.StateActive)
	fl.fail.Store(1)
	refused := dialTCP(t, addr)
	if _, err := accept(); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("accept after EMFILE with nothing to evict: got %v, want EMFILE", err)
	}
	_ = refused.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(refused), nil)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("the client in the backlog: got %v %v, want 503", resp, err)
	}
}
