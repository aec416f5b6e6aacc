package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/gateway"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/internal/upgrade"
	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/reaper"
	"github.com/muxterm/muxterm/session"
)

// TestResumeAfterFailedExec: an upgrade that got past the point of no return and could not exec
// leaves the listener stopped (its socket kept by a duplicate), the sockets closed with 1012,
// the servers closed and the sessions handed over, then put back (Registry.ResumeHandover);
// resume serves again on the same socket: the client that was attached resumes by itself, its
// session has the same process and still echoes, and a new session opens.
func TestResumeAfterFailedExec(t *testing.T) {
	const tok = "resume-after-failed-exec-token"
	c, err := parse([]string{"--token", tok, "--listen", "127.0.0.1:0", "--allow-cmd", "cat",
		"--resume-hold", "60s", "--shutdown-timeout", "5s", "--kill-grace", "1s"},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	hl, err := upgrade.ListenOrInherit(nil, "main", c.listen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hl.Close() }) // closed already by then, unless the test failed early
	addr := hl.Addr().String()
	guard := gateway.NewConnGuard(gateway.GuardOptions{Logger: log})
	ln, _, err := c.sec.secureListener(guard.Listener(hl), log)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := gateway.LoadPrincipals(c.token, "", log)
	if err != nil {
		t.Fatal(err)
	}
	reg := session.NewRegistry(session.Options{ScrollbackBytes: int(c.scrollback), KillGrace: c.killGrace,
		ResumeHold: c.resumeHold, Logger: log}, nil)
	gw, err := gateway.New(gateway.Options{Registry: reg, Tokens: tokens, ListenAddr: addr,
		AllowCmd: c.allowCmd, Logger: log, Mux: mux.ServerOptions{Window: int(c.window)}})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{c: c, log: log, tel: otel.Noop(), guard: guard, handler: gw, gw: gw, reg: reg,
		rp:       reaper.New(reaper.Options{Registry: reg, Grace: c.idleGrace, Interval: c.reapInterval, Logger: log}),
		serveErr: make(chan serveResult, 1)}
	s.startReaper()
	s.serveMain(ln)
	first := s.srv
	// A run that fails half-way still ends every session (no cat outlives it), the reaper and
	// both main servers, and takes their ends from serveErr (no Serve goroutine is left sending).
	shutDown, ended := false, 0
	t.Cleanup(func() {
		if !shutDown {
			if err := s.shutdown(); err != nil {
				t.Errorf("shutdown at cleanup: %v", err)
			}
		}
		started := 1
		if s.srv != first {
			started = 2
		}
		for ; ended < started; ended++ {
			select {
			case <-s.serveErr:
			case <-time.After(10 * time.Second):
				t.Errorf("a main server's Serve did not return")
				return
			}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	resumed := make(chan struct{}, 1)
	cl, err := client.Dial(ctx, "ws://"+addr+"/ws", client.DialOptions{Token: tok,
		Reconnect: &client.ReconnectOptions{OnEvent: func(e client.ReconnectEvent) {
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
	t.Cleanup(func() { _ = cl.Close() }) // before the shutdown: the client does not reconnect into it
	cat, err := cl.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Write([]byte("before\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.ReadUntil(ctx, "before"); err != nil {
		t.Fatal(err)
	}

	// What upgrade.Upgrader.Upgrade does up to its exec (docs/operations.md, steps 2 to 7), and
	// what its abort does when the exec fails, up to Resume.
	fd, err := gateway.ListenerFD(hl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	s.pauseReaper()
	hl.Stop()
	s.srv.SetKeepAlivesEnabled(false)
	if err := gw.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := hl.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	_ = s.srv.Close()
	st, err := reg.Handover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reg.ResumeHandover(st)
	lns, servers, err := s.resume(map[string]int{"main": fd})
	if err != nil {
		t.Fatal(err)
	}
	if len(lns) != 1 || lns["main"] == nil || len(servers) != 1 || servers[0] != s.srv || s.srv == first {
		t.Fatalf("resume returned listeners %v and servers %v; want main's and the new main server", lns, servers)
	}

	select {
	case <-resumed:
	case <-ctx.Done():
		t.Fatal("the client did not resume after resume")
	}
	if _, err := cat.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.ReadUntil(ctx, "after"); err != nil {
		t.Fatal(err)
	}
	if cat.Lost() != 0 {
		t.Fatalf("the stream announced %d bytes lost", cat.Lost())
	}
	list, err := cl.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Session != cat.Session() || list[0].Pid != cat.Pid() || list[0].Exit != nil {
		t.Fatalf("sessions after resume: %+v; want %s, pid %d, running", list, cat.Session(), cat.Pid())
	}
	if _, err := cl.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"cat"}}); err != nil {
		t.Fatalf("open after resume: %v", err)
	}
	pid := cat.Pid()

	shutDown = true
	if err := s.shutdown(); err != nil {
		t.Fatalf("shutdown after resume: %v", err)
	}
	if testutil.Alive(pid) {
		t.Errorf("the session's process %d outlived the shutdown", pid)
	}
	// Both main servers' ends (the first closed by the upgrade, the second by the shutdown).
	for ; ended < 2; ended++ {
		select {
		case <-s.serveErr:
		case <-time.After(10 * time.Second):
			t.Fatal("a main server's Serve did not return")
		}
	}
}
