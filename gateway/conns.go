package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelmetric "go.opentelemetry.io/otel/metric"

	"github.com/muxterm/muxterm/otel"
)

// This file bounds the connections the HTTP server holds before they become WebSockets
// (docs/security.md, "Connections and descriptors"). A connection is pending from its accept
// until it is hijacked by an upgrade or closed: a request being read or answered, or a
// keep-alive connection idling between requests. The idle and read timeouts of the http.Server
// end each pending connection eventually; the guard bounds how many there are meanwhile, in all
// and per remote address, and keeps the last descriptors of the process free for sockets that
// are already upgraded, for sessions and for kills.
//
// Descriptors are what an idle flood exhausts. The guard counts the descriptors the process
// holds at each accept (not the new descriptor's number: that is only the lowest free one, and
// closing evicted connections leaves holes below it). Once they reach the reserve's threshold
// it evicts idle pending connections, oldest first, until they are below it again. If an accept
// still fails for want of a descriptor it evicts and accepts again at once: left to net/http, a
// failed accept sleeps (up to 1 s a time) while the next client waits in the backlog.

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
	// maxAcceptRetries bounds the accepts one Accept call retries after evicting for a failed
	// one; then it refuses one client with the spare descriptor and lets net/http back off.
	maxAcceptRetries = 4
)

// Reasons an eviction gives (the muxterm.reason of muxterm.conns.evicted).
const (
	evictDescriptors = "descriptors"       // the table reached the reserve's threshold, or is full
	evictMaxPending  = "maxPending"        // --max-pending-conns
	evictMaxPerAddr  = "maxPendingPerAddr" // --max-pending-per-addr
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
	evicted                otelmetric.Int64Counter
	// openFDs returns how many descriptors the process holds, at least atLeast (a test may
	// replace it before the guard serves).
	openFDs func(atLeast int) int

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
	// Telemetry counts evictions (muxterm.conns.evicted); default otel.Noop().
	Telemetry *otel.Telemetry
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
	if o.Telemetry == nil {
		o.Telemetry = otel.Noop()
	}
	g.evicted = o.Telemetry.Instruments.ConnsEvicted
	// Exported from start at 0 for each reason: an alert's increase() then sees the first
	// eviction, which a series born with it would hide.
	for _, r := range []string{evictDescriptors, evictMaxPending, evictMaxPerAddr} {
		g.evicted.Add(context.Background(), 0, otelmetric.WithAttributes(attribute.String(otel.AttrReason, r)))
	}
	g.openFDs = openFDCounter()
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

// admit decides on a fresh connection: keep it, possibly evicting other pending connections
// (the longest idle keep-alives, else the oldest that have not sent a request yet), or refuse
// it. fd is its descriptor. With the table at the reserve's threshold, it evicts enough to bring
// the descriptors held back below the threshold; over a count bound, one.
func (g *ConnGuard) admit(gc *guardedConn, fd int) bool {
	open := fd + 1
	if g.limit > 0 {
		open = g.openFDs(fd + 1)
	}
	g.mu.Lock()
	threshold := g.limit - g.reserve
	nearlyFull := g.limit > 0 && open >= threshold
	overAll := len(g.pending) >= g.maxPending
	overAddr := g.perAddr[gc.addr] >= g.maxPerAddr
	var victims []*guardedConn
	reason := ""
	switch {
	case nearlyFull:
		// open counts gc: evicting open-threshold+1 leaves one descriptor below the threshold.
		victims, reason = g.victimsLocked("", open-threshold+1), evictDescriptors
	case overAll:
		victims, reason = g.victimsLocked("", 1), evictMaxPending
	case overAddr:
		victims, reason = g.victimsLocked(gc.addr, 1), evictMaxPerAddr
	}
	for _, v := range victims {
		g.forgetLocked(v)
	}
	admitted := len(victims) > 0 || !(nearlyFull || overAll || overAddr)
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
			"fd", fd, "open", open, "limit", g.limit, "reserve", g.reserve, "pending", pending)
	}
	g.evict(victims, reason, open)
	if !admitted {
		g.log.Debug("connection refused", "remote", gc.addr, "nearly_full", nearlyFull,
			"over_total", overAll, "over_addr", overAddr, "pending", pending, "open", open)
	}
	return admitted
}

