package testutil

import (
	"net"
	"testing"
)

// MuteListener listens on 127.0.0.1 and accepts connections it never answers, as a server hung
// before the WebSocket upgrade would. It returns the address and a channel that receives the
// first connections accepted (4 at most; later ones are held all the same). The listener, its
// accept loop and every connection end with the test.
func MuteListener(t testing.TB) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan net.Conn, 4)
	var held []net.Conn // the accept loop's until it returns, then the cleanup's
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // closed at the test's end
			}
			held = append(held, conn)
			select {
			case ch <- conn:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, conn := range held {
			conn.Close()
		}
	})
	return ln.Addr().String(), ch
}
