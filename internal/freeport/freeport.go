// Package freeport picks loopback TCP ports for a server a test or benchmark starts later, in
// another process, on a port named in advance (a NATS route port that the other servers'
// routes name).
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// defaultLow is the start of Linux's default ephemeral range (and below the IANA one).
const defaultLow = 32768

var (
	mu     sync.Mutex
	handed = map[int]bool{} // ports Port returned in this process; set; value is always true
)

// Port returns a loopback port that is free now and lies below the kernel's ephemeral port range.
// A port the kernel hands out itself (a listener on port 0, the source port of any outgoing
// connection on the machine) can be handed out again, to another socket, before the server that
// was meant to listen on it does: that server then cannot bind. Outside the ephemeral range only
// an explicit bind takes a port. Port never returns the same port twice in one process. It is
// safe to call from any goroutine.
func Port() (int, error) {
	low := ephemeralLow()
	span := min(low-1024, 12000)
	mu.Lock()
	defer mu.Unlock()
	for range 200 {
		p := low - 1 - rand.IntN(span)
		if handed[p] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // in use
		}
		ln.Close()
		handed[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("freeport: no free port in %d-%d", low-span, low-1)
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return defaultLow
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return defaultLow
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 2048 {
		return defaultLow
	}
	return n
}
