package gateway

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
)

// This file bounds the connections the HTTP server holds before they become WebSockets
// (docs/security.md, "Connections and descriptors"). A connection is pending from its accept
// until it is hijacked by an upgrade or closed: a request being read or answered, or a
// keep-alive connection idling between requests. The idle and read timeouts of the http.Server
// end each pending connection eventually; the guard bounds how many there are meanwhile, in all
// and per remote address, and keeps the last descriptors of the process free for sockets that
// are already upgraded, for sessions and for kills.

// Defaults of the connection guard.
const (
	DefaultMaxPending        = 1024
	DefaultMaxPendingPerAddr = 128
	// minFDReserve is the least number of descriptors the guard keeps free; with a larger table
	// it keeps a sixteenth of it, up to maxFDReserve.
	minFDReserve = 16
	maxFDReserve = 256
	// nearlyFullLogEvery bounds how often the guard says the table is nearly full.
	nearlyFullLogEvery = 10 * time.Second
)

// refusal is what a connection the guard refuses reads before it is closed (plain HTTP only).
const refusal = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 31\r\n\r\n" +
	"too many connections, try again"

// ConnGuard bounds pending connections. Create it with NewConnGuard, serve Listener(ln) with its
// ConnState as the http.Server's ConnState. It is safe for concurrent use.
type ConnGuard struct {
	maxPending, maxPerAddr int
	limit, reserve         int  // RLIMIT_NOFILE when created, and the descriptors kept free
	plain                  bool // refusals get an HTTP 503 (false under TLS: just a close)
	log                    *slog.Logger

	// mu guards pending, perAddr, spare, lnClosed and lastWarn. Nothing blocks under it: conns are
	// closed after it is released.
	mu       sync.Mutex
	pending  map[*guardedConn]struct{}
	perAddr  map[string]int
	spare    *os.File // one descriptor held back, released to accept-and-refuse on EMFILE
	lnClosed bool     // the guarded listener closed: a spare reopened after it is closed at once
	lastWarn time.Time
}

// GuardOptions configure a ConnGuard; zero values take the defaults.
type GuardOptions struct {
	MaxPending        int  // pending connections in all (default DefaultMaxPending)
	MaxPendingPerAddr int  // pending connections per remote IP (default DefaultMaxPendingPerAddr)
	TLS               bool // the listener is wrapped in TLS after the guard: refuse by closing
	Logger            *slog.Logger
}

// NewConnGuard reads the process's descriptor limit and sizes the reserve from it.
func NewConnGuard(o GuardOptions) *ConnGuard {
	g := &ConnGuard{maxPending: o.MaxPending, maxPerAddr: o.MaxPendingPerAddr, plain: !o.TLS,
		log: o.Logger, pending: map[*guardedConn]struct{}{}, perAddr: map[string]int{}}
	if g.maxPending <= 0 {
		g.maxPending = DefaultMaxPending
	}
	if g.maxPerAddr <= 0 {
		g.maxPerAddr = DefaultMaxPendingPerAddr
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < 1<<30 {
		g.limit = int(rl.Cur)
		g.reserve = min(max(g.limit/16, minFDReserve), maxFDReserve)
	}
	g.spare, _ = os.Open(os.DevNull)
	return g
}

// Reserve returns the descriptor limit and how many descriptors the guard keeps free (0, 0 when
// the limit is unknown or unlimited).
func (g *ConnGuard) Reserve() (limit, reserve int) { return g.limit, g.reserve }

// Listener wraps ln (a TCP listener, before any TLS) so that every connection it accepts is
// counted until it is hijacked or closed. Closing it also releases the guard's spare descriptor;
// a guard serves one listener.
func (g *ConnGuard) Listener(ln net.Listener) net.Listener {
	return &guardedListener{Listener: ln, g: g}
}

// ConnState tracks idle and hijacked connections; set it as http.Server.ConnState.
func (g *ConnGuard) ConnState(c net.Conn, st http.ConnState) {
	gc := unwrapGuarded(c)
	if gc == nil {
		return
	}
	switch st {
	case http.StateIdle:
		g.mu.Lock()
		gc.idleSince = time.Now()
		g.mu.Unlock()
	case http.StateActive:
		g.mu.Lock()
		gc.idleSince = time.Time{}
		gc.active = true
		g.mu.Unlock()
	case http.StateHijacked, http.StateClosed:
		g.forget(gc)
	}
}

// Pending returns the pending connections, for tests and logs.
func (g *ConnGuard) Pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// admit decides on a fresh connection: keep it, possibly evicting another pending connection
// (the longest idle keep-alive, else the oldest that has not sent a request yet), or refuse it.
func (g *ConnGuard) admit(gc *guardedConn, fd int) bool {
	g.mu.Lock()
	nearlyFull := g.limit > 0 && fd >= g.limit-g.reserve
	overAll := len(g.pending) >= g.maxPending
	overAddr := g.perAddr[gc.addr] >= g.maxPerAddr
	var victim *guardedConn
	if nearlyFull || overAll || overAddr {
		sameAddr := ""
		if overAddr && !overAll && !nearlyFull {
			sameAddr = gc.addr
		}
		victim = g.victimLocked(sameAddr)
		if victim != nil {
			g.forgetLocked(victim)
		}
	}
	admitted := victim != nil || !(nearlyFull || overAll || overAddr)
	if admitted {
		g.pending[gc] = struct{}{}
		g.perAddr[gc.addr]++
		gc.since = time.Now()
	}
	warn := nearlyFull && time.Since(g.lastWarn) >= nearlyFullLogEvery
	if warn {
		g.lastWarn = time.Now()
	}
	pending := len(g.pending)
	g.mu.Unlock()
	if warn {
		g.log.Warn("file descriptor table nearly full: evicting idle HTTP connections and refusing new ones that do not fit; the reserve is kept for sockets, sessions and kills",
			"fd", fd, "limit", g.limit, "reserve", g.reserve, "pending", pending)
	}
	if victim != nil {
		_ = victim.Conn.Close()
	}
	if !admitted {
		g.log.Debug("connection refused", "remote", gc.addr, "nearly_full", nearlyFull,
			"over_total", overAll, "over_addr", overAddr, "pending", pending)
	}
	return admitted
}

// victimLocked picks the pending connection to evict: the longest idle keep-alive connection,
// else the oldest one that never became active (it has not sent a whole request head yet), from
// addr only when addr is not empty. A connection answering a request is never picked.
func (g *ConnGuard) victimLocked(addr string) *guardedConn {
	var idle, fresh *guardedConn
	for c := range g.pending {
		if addr != "" && c.addr != addr {
			continue
		}
		switch {
		case !c.idleSince.IsZero():
			if idle == nil || c.idleSince.Before(idle.idleSince) {
				idle = c
			}
		case !c.active:
			if fresh == nil || c.since.Before(fresh.since) {
				fresh = c
			}
		}
	}
	if idle != nil {
		return idle
	}
	return fresh
}

func (g *ConnGuard) forget(gc *guardedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.forgetLocked(gc)
}

func (g *ConnGuard) forgetLocked(gc *guardedConn) {
	if _, ok := g.pending[gc]; !ok {
		return
	}
	delete(g.pending, gc)
	if g.perAddr[gc.addr] <= 1 {
		delete(g.perAddr, gc.addr)
	} else {
		g.perAddr[gc.addr]--
	}
}

// refuse answers a refused connection (when plain HTTP) and closes it.
func (g *ConnGuard) refuse(c net.Conn) {
	if g.plain {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte(refusal))
	}
	_ = c.Close()
}

