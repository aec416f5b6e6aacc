package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPort: the ports are distinct, below the ephemeral range, and can be listened on.
func TestPort(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if p >= low || p < 1024 {
			t.Fatalf("port %d: want below the ephemeral range's start %d and above 1023", p, low)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("listen on port %d: %v", p, err)
		}
		ln.Close()
	}
}
