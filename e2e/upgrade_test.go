//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// buildGateway builds cmd/gateway with ldflags into out.
func buildGateway(t *testing.T, out, ldflags string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", out, "github.com/muxterm/muxterm/cmd/gateway")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", ldflags, err, b)
	}
}

// binaryCopy copies the gateway binary into a directory of the test's own, where an upgrade
// may replace it, and returns the directory and the copy.
func binaryCopy(t *testing.T) (dir, bin string) {
	t.Helper()
	b, err := os.ReadFile(binary(t))
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	bin = filepath.Join(dir, "gateway")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, bin
}

// waitLog waits until the gateway has printed want at least n times.
func (g *gateway) waitLog(t *testing.T, want string, n int, d time.Duration) {
	t.Helper()
	testutil.WaitFor(t, d, fmt.Sprintf("%d× %q in the gateway's log", n, want), func() bool {
		return strings.Count(g.Logs(), want) >= n
	})
}

// stream follows one channel of a session printing 1, 2, 3, … a line each, across reconnects:
// got is everything read, in order, which must always be a prefix of the sequence.
type stream struct {
	id    string
	mu    sync.Mutex
	got   []byte
	ended chan error // the current channel's end
}

func (s *stream) follow(ch *client.Channel) {
	s.ended = make(chan error, 1)
	ended := s.ended
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := ch.Read(buf)
			s.mu.Lock()
			s.got = append(s.got, buf[:n]...)
			s.mu.Unlock()
			if err != nil {
				ended <- err
				return
			}
		}
	}()
}

func (s *stream) len() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.got))
}

// checkExact fails unless what was read is exactly the start of the sequence.
func (s *stream) checkExact(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	got := slices.Clone(s.got)
	s.mu.Unlock()
	var want bytes.Buffer
	for i := 1; want.Len() < len(got); i++ {
		want.WriteString(strconv.Itoa(i))
		want.WriteByte('\n')
	}
	if w := want.Bytes()[:len(got)]; !bytes.Equal(got, w) {
		i := 0
		for i < len(got) && got[i] == w[i] {
			i++
		}
		t.Fatalf("stream differs from the sequence at byte %d of %d: got %q, want %q", i, len(got),
			got[max(i-20, 0):min(i+20, len(got))], w[max(i-20, 0):min(i+20, len(w))])
	}
}

// waitGrowth waits until the stream has read more than n bytes.
func (s *stream) waitGrowth(t *testing.T, n int64, d time.Duration) {
	t.Helper()
	testutil.WaitFor(t, d, fmt.Sprintf("stream %s past %d bytes", s.id, n), func() bool { return s.len() > n })
}

// dialer hammers /healthz on fresh connections until stop is closed (for at most limit),
// recording failures and the slowest answer.
type dialer struct {
	stop   chan struct{}
	done   chan struct{}
	tries  int
	errs   []error
	slowst time.Duration
}

func startDialer(base string, limit time.Duration) *dialer {
	d := &dialer{stop: make(chan struct{}), done: make(chan struct{})}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	go func() {
		defer close(d.done)
		end := time.Now().Add(limit)
		for time.Now().Before(end) {
			select {
			case <-d.stop:
				return
			default:
			}
			d.tries++
			start := time.Now()
			resp, err := hc.Get(base + "/healthz")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err != nil {
				d.errs = append(d.errs, err)
			}
			d.slowst = max(d.slowst, time.Since(start))
		}
	}()
	return d
}

func (d *dialer) finish() {
	close(d.stop)
	<-d.done
}

