//go:build e2e

package e2e

import (
	"net"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// logDuration returns the duration logged as key=… on the last line of the gateway's log that
// contains line.
func logDuration(t *testing.T, g *gateway, line, key string) time.Duration {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(line) + `.* ` + key + `=(\S+)`).FindAllStringSubmatch(g.Logs(), -1)
	if m == nil {
		t.Fatalf("no %s=… on a %q line:\n%s", key, line, g.Logs())
	}
	d, err := time.ParseDuration(m[len(m)-1][1])
	if err != nil {
		t.Fatalf("%s=%s: %v", key, m[len(m)-1][1], err)
	}
	return d
}

// TestUpgradeDrainBound: a connection accepted before the upgrade that never sends a request
// (a browser's speculative connection) holds the upgrade's drain for drainWait (1 s), not
// longer, and is closed by it.
func TestUpgradeDrainBound(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh")
	silent, err := net.Dial("tcp", hostOf(g))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// Accepted before the signal: a request that works proves the listener is past it.
	g.dial(t).Close()
	closed := make(chan time.Time, 1)
	go func() {
		var b [1]byte
		_ = silent.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _ = silent.Read(b[:])
		closed <- time.Now()
	}()
	signalled := time.Now()
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, "upgrade complete", 1, 30*time.Second)
	drain := logDuration(t, g, "upgrade: executing", "drain")
	var at time.Time
	select {
	case at = <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the silent connection was not closed by the upgrade")
	}
	t.Logf("drain=%v; the silent connection closed %v after SIGUSR2", drain, at.Sub(signalled).Round(time.Millisecond))
	if drain < 900*time.Millisecond || drain > 1300*time.Millisecond {
		t.Fatalf("drain with a connection that sent no request: %v, want about drainWait (1s)", drain)
	}
}