// acceptAtEMFILE handles an accept that failed for want of a descriptor: it releases the spare
// descriptor, accepts the connection waiting first in the backlog, refuses it and takes the
// spare back, so that a client is answered (not left waiting in the backlog) and the server's
// accept loop does not spin.
func (g *ConnGuard) acceptAtEMFILE(ln net.Listener) {
	g.mu.Lock()
	spare := g.spare
	g.spare = nil
	warn := time.Since(g.lastWarn) >= nearlyFullLogEvery
	if warn {
		g.lastWarn = time.Now()
	}
	g.mu.Unlock()
	if warn {
		g.log.Warn("file descriptor table full: refusing connections", "limit", g.limit)
	}
	if spare == nil {
		return
	}
	_ = spare.Close()
	if c, err := ln.Accept(); err == nil {
		g.refuse(c)
	}
	spare, _ = os.Open(os.DevNull)
	g.mu.Lock()
	closed := g.lnClosed
	if !closed {
		g.spare = spare
	}
	g.mu.Unlock()
	if closed && spare != nil {
		_ = spare.Close() // the listener closed meanwhile: nothing will release it
	}
}

type guardedListener struct {
	net.Listener
	g *ConnGuard
}

// Close closes the listener and releases the guard's spare descriptor.
func (l *guardedListener) Close() error {
	err := l.Listener.Close()
	l.g.mu.Lock()
	spare := l.g.spare
	l.g.spare, l.g.lnClosed = nil, true
	l.g.mu.Unlock()
	if spare != nil {
		_ = spare.Close()
	}
	return err
}

func (l *guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				l.g.acceptAtEMFILE(l.Listener)
			}
			return nil, err // http.Server backs off on a temporary error and calls again
		}
		gc := &guardedConn{Conn: c, g: l.g, addr: remoteIP(c)}
		if l.g.admit(gc, fdOf(c)) {
			return gc, nil
		}
		l.g.refuse(c)
	}
}

// guardedConn is a pending connection; its fields but Conn, g and addr are guarded by g.mu.
type guardedConn struct {
	net.Conn
	g         *ConnGuard
	addr      string
	since     time.Time // accepted
	idleSince time.Time // zero unless idle between requests
	active    bool      // it has begun reading a request
	closeOnce sync.Once
}

func (c *guardedConn) Close() error {
	c.closeOnce.Do(func() { c.g.forget(c) })
	return c.Conn.Close()
}

// NetConn returns the accepted connection, as tls.Conn does.
func (c *guardedConn) NetConn() net.Conn { return c.Conn }

// unwrapGuarded finds the guardedConn under c (a TLS connection's NetConn, or c itself).
func unwrapGuarded(c net.Conn) *guardedConn {
	for range 4 {
		if gc, ok := c.(*guardedConn); ok {
			return gc
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// fdOf returns c's descriptor number, or -1. Descriptors are allocated lowest first, so every
// number below it is in use: it is a lower bound of the descriptors the process holds.
func fdOf(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	_ = rc.Control(func(u uintptr) { fd = int(u) })
	return fd
}
