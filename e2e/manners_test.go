//go:build e2e

package e2e

import (
	"net"
	"strings"
	"testing"
	"time"
)

// A port in use stops the start with an error naming --listen and make run's PORT.
func TestGatewayPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out := runRefused(t, nil, "--token", newToken(), "--listen", ln.Addr().String())
	for _, want := range []string{"address already in use", "--listen", "PORT="} {
		if !strings.Contains(out, want) {
			t.Errorf("got %q, want it to name %q", out, want)
		}
	}
}

// The warning that --window exceeds what the ring keeps behind a paused reader says which
// values to set, and the value it names for --scrollback silences it.
func TestGatewayWindowWarningNamesTheFix(t *testing.T) {
	tok := newToken()
	// 64KiB keeps nothing behind a paused reader: only --scrollback can help. 512KiB keeps
	// 224KiB: --window may go down to it instead.
	g0 := launchGateway(t, tok, nil, "--token", tok, "--scrollback", "512KiB")
	g0.waitLog(t, "muxterm started", 1, 10*time.Second)
	g0.Stop(10 * time.Second)
	if !strings.Contains(g0.Logs(), ", or --window to at most 224KiB") {
		t.Errorf("--scrollback 512KiB: no warning naming --window 224KiB:\n%s", g0.Logs())
	}
	g := launchGateway(t, tok, nil, "--token", tok, "--scrollback", "64KiB")
	g.waitLog(t, "muxterm started", 1, 10*time.Second)
	g.Stop(10 * time.Second)
	logs := g.Logs()
	i := strings.Index(logs, "set --scrollback to at least ")
	if i < 0 {
		t.Fatalf("no warning naming the --scrollback to set:\n%s", logs)
	}
	sb := strings.FieldsFunc(logs[i+len("set --scrollback to at least "):], func(r rune) bool { return r == ',' || r == '"' })[0]
	g2 := launchGateway(t, tok, nil, "--token", tok, "--scrollback", sb)
	g2.waitLog(t, "muxterm started", 1, 10*time.Second)
	g2.Stop(10 * time.Second)
	if strings.Contains(g2.Logs(), "--window is larger") {
		t.Errorf("--scrollback %s, as the warning said: still warned:\n%s", sb, g2.Logs())
	}
}
