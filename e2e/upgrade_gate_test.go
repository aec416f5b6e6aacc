//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
)

// TestUpgradeServesBeforeAdoption: the new image serves its listener before it adopts the
// sessions. With the adoption held (a build that waits on a FIFO before adopting), /healthz is
// answered, while /readyz and a WebSocket dial wait; once the adoption runs, both complete and
// the session is there, same pid, its output byte-exact from where the client left it.
func TestUpgradeServesBeforeAdoption(t *testing.T) {
	dir, bin := binaryCopy(t)
	fifo := filepath.Join(dir, "hold")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	held := filepath.Join(dir, "gateway-held")
	buildGateway(t, held, "-X github.com/muxterm/muxterm/internal/upgrade.holdAdoption="+fifo)

	tok := randomToken()
	g := launchGatewayBin(t, bin, tok, nil, "--token", tok, "--allow-cmd", "sh", "--resume-hold", "60s")
	ctx := ctxT(t, 60*time.Second)
	c := g.dial(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "stty -echo; echo ready; exec cat"}})
	if err != nil {
		t.Fatal(err)
	}
	id, pid := ch.Session(), ch.Pid()
	if _, err := ch.ReadUntil(ctx, "ready\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Write([]byte("before\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "before\r\n"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.Stop(15 * time.Second)
		if testutil.Alive(pid) {
			t.Errorf("session process %d outlived the gateway", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if err := os.Rename(held, bin); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() { // the held image opens the FIFO for reading; this open meets it
		if released {
			return
		}
		released = true
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Errorf("release the adoption: %v", err)
			return
		}
		f.Close()
	}
	t.Cleanup(release) // a failure below must not leave the gateway held
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, "adoption held until", 1, 30*time.Second)

	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get(g.Base + "/healthz")
	if err != nil {
		t.Fatalf("/healthz while the adoption is held: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz while the adoption is held: %d", resp.StatusCode)
	}
	ready := make(chan int, 1)
	go func() {
		resp, err := hc.Get(g.Base + "/readyz")
		if err != nil {
			ready <- -1
			return
		}
		resp.Body.Close()
		ready <- resp.StatusCode
	}()
	type dialed struct {
		c   *client.Client
		err error
	}
	ws := make(chan dialed, 1)
	go func() {
		c2, err := client.Dial(ctx, g.WS, client.DialOptions{Token: tok})
		ws <- dialed{c2, err}
	}()
	// Another /healthz answered after both were sent shows the gateway has read them; neither
	// can be answered while the adoption is held (only this test releases it).
	resp, err = hc.Get(g.Base + "/healthz")
	if err != nil {
		t.Fatalf("/healthz while the adoption is held: %v", err)
	}
	resp.Body.Close()
	select {
	case code := <-ready:
		t.Fatalf("/readyz answered %d before the sessions were adopted", code)
	case d := <-ws:
		t.Fatalf("a WebSocket was served before the sessions were adopted (err %v)", d.err)
	default:
	}

	release()
	if code := <-ready; code != http.StatusOK {
		t.Fatalf("/readyz after the adoption: %d", code)
	}
	d := <-ws
	if d.err != nil {
		t.Fatalf("dial after the adoption: %v", d.err)
	}
	defer d.c.Close()
	sessions, err := d.c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 1 || sessions[0].Session != id || sessions[0].Pid != pid || sessions[0].Exit != nil {
		t.Fatalf("after the upgrade: %+v, want session %s with pid %d, running", sessions, id, pid)
	}
	// The first channel's socket got the 1012; attach again from where it had read.
	off := ch.Offset()
	ch2, res, err := d.c.Attach(ctx, id, &off)
	if err != nil || res.Lost != 0 || res.Offset != off {
		t.Fatalf("attach from %d: %+v, %v", off, res, err)
	}
	if _, err := ch2.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	got, err := ch2.ReadUntil(ctx, "after\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if got != "after\r\n" {
		t.Fatalf("read %q after the upgrade, want exactly the new echo", got)
	}
}

