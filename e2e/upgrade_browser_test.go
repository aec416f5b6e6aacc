//go:build e2e

package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBrowserSurvivesUpgradeInPlace: the bundled UI across a SIGUSR2 restart: the page
// reconnects by itself, the tab keeps its session (same id, not ended), the output before the
// upgrade appears once, and the same shell answers after it.
func TestBrowserSurvivesUpgradeInPlace(t *testing.T) {
	g := startGateway(t)
	b := newBrowser(t, g.Base, g.Token, false)
	b.echo("before-''upgrade")
	before := eval[[]tabInfo](b, "window.muxterm.tabs()")
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, "upgrade complete", 1, 30*time.Second)
	b.waitJS("window.muxterm.state() === 'connected'", 20*time.Second)
	b.waitPrompt()
	b.echo("after-''upgrade")
	b.screenshot("upgrade-in-place")
	after := eval[[]tabInfo](b, "window.muxterm.tabs()")
	if len(after) != len(before) || after[0].Session != before[0].Session || after[0].Exited != nil {
		t.Fatalf("tabs after the upgrade: %+v, want the live sessions of %+v", after, before)
	}
	if n := strings.Count(eval[string](b, "window.muxterm.bufferText()"), "\nbefore-upgrade"); n != 1 {
		t.Errorf("the output before the upgrade appears %d times, want once", n)
	}
}