// evictForAccept evicts pending connections after an accept failed for want of a descriptor:
// enough to bring the table back below the reserve's threshold (one when the limit is unknown).
// It returns how many it evicted; none when every pending connection is answering a request.
func (g *ConnGuard) evictForAccept() int {
	g.mu.Lock()
	victims := g.victimsLocked("", g.reserve+1)
	for _, v := range victims {
		g.forgetLocked(v)
	}
	g.mu.Unlock()
	g.evict(victims, evictDescriptors, g.limit)
	return len(victims)
}

// evict closes victims, which the caller has forgotten, and counts them. It runs without g.mu:
// a close waits for the connection's reader to let go of the descriptor.
func (g *ConnGuard) evict(victims []*guardedConn, reason string, open int) {
	if len(victims) == 0 {
		return
	}
	for _, v := range victims {
		_ = v.Conn.Close()
	}
	g.log.Debug("idle connections evicted", "count", len(victims), "reason", reason, "open", open,
		"limit", g.limit)
	g.evicted.Add(context.Background(), int64(len(victims)),
		otelmetric.WithAttributes(attribute.String(otel.AttrReason, reason)))
}

// victimsLocked picks up to n pending connections to evict: the longest idle keep-alive
// connections first, then the oldest ones that never became active (they have not sent a whole
// request head yet), from addr only when addr is not empty. A connection answering a request is
// never picked, nor one hijacked (it is no longer pending).
func (g *ConnGuard) victimsLocked(addr string, n int) []*guardedConn {
	if n <= 0 {
		return nil
	}
	var idle, fresh []*guardedConn
	for c := range g.pending {
		if addr != "" && c.addr != addr {
			continue
		}
		switch {
		case !c.idleSince.IsZero():
			idle = append(idle, c)
		case !c.active:
			fresh = append(fresh, c)
		}
	}
	slices.SortFunc(idle, func(a, b *guardedConn) int { return a.idleSince.Compare(b.idleSince) })
	victims := idle[:min(n, len(idle))]
	if len(victims) < n {
		slices.SortFunc(fresh, func(a, b *guardedConn) int { return a.since.Compare(b.since) })
		victims = append(victims, fresh[:min(n-len(victims), len(fresh))]...)
	}
	return victims
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

// Accept returns the next connection the guard admits. When the accept fails for want of a
// descriptor it evicts idle pending connections and accepts again at once, up to
// maxAcceptRetries times; with nothing to evict it refuses the first client in the backlog
// (acceptAtEMFILE) and returns the error, on which http.Server backs off and calls again.
func (l *guardedListener) Accept() (net.Conn, error) {
	retries := 0
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				if retries < maxAcceptRetries && l.g.evictForAccept() > 0 {
					retries++
					continue
				}
				l.g.acceptAtEMFILE(l.Listener)
			}
			return nil, err
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

// openFDCounter returns a function counting the process's open descriptors. Linux 6.2 and later
// give the count as the size of /proc/self/fd, which costs a stat; older kernels list the
// directory. Either falls back to atLeast (a lower bound the caller knows) on failure.
func openFDCounter() func(atLeast int) int {
	if fi, err := os.Stat("/proc/self/fd"); err == nil && fi.Size() > 0 {
		return func(atLeast int) int {
			fi, err := os.Stat("/proc/self/fd")
			if err != nil {
				return atLeast
			}
			return max(int(fi.Size()), atLeast)
		}
	}
	return func(atLeast int) int {
		d, err := os.Open("/proc/self/fd")
		if err != nil {
			return atLeast
		}
		names, err := d.Readdirnames(-1)
		_ = d.Close()
		if err != nil {
			return atLeast
		}
		return max(len(names)-1, atLeast) // less the directory's own descriptor
	}
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