// TestUpgradeThatCannotExecServesAgain: an upgrade that gets past the point of no return (the
// sockets told and closed with 1012, the sessions quiesced) and then cannot exec (a build whose
// every exec fails, the fallback's too) puts the sessions back and serves again from the same
// image on the same socket: no connection is refused meanwhile, a client that reconnects by
// itself resumes its stream byte-exact, the sessions keep their processes, new sessions open,
// and a later SIGTERM stops it as usual with every session process ended.
func TestUpgradeThatCannotExecServesAgain(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "gateway")
	buildGateway(t, bin, "-X github.com/muxterm/muxterm/internal/upgrade.breakExec=1")
	tok := randomToken()
	g := launchGatewayBin(t, bin, tok, nil, "--token", tok, "--allow-cmd", "sh", "--allow-cmd", "cat",
		"--resume-hold", "60s")
	ctx := ctxT(t, 90*time.Second)
	resumed := make(chan struct{}, 1)
	c, err := client.Dial(ctx, g.WS, client.DialOptions{Token: tok, Reconnect: &client.ReconnectOptions{
		OnEvent: func(e client.ReconnectEvent) {
			if e.Resumed {
				select {
				case resumed <- struct{}{}:
				default:
				}
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, seqCh, catCh := seqAndCat(ctx, t, g, c)
	pids := map[string]int{seqCh.Session(): seqCh.Pid(), catCh.Session(): catCh.Pid()}
	st.waitGrowth(t, 5000, 20*time.Second)

	d := startDialer(g.Base, 60*time.Second)
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, "this image serves again", 1, 30*time.Second)
	select {
	case <-resumed:
	case <-ctx.Done():
		t.Fatalf("the client did not resume:\n%s", g.Logs())
	}
	mark := st.len()
	st.waitGrowth(t, mark+5000, 20*time.Second)
	d.finish()
	if len(d.errs) > 0 {
		t.Fatalf("dialer: %d of %d requests failed, first %v", len(d.errs), d.tries, d.errs[0])
	}
	st.checkExact(t)
	if seqCh.Lost() != 0 {
		t.Fatalf("the stream announced %d bytes lost", seqCh.Lost())
	}
	got := sessionsByID(t, ctx, c)
	for id, pid := range pids {
		if s, ok := got[id]; !ok || s.Pid != pid || s.Exit != nil {
			t.Fatalf("session %s after the failed upgrade: %+v (listed %v), want pid %d running", id, s, ok, pid)
		}
	}
	// The cat session still echoes, and a new session opens.
	if _, err := catCh.Write([]byte("still-here\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := catCh.ReadUntil(ctx, "still-here"); err != nil {
		t.Fatal(err)
	}
	extra, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"cat"}})
	if err != nil {
		t.Fatalf("open after the failed upgrade: %v", err)
	}
	pids[extra.Session()] = extra.Pid()
	if strings.Contains(g.Logs(), "upgrade complete") {
		t.Fatal("an upgrade completed in a build whose exec fails")
	}
	g.Stop(15 * time.Second)
	if g.err != nil {
		t.Fatalf("gateway exit after SIGTERM: %v\n%s", g.err, g.Logs())
	}
}

// seqAndCat opens on c a session printing 1, 2, 3, … (followed by the stream it returns) and an
// idle cat, and checks when the test ends that stopping g ended both processes.
func seqAndCat(ctx context.Context, t *testing.T, g *gateway, c *client.Client) (*stream, *client.Channel, *client.Channel) {
	t.Helper()
	seqCh, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c",
		`stty raw -echo; i=0; while :; do i=$((i+1)); echo $i; [ $((i % 25)) -eq 0 ] && sleep 0.02; done`}})
	if err != nil {
		t.Fatal(err)
	}
	catCh, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{seqCh.Session(): seqCh.Pid(), catCh.Session(): catCh.Pid()}
	t.Cleanup(func() {
		g.Stop(15 * time.Second)
		for id, pid := range pids {
			if testutil.Alive(pid) {
				t.Errorf("session %s's process %d outlived the gateway", id, pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	st := &stream{id: seqCh.Session()}
	st.follow(seqCh)
	return st, seqCh, catCh
}
