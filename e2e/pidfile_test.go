//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// --pid-file names the gateway once it serves, still names it after an upgrade in place (the
// same pid, written again by the new image) and is removed at exit.
func TestPidFile(t *testing.T) {
	_, bin := binaryCopy(t)
	pidFile := filepath.Join(t.TempDir(), "gateway.pid")
	tok := newToken()
	g := launchGatewayBin(t, bin, tok, nil, "--token", tok, "--pid-file", pidFile)
	want := strconv.Itoa(g.cmd.Process.Pid) + "\n"
	check := func(when string) {
		t.Helper()
		b, err := os.ReadFile(pidFile)
		if err != nil || string(b) != want {
			t.Fatalf("%s: pid file holds %q (%v), want %q", when, b, err, want)
		}
	}
	g.waitLog(t, "muxterm started", 1, 10*time.Second)
	check("serving")
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, "upgrade complete", 1, 30*time.Second)
	check("after an upgrade in place")
	if strings.Contains(g.Logs(), "pid file not") {
		t.Errorf("the gateway reported a pid file failure:\n%s", g.Logs())
	}
	g.Stop(10 * time.Second)
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Errorf("after exit: stat pid file: %v, want it removed", err)
	}
}
