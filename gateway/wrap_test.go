package gateway

import (
	"net"
	"testing"
)

// Every wrapper the binary puts around an accepted connection (the handover listener's count,
// the connection guard) hands the TCP connection on through NetConn, so mux can set
// TCP_NOTSENT_LOWAT on it: without it a control reply waits behind everything the kernel holds
// (a merge that left countedConn without NetConn let a reply on a 40 KB/s link take over 15 s).
func TestAcceptedConnUnwrapsToTCP(t *testing.T) {
	hl := loopbackHandoverListener(t)
	ln := NewConnGuard(GuardOptions{}).Listener(hl)
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1)) // until the test closes its side
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var cur any = c
	for {
		nc, ok := cur.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		cur = nc.NetConn()
	}
	if _, ok := cur.(*net.TCPConn); !ok {
		t.Errorf("accepted connection unwraps to %T, want *net.TCPConn", cur)
	}
}