// observe is a bare socket that reports what it reads until the server closes it: whether a
// gateway.restart notification came, and the close code.
func observe(t *testing.T, g *gateway) <-chan string {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}, HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial(g.WS, http.Header{"Authorization": {"Bearer " + g.Token}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	if err := ws.WriteMessage(websocket.TextMessage,
		[]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"client":{"name":"observer","version":"0"}}}`)); err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 1)
	go func() {
		var notes []string
		for {
			_ = ws.SetReadDeadline(time.Now().Add(60 * time.Second))
			_, b, err := ws.ReadMessage()
			if err != nil {
				var ce *websocket.CloseError
				code := 0
				if errors.As(err, &ce) {
					code = ce.Code
				}
				out <- fmt.Sprintf("%s close=%d", strings.Join(notes, ","), code)
				return
			}
			var m struct {
				Method string `json:"method"`
			}
			if json.Unmarshal(b, &m) == nil && m.Method != "" {
				notes = append(notes, m.Method)
			}
		}
	}()
	return out
}

// dialRetry dials until it succeeds or d passes (a reconnect racing the handover may be told
// 503 by the old image; it must never be refused at the TCP level, which the dialer checks).
func dialRetry(t *testing.T, g *gateway, d time.Duration) *client.Client {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := client.Dial(ctx, g.WS, client.DialOptions{Token: g.Token})
		cancel()
		if err == nil {
			t.Cleanup(func() { c.Close() })
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("reconnect: %v\n%s", err, g.Logs())
		}
		t.Logf("reconnect: %v (retrying)", err)
		time.Sleep(20 * time.Millisecond) // a retry backoff, as a client's
	}
}

func sessionsByID(t *testing.T, ctx context.Context, c *client.Client) map[string]proto.SessionInfo {
	t.Helper()
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]proto.SessionInfo, len(list))
	for _, s := range list {
		out[s.Session] = s
	}
	return out
}

// TestUpgradeInPlace: SIGUSR2 re-executes the gateway in the same process, first the same
// binary (restart), then a build with another version (deploy). After each: same gateway PID,
// the same sessions with the same processes (still its children), the stream resumed byte-exact
// from the client's offset, a dialer in a tight loop never refused, /readyz ready; a session
// that exits after the upgrades reports its real code, one that exited before keeps its code.
// Then two upgrades that must be refused (a build that reads another state version, a missing
// binary) leave the gateway serving every session on the same socket.
func TestUpgradeInPlace(t *testing.T) {
	dir, bin := binaryCopy(t)
	next := filepath.Join(dir, "gateway-next")
	buildGateway(t, next, "-X main.version=9.9.9-e2e")
	other := filepath.Join(dir, "gateway-other-state")
	buildGateway(t, other, "-X github.com/muxterm/muxterm/internal/upgrade.stateVersion=99")

	tok := randomToken()
	g := launchGatewayBin(t, bin, tok, nil, "--token", tok, "--allow-cmd", "sh", "--allow-cmd", "cat",
		"--resume-hold", "60s", "--reap-interval", "10m")
	gwPid := g.cmd.Process.Pid
	ctx := ctxT(t, 170*time.Second)
	c := g.dial(t)

	// The sessions: a slow endless sequence, an idle cat, one that exits with the code it
	// reads, one that exited already.
	seqCh, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Name: "seq", Cmd: []string{"sh", "-c",
		`stty raw -echo; i=0; while :; do i=$((i+1)); echo $i; [ $((i % 25)) -eq 0 ] && sleep 0.02; done`}})
	if err != nil {
		t.Fatal(err)
	}
	st := &stream{id: seqCh.Session()}
	st.follow(seqCh)
	catCh, err := c.Open(ctx, client.OpenOptions{Cols: 100, Rows: 30, Name: "cat", Cmd: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	exitCh, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Name: "exit-later",
		Cmd: []string{"sh", "-c", "stty raw -echo; read x; exit $x"}})
	if err != nil {
		t.Fatal(err)
	}
	doneCh, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Name: "exited", Cmd: []string{"sh", "-c", "exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosedCtx(ctx, t, doneCh.Exited(), "the exit-3 session did not exit")
	pids := map[string]int{}
	for _, ch := range []*client.Channel{seqCh, catCh, exitCh, doneCh} {
		pids[ch.Session()] = ch.Pid()
	}
	t.Cleanup(func() {
		g.Stop(15 * time.Second)
		for id, pid := range pids {
			if testutil.Alive(pid) {
				t.Errorf("session %s's process %d outlived the gateway", id, pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	before := sessionsByID(t, ctx, c)
	if len(before) != 4 {
		t.Fatalf("listed %d sessions before the upgrade, want 4", len(before))
	}
	st.waitGrowth(t, 20000, 20*time.Second)

	upgrade := func(n int, wantVersion string) {
		t.Helper()
		obs := observe(t, g)
		d := startDialer(g.Base, 60*time.Second)
		mark := st.len()
		signalled := time.Now()
		if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		// The old socket is told and closed with 1012; the channel ends with it.
		select {
		case note := <-obs:
			if note != "gateway.restart close=1012" {
				t.Fatalf("observer saw %q, want the gateway.restart notification, then close 1012", note)
			}
		case <-ctx.Done():
			t.Fatal("no close after SIGUSR2")
		}
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatal("the client's socket was not closed")
		}
		var ce *websocket.CloseError
		if !errors.As(c.Err(), &ce) || ce.Code != 1012 {
			t.Fatalf("client socket ended with %v, want close 1012", c.Err())
		}
		<-st.ended
		g.waitLog(t, "upgrade complete", n, 60*time.Second)
		took := time.Since(signalled)
		if !strings.Contains(g.Logs(), "to="+wantVersion) {
			t.Fatalf("no upgrade to %s in the log:\n%s", wantVersion, g.Logs())
		}
		select {
		case <-g.exited:
			t.Fatalf("the gateway exited: %v\n%s", g.err, g.Logs())
		default:
		}
		if g.cmd.Process.Pid != gwPid || !testutil.Alive(gwPid) {
			t.Fatalf("gateway pid %d, alive %v; want %d", g.cmd.Process.Pid, testutil.Alive(gwPid), gwPid)
		}

		// Reconnect and resume from what was consumed.
		c = dialRetry(t, g, 20*time.Second)
		if c.Init().Server.Version != wantVersion {
			t.Fatalf("initialize says version %q, want %q", c.Init().Server.Version, wantVersion)
		}
		off := st.len()
		ch, res, err := c.Attach(ctx, st.id, &off)
		if err != nil {
			t.Fatal(err)
		}
		if res.Offset != off || res.Lost != 0 {
			t.Fatalf("attach from %d: got offset %d lost %d", off, res.Offset, res.Lost)
		}
		st.follow(ch)
		st.waitGrowth(t, off+20000, 30*time.Second)
		st.checkExact(t)
		t.Logf("upgrade %d: %v from SIGUSR2 to the new image serving (as the test saw its log); stream at %d bytes (%d at the signal)", n, took, st.len(), mark)

		// The same sessions, the same processes, still our children.
		after := sessionsByID(t, ctx, c)
		for id, b := range before {
			a, ok := after[id]
			if !ok {
				t.Fatalf("session %s (%s) not listed after the upgrade", id, b.Name)
			}
			b.Viewers, a.Viewers, b.End, a.End = 0, 0, 0, 0
			if !reflectEqual(a, b) {
				t.Fatalf("session %s changed: before %+v, after %+v", id, b, a)
			}
		}
		if len(after) != len(before) {
			t.Fatalf("listed %d sessions, want %d", len(after), len(before))
		}
		for id, pid := range pids {
			if id == doneCh.Session() {
				continue // exited and reaped before the upgrade
			}
			if pp := parentOf(pid); pp != gwPid {
				t.Fatalf("session %s: process %d's parent is %d, want the gateway %d", id, pid, pp, gwPid)
			}
		}
		if e := after[doneCh.Session()].Exit; e == nil || e.Code != 3 {
			t.Fatalf("the session that exited before: exit %+v, want code 3", e)
		}
		resp, err := http.Get(g.Base + "/readyz")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/readyz after the upgrade: %v %v", resp, err)
		}
		resp.Body.Close()
		d.finish()
		if len(d.errs) > 0 {
			t.Fatalf("dialer: %d of %d requests failed during the upgrade, first: %v\n%s", len(d.errs), d.tries, d.errs[0], g.Logs())
		}
		t.Logf("upgrade %d: dialer made %d requests, none failed, slowest %v", n, d.tries, d.slowst)
	}

	// The same binary: whatever version it was built with (make build stamps git describe).
	started := regexp.MustCompile(`msg="muxterm started" .*version=(\S+)`).FindStringSubmatch(g.Logs())
	if started == nil {
		t.Fatalf("no version in the start line:\n%s", g.Logs())
	}
	upgrade(1, started[1])
	if c.Init().Server.Version == "" {
		t.Fatal("no version")
	}
	// The deploy: a newer build replaces the file the gateway was started from.
	if err := os.Rename(next, bin); err != nil {
		t.Fatal(err)
	}
	upgrade(2, "9.9.9-e2e")

	// A session opened by the upgraded image starts with default signal actions and nothing
	// blocked: what the exec ignored for its own start is not passed on.
	fresh, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "exec sleep 60"}})
	if err != nil {
		t.Fatal(err)
	}
	pids[fresh.Session()] = fresh.Pid()
	testutil.WaitFor(t, 10*time.Second, "the fresh session to exec sleep", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", fresh.Pid()))
		return strings.TrimSpace(string(b)) == "sleep"
	})
	if ign, blk := sigMasks(t, fresh.Pid()); ign&(1<<(syscall.SIGUSR2-1)|1<<(syscall.SIGTERM-1)|1<<(syscall.SIGINT-1)) != 0 || blk != 0 {
		t.Fatalf("a session opened after the upgrade: SigIgn %#x SigBlk %#x, want USR2, TERM, INT not ignored and nothing blocked", ign, blk)
	}
	if _, err := c.Kill(ctx, fresh.Session()); err != nil {
		t.Fatal(err)
	}

	// The idle cat still echoes; the exit-later session reports the code it is given.
	catCh2, _, err := c.Attach(ctx, catCh.Session(), nil)
	if err != nil {
		t.Fatal(err)
	}
	typeUntil(ctx, t, catCh2, "after-upgrade\n", "after-upgrade")
	exitCh2, _, err := c.Attach(ctx, exitCh.Session(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exitCh2.Write([]byte("7\n")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosedCtx(ctx, t, exitCh2.Exited(), "exit-later did not exit")
	if e := exitCh2.ExitInfo(); e == nil || e.Code != 7 {
		t.Fatalf("exit after the upgrade: %+v, want code 7", e)
	}

	// Refused: a build that reads another state version, then no binary at all. Nothing
	// changes: the same socket goes on serving every session.
	if err := os.Rename(other, bin); err != nil {
		t.Fatal(err)
	}
	refuse := func(n int) {
		t.Helper()
		mark := st.len()
		if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		g.waitLog(t, "upgrade refused", n, 30*time.Second)
		st.waitGrowth(t, mark+10000, 30*time.Second)
		if got := sessionsByID(t, ctx, c); len(got) != 4 {
			t.Fatalf("after a refused upgrade: %d sessions, want 4", len(got))
		}
		select {
		case <-c.Done():
			t.Fatalf("a refused upgrade closed the socket: %v", c.Err())
		default:
		}
		if strings.Count(g.Logs(), "upgrade complete") != 2 {
			t.Fatal("a refused upgrade executed anyway")
		}
	}
	refuse(1)
	if !strings.Contains(g.Logs(), "cannot adopt handover state version") {
		t.Fatalf("the refusal does not say why:\n%s", g.Logs())
	}
	if err := os.Chmod(bin, 0o644); err != nil { // not executable
		t.Fatal(err)
	}
	refuse(2)
	// A binary that crashes in the dry run.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nkill -SEGV $$\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	refuse(3)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	refuse(4)
	st.checkExact(t)
}

// sigMasks reads the SigIgn and SigBlk masks of pid.
func sigMasks(t *testing.T, pid int) (ign, blk uint64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			ign, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
		if v, ok := strings.CutPrefix(line, "SigBlk:"); ok {
			blk, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return ign, blk
}

// reflectEqual compares two SessionInfo values field by field.
func reflectEqual(a, b proto.SessionInfo) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// TestUpgradeUnadoptableStateIsTornDown: a new image that passed the dry run but cannot adopt
// the state after the exec (a build made to fail there) tears every session down as a
// shutdown would: it kills every process, even one that ignores HUP and TERM, reaps them, says
// so in its log, and exits non-zero. Nothing is leaked.
func TestUpgradeUnadoptableStateIsTornDown(t *testing.T) {
	dir, bin := binaryCopy(t)
	broken := filepath.Join(dir, "gateway-broken")
	buildGateway(t, broken, "-X github.com/muxterm/muxterm/internal/upgrade.breakAdoption=1")

	tok := randomToken()
	g := launchGatewayBin(t, bin, tok, nil, "--token", tok, "--allow-cmd", "sh", "--kill-grace", "100ms")
	ctx := ctxT(t, 60*time.Second)
	c := g.dial(t)
	var pids []int
	for _, cmd := range []string{"exec sleep 1000", "trap '' HUP TERM; echo ready; while :; do sleep 1; done", "exec cat"} {
		ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", cmd}})
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, ch.Pid())
		if strings.Contains(cmd, "ready") {
			if _, err := ch.ReadUntil(ctx, "ready"); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			if testutil.Alive(pid) {
				t.Errorf("process %d outlived the gateway", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	if err := os.Rename(broken, bin); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.exited:
	case <-ctx.Done():
		t.Fatalf("the gateway did not exit after a state it cannot adopt:\n%s", g.Logs())
	}
	var ee *exec.ExitError
	if !errors.As(g.err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("gateway exit: %v, want a non-zero status", g.err)
	}
	logs := g.Logs()
	if !strings.Contains(logs, "handover state cannot be adopted; previous sessions torn down") ||
		!strings.Contains(logs, "found=3 survivors=0") {
		t.Fatalf("the log does not account for the teardown:\n%s", logs)
	}
	for _, pid := range pids {
		if testutil.Alive(pid) {
			t.Errorf("session process %d survived the teardown", pid)
		}
	}
}

// TestStopSignalDuringUpgradeIsNotLost: a SIGTERM right behind a SIGUSR2 stops the gateway
// whichever image receives it (the old one hands "stop" over when it arrived past the point of
// no return), as does one once the new image serves; no session process survives. (One that
// lands inside the exec itself, before the new image's first package initializer, is the
// documented exception: docs/operations.md.)
func TestStopSignalDuringUpgradeIsNotLost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after string // log line to wait for before SIGTERM; "" for none
	}{{"right behind", ""}, {"after the upgrade", "upgrade complete"}} {
		t.Run(tc.name, func(t *testing.T) {
			g := startGateway(t, "--allow-cmd", "sh")
			ctx := ctxT(t, 60*time.Second)
			c := g.dial(t)
			ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "exec sleep 1000"}})
			if err != nil {
				t.Fatal(err)
			}
			pid := ch.Pid()
			t.Cleanup(func() {
				if testutil.Alive(pid) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
				t.Fatal(err)
			}
			if tc.after != "" {
				g.waitLog(t, tc.after, 1, 20*time.Second)
			}
			if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-g.exited:
			case <-ctx.Done():
				t.Fatalf("the gateway did not stop after SIGUSR2 then SIGTERM (%v):\n%s", ctx.Err(), g.Logs())
			}
			if g.err != nil {
				t.Fatalf("gateway exit: %v\n%s", g.err, g.Logs())
			}
			if testutil.Alive(pid) {
				t.Fatalf("session process %d survived the stop:\n%s", pid, g.Logs())
			}
			t.Logf("stopped by the %s image; handed over as a stop: %v", map[bool]string{true: "new", false: "old"}[strings.Contains(g.Logs(), "upgrade complete")],
				strings.Contains(g.Logs(), "a stop signal arrived during the upgrade"))
		})
	}
}
