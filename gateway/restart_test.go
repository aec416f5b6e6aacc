package gateway

import (
	"context"
	"errors"
	"net"
	"os"
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
