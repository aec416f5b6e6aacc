//go:build e2e

package e2e

import (
	"net"
	"sync"
	"testing"
	"time"
)

// cutProxy forwards loopback TCP connections to a target and can cut every connection at once
// (from the client's side, the server or the network killing its socket) or refuse new ones.
type cutProxy struct {
	ln net.Listener
	wg sync.WaitGroup // the accept loop and the copies

	// mu guards the fields below.
	mu      sync.Mutex
	target  string // where connections go; until it is set they are closed at once
	holding bool   // new connections are closed at once
	conns   []net.Conn
	n       int           // connections forwarded so far
	stalled int           // connections numbered below it are black holes (stall)
	changed chan struct{} // capacity 1: n grew
	// cutIn: once armed (cutAfter), the bytes still to forward toward clients, on any
	// connection, before every connection is cut; 0 when not armed.
	cutIn int64
}

// newCutProxy listens on addr (a port just released by the test, or 127.0.0.1:0) and
// forwards to target ("" to set it later with setTarget, once the gateway is up).
func newCutProxy(t *testing.T, addr, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, changed: make(chan struct{}, 1)}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			target, holding := p.target, p.holding
			p.mu.Unlock()
			if holding || target == "" {
				c.Close()
				continue
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			i := p.n
			p.n++
			p.mu.Unlock()
			select {
			case p.changed <- struct{}{}:
			default:
			}
			p.wg.Go(func() { p.pipe(u, c, i, false) })
			p.wg.Go(func() { p.pipe(c, u, i, true) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

// pipe copies src to dst, dropping what it reads once connection i is stalled, and closes dst
// when src ends. toClient: dst is the client's side, where cutAfter counts.
func (p *cutProxy) pipe(dst, src net.Conn, i int, toClient bool) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		stalled := i < p.stalled
		m, cut := n, false
		if toClient && p.cutIn > 0 && int64(n) >= p.cutIn {
			// The armed cut falls in this read: forward up to it, then cut everything.
			m, cut, p.cutIn = int(p.cutIn), true, 0
		} else if toClient && p.cutIn > 0 {
			p.cutIn -= int64(n)
		}
		p.mu.Unlock()
		if m > 0 && !stalled {
			if _, werr := dst.Write(buf[:m]); werr != nil {
				return
			}
		}
		if cut {
			p.cut()
			return
		}
		if err != nil {
			return
		}
	}
}

// cutAfter arms a cut of every connection once n more bytes have been forwarded toward
// clients (a mid-stream drop at a point the test chooses, exactly).
func (p *cutProxy) cutAfter(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutIn = n
}

// stall makes every connection forwarded so far a black hole: what either side sends is
// dropped and nothing is closed, as when the network lost the path without a word (a laptop
// that slept). New connections are forwarded as usual.
func (p *cutProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = p.n
}

// addr is the proxy's host:port.
func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// base is the proxy's URL.
func (p *cutProxy) base() string { return "http://" + p.addr() }

// setTarget sets where the next connections go.
func (p *cutProxy) setTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// hold makes the proxy refuse new connections (closing them at once) until hold(false).
func (p *cutProxy) hold(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding = on
}

// cut closes every connection forwarded so far, both ends.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// waitConns waits until the proxy has forwarded n connections in all.
func (p *cutProxy) waitConns(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		p.mu.Lock()
		got := p.n
		p.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-p.changed:
		case <-deadline:
			t.Fatalf("proxy saw %d connections, want %d", got, n)
		}
	}
}
