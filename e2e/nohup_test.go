//go:build e2e

package e2e

import (
	"net/http"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
)

// TestNohupGatewayGivesSessionsTheirHangup: a gateway started with SIGHUP ignored (nohup) goes
// on ignoring it, across an upgrade in place too, but its sessions' programs are born with
// SIGHUP's default action: a kill ends a plain program with its first signal, HUP.
func TestNohupGatewayGivesSessionsTheirHangup(t *testing.T) {
	nohup, err := exec.LookPath("nohup")
	if err != nil {
		t.Skip("nohup(1) not installed (coreutils)")
	}
	tok := randomToken()
	wrap := func(c *exec.Cmd) {
		c.Path = nohup
		c.Args = append([]string{nohup}, c.Args...)
	}
	g := launchGatewayWith(t, tok, nil, wrap, "--token", tok, "--allow-cmd", "sh")
	ctx := ctxT(t, 60*time.Second)
	killedByHUP := func(when string) {
		t.Helper()
		c := g.dial(t)
		ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "echo READY; exec sleep 600"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.ReadUntil(ctx, "READY"); err != nil {
			t.Fatal(err)
		}
		res, err := c.Kill(ctx, ch.Session())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Signals, []string{"HUP"}) {
			t.Errorf("%s: the kill sent %v, want only HUP (the program was born ignoring SIGHUP)", when, res.Signals)
		}
		c.Close()
	}
	alive := func(when string) {
		t.Helper()
		if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(g.Base + "/healthz") // answered after the signal was handled
		if err != nil {
			t.Fatalf("%s: the gateway died of SIGHUP: %v\n%s", when, err, g.Logs())
		}
		resp.Body.Close()
		select {
		case <-g.exited:
			t.Fatalf("%s: the gateway exited after SIGHUP: %v", when, g.err)
		default:
		}
	}
	killedByHUP("at start")
	alive("at start")
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, "upgrade complete", 1, 30*time.Second)
	alive("after an upgrade in place")
	killedByHUP("after an upgrade in place")
}
