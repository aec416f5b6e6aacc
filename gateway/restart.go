package gateway

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/mux"
)

// Restart is the gateway's part of an upgrade in place: it refuses new sockets, sends every
// socket the gateway.restart notification and closes it with 1012 (its channels leave resume
// holds behind: the sessions stay), and waits for the sockets to end, within ctx. The HTTP
// listener is the caller's: it stays open across the exec, so clients that reconnect meanwhile
// wait in its backlog for the next image.
func (g *Gateway) Restart(ctx context.Context) error {
	g.drainMu.Lock()
	g.draining.Store(true)
	cancel, conns := g.cancelBase, g.conns
	g.drainMu.Unlock()
	cancel(mux.ErrRestart)
	done := make(chan struct{})
	// When ctx ends first this outlives the call, waiting on the group of the sockets Restart
	// closed; Resume gives the sockets that enter afterwards a new group, so no Add races it.
	go func() {
		conns.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("restart: sockets still open: %w", ctx.Err())
	}
}

// Resume undoes Restart when the upgrade it was for cannot exec: the gateway accepts sockets
// again, under a new base context (Restart cancelled the old one for good) and in a new group of
// sockets (Restart's Wait may still be pending on the old one). The sockets Restart closed are
// gone, or end on their own; their clients reconnect and resume.
func (g *Gateway) Resume() {
	g.drainMu.Lock()
	defer g.drainMu.Unlock()
	g.baseCtx, g.cancelBase = context.WithCancelCause(context.Background())
	g.conns = new(sync.WaitGroup)
	g.draining.Store(false)
}

// ListenerFD returns a duplicate of ln's socket descriptor (close-on-exec, like every other fd
// until the exec that hands it over). ln must be a *net.TCPListener or *net.UnixListener.
// Closing ln afterwards does not close the socket: the duplicate keeps it, and its backlog,
// open.
func ListenerFD(ln net.Listener) (int, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("listener %T has no descriptor", ln)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("listener descriptor: %w", err)
	}
	fd := -1
	var dupErr error
	if err := rc.Control(func(d uintptr) { fd, dupErr = unix.FcntlInt(d, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, fmt.Errorf("listener descriptor: %w", err)
	}
	if dupErr != nil {
		return -1, fmt.Errorf("dup listener: %w", dupErr)
	}
	return fd, nil
}

// InheritListener makes a listener of fd, a listening socket the previous image handed over.
// fd is closed (the listener holds a duplicate); the socket itself stays open throughout.
func InheritListener(fd int) (net.Listener, error) {
	unix.CloseOnExec(fd)
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
		return nil, fmt.Errorf("inherited fd %d is not a listening socket (%v)", fd, err)
	}
	f := os.NewFile(uintptr(fd), "inherited-listener")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("inherited listener fd %d: %w", fd, err)
	}
	return ln, nil
}

// HandoverListener wraps a TCP listener so an upgrade can stop accepting without closing the
// socket and know when every connection it accepted has ended: http.Server.Shutdown alone can
// return while a connection accepted just before it is not yet tracked, and the exec would
// then drop that connection unanswered.
type HandoverListener struct {
	*net.TCPListener
	// mu guards stopping, accepting and open; changed is closed and replaced on each change
	// Drain waits for.
	mu        sync.Mutex
	stopping  bool
	accepting int // Accept calls in flight
	open      int // connections accepted and not closed
	changed   chan struct{}
}

// NewHandoverListener wraps ln, which must be a *net.TCPListener.
func NewHandoverListener(ln net.Listener) (*HandoverListener, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, fmt.Errorf("listener %T is not TCP", ln)
	}
	return &HandoverListener{TCPListener: tl, changed: make(chan struct{})}, nil
}

func (l *HandoverListener) signalLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Accept accepts a connection unless Stop was called.
func (l *HandoverListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.stopping {
		l.mu.Unlock()
		return nil, fmt.Errorf("accept: %w", net.ErrClosed)
	}
	l.accepting++
	l.mu.Unlock()
	c, err := l.TCPListener.AcceptTCP()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.accepting--
	l.signalLocked()
	if err != nil {
		if l.stopping {
			return nil, fmt.Errorf("accept: %w", net.ErrClosed)
		}
		return nil, err
	}
	l.open++
	return &countedConn{TCPConn: c, l: l}, nil
}

// Close stops accepting; the socket stays open while a duplicate of it (ListenerFD) exists.
func (l *HandoverListener) Close() error {
	l.Stop()
	return l.TCPListener.Close()
}

// Stop makes Accept fail from now on and wakes an Accept that is waiting, without closing the
// socket: connections that arrive from now on wait in its backlog.
func (l *HandoverListener) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopping {
		l.stopping = true
		_ = l.TCPListener.SetDeadline(time.Unix(1, 0))
	}
}

// Drain waits, within ctx, until no Accept is in flight and every accepted connection (a
// hijacked WebSocket's too) is closed. Call Stop first.
func (l *HandoverListener) Drain(ctx context.Context) error {
	for {
		l.mu.Lock()
		busy, open, ch := l.accepting, l.open, l.changed
		l.mu.Unlock()
		if busy == 0 && open == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("drain listener: %d connections still open: %w", open, ctx.Err())
		}
	}
}

// countedConn tells its listener when it is closed (once).
type countedConn struct {
	*net.TCPConn
	l    *HandoverListener
	once sync.Once
}

// NetConn returns the TCP connection, for code that tunes the socket under every wrapper
// (mux sets TCP_NOTSENT_LOWAT through it).
func (c *countedConn) NetConn() net.Conn { return c.TCPConn }

func (c *countedConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.signalLocked()
		c.l.mu.Unlock()
	})
	return err
}
