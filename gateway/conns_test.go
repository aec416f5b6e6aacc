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
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
)

// guardServer serves h through a ConnGuard on 127.0.0.1, closed in cleanup.
// guardServer serves h behind a ConnGuard; idle receives a value each time a connection goes
// idle in the guard's view (after its ConnState ran), so a test can wait for it.
func guardServer(t *testing.T, o GuardOptions, h http.Handler) (g *ConnGuard, addr string, idle <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g = NewConnGuard(o)
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
