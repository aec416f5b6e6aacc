package gateway

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHandoverListenerStopKeepsSocket: Stop makes Accept fail without closing the socket (a
// dial after it still connects: the kernel queues it), Drain waits for the accepted
// connections, and a duplicate taken with ListenerFD serves the queued connection once the Go
// listener is closed, as the next image does.
func TestHandoverListenerStopKeepsSocket(t *testing.T) {
	hl := loopbackHandoverListener(t)
	addr := hl.Addr().String()
	accepted := make(chan net.Conn, 1)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			c, err := hl.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			accepted <- c
		}
	}()
	dialTCP(t, addr) // open until the test ends
	var s1 net.Conn
	select {
	case s1 = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("not accepted")
	}
	fd, err := ListenerFD(hl)
	if err != nil {
		t.Fatal(err)
	}
	hl.Stop()
	select {
	case err := <-acceptErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Stop: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return after Stop")
	}
	// Drain waits for the open connection.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if err := hl.Drain(ctx); err == nil {
		t.Fatal("Drain returned with a connection open")
	}
	cancel()
	s1.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hl.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	// The Go listener closes; the duplicate keeps the socket: a dial still connects.
	if err := hl.Close(); err != nil {
		t.Fatal(err)
	}
	c2, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial after the listener closed, its duplicate open: %v", err)
	}
	defer c2.Close()
	next, err := InheritListener(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	s2, err := next.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
}

func TestInheritListenerRefusesOtherFDs(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := InheritListener(fd); err == nil {
		t.Fatal("InheritListener accepted /dev/null")
	}
	unix.Close(fd)
}

// TestResumeAfterTimedOutRestart: a Restart whose ctx ends with a socket still open leaves its
// Wait pending; Resume lets sockets enter again in a new group, so the old socket ending while
// new ones enter and leave does not reuse the group under that Wait (Go panics "WaitGroup is
// reused before previous Wait has returned"), and a later Restart waits only for the sockets
// that entered after Resume.
func TestResumeAfterTimedOutRestart(t *testing.T) {
	g := &Gateway{conns: new(sync.WaitGroup)}
	g.baseCtx, g.cancelBase = context.WithCancelCause(context.Background())
	_, stuck, ok := g.enter() // a socket whose client does not read: it outlives Restart's ctx
	if !ok {
		t.Fatal("enter refused before Restart")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	err := g.Restart(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Restart with a socket open: %v, want DeadlineExceeded", err)
	}
	if _, _, ok := g.enter(); ok {
		t.Fatal("enter admitted a socket while restarting")
	}
	g.Resume()
	// New sockets enter and leave while the stuck one ends, the counter of the old group
	// reaching zero under Restart's pending Wait.
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for range 2000 {
			base, wg, ok := g.enter()
			if !ok || base.Err() != nil {
				t.Error("enter after Resume refused or cancelled")
				return
			}
			wg.Done()
		}
	}()
	stuck.Done()
	<-loopDone
	// A socket that entered after Resume is in the new group: Restart waits for it alone.
	_, wg, ok := g.enter()
	if !ok {
		t.Fatal("enter refused after Resume")
	}
	if wg == stuck {
		t.Fatal("enter after Resume returned the old group")
	}
	restarted := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		restarted <- g.Restart(ctx)
	}()
	wg.Done()
	if err := <-restarted; err != nil {
		t.Fatalf("Restart after Resume: %v", err)
	}
}
