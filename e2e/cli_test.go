//go:build e2e

package e2e

// Tests of the muxterm command (cmd/muxterm): the real binary, under a real PTY where it is
// interactive, against the real gateway binary. MUXTERM_CLI_BIN names the command's binary;
// without it the test builds one.

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

var cliBin = &goBinary{env: "MUXTERM_CLI_BIN", pkg: "github.com/muxterm/muxterm/cmd/muxterm", name: "muxterm"}

// cliBinary returns the muxterm command: $MUXTERM_CLI_BIN, or one built once for this run.
func cliBinary(t *testing.T) string { return cliBin.get(t) }

// cliEnv is the environment of a muxterm run against g: its URL and token, an empty config
// directory, and extra (which wins).
func cliEnv(t *testing.T, g *gateway, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MUXTERM_") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "XDG_CONFIG_HOME="+t.TempDir())
	if g != nil {
		env = append(env, "MUXTERM_URL="+g.WS, "MUXTERM_TOKEN="+g.Token)
	}
	return append(env, extra...)
}

// runCLI runs muxterm without a terminal (stdin empty) and returns stdout, stderr and the exit
// code.
func runCLI(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	return runCmd(t, 30*time.Second, env, cliBinary(t), args...)
}

// term is muxterm running under a PTY that the test reads as its terminal. With answer set the
// test answers the terminal queries DA1, DSR and OSC 11 as a terminal would.
type term struct {
	t      *testing.T
	cmd    *exec.Cmd
	ptmx   *os.File
	tty    *os.File // the slave, when the test keeps it
	answer bool
	slow   chan slowAnswer // answers to write slowTerminal after their query, in order; nil: at once

	mu       sync.Mutex
	out      []byte // everything the command wrote to the terminal
	scanned  int    // out[:scanned] has been searched for queries
	answered int    // queries answered
	written  int    // slow answers written

	changed chan struct{} // capacity 1: out or answered grew
	exited  chan struct{} // closed when the command has exited and its output is read
	code    int
}

// queries are what the test answers, and how.
var queries = []struct{ q, a string }{
	{"\x1b[c", "\x1b[?62;22c"},
	{"\x1b[6n", "\x1b[5;1R"},
	{"\x1b]11;?\x07", "\x1b]11;rgb:0000/0000/0000\x1b\\"},
}

func startTerm(t *testing.T, env []string, answer bool, args ...string) *term {
	t.Helper()
	return startTermTTY(t, env, answer, false, args...)
}

// slowTerminal is how long a slow terminal (a terminal across a slow link) takes to answer.
const slowTerminal = 300 * time.Millisecond

type slowAnswer struct {
	a   string
	due time.Time
}

// startTermTTY is startTerm; with keepTTY the test keeps the terminal's slave side open (tm.tty)
// after the command exits, to read what is left in its input queue.
func startTermTTY(t *testing.T, env []string, answer, keepTTY bool, args ...string) *term {
	t.Helper()
	return startTermSized(t, env, answer, keepTTY, 80, args...)
}

// startTermSized is startTermTTY on a terminal cols wide (24 rows).
func startTermSized(t *testing.T, env []string, answer, keepTTY bool, cols uint16, args ...string) *term {
	t.Helper()
	tm := &term{t: t, answer: answer, changed: make(chan struct{}, 1), exited: make(chan struct{})}
	tm.cmd = exec.Command(cliBinary(t), args...)
	tm.cmd.Env = env
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	tm.cmd.Stdin, tm.cmd.Stdout, tm.cmd.Stderr = tty, tty, tty
	tm.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := tm.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if keepTTY {
		// The slave stays open for the test, closed in the cleanup below before the master so
		// the read ends; the terminal answers slowly, as across a slow link.
		tm.tty = tty
		tm.slow = make(chan slowAnswer, 16)
		slowDone := make(chan struct{})
		go func() {
			defer close(slowDone)
			for sa := range tm.slow {
				tmr := time.NewTimer(time.Until(sa.due))
				<-tmr.C
				_, _ = ptmx.Write([]byte(sa.a))
				tm.mu.Lock()
				tm.written++
				tm.mu.Unlock()
				select {
				case tm.changed <- struct{}{}:
				default:
				}
			}
		}()
		t.Cleanup(func() { <-slowDone })
	} else {
		tty.Close()
	}
	tm.ptmx = ptmx
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := ptmx.Read(buf)
			if n > 0 {
				tm.received(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		err := tm.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			tm.code = ee.ExitCode()
		} else if err != nil {
			tm.code = -1
		}
		// The slave is closed with the command; what it wrote is still readable. (With the
		// slave kept open the read does not end: the output is whatever arrived by now.)
		if !keepTTY {
			<-readDone
		}
		close(tm.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-tm.exited:
		default:
			_ = tm.cmd.Process.Kill()
			<-tm.exited
		}
		if tm.tty != nil {
			tm.tty.Close()
		}
		<-readDone
		if tm.slow != nil {
			close(tm.slow)
		}
		ptmx.Close()
	})
	return tm
}

func (tm *term) received(b []byte) {
	tm.mu.Lock()
	tm.out = append(tm.out, b...)
	var answers []string
	if tm.answer {
		// Answer each query once, in order; a query split across reads waits for its end.
		for {
			first, at := -1, len(tm.out)
			for i, q := range queries {
				if j := bytes.Index(tm.out[tm.scanned:], []byte(q.q)); j >= 0 && tm.scanned+j < at {
					first, at = i, tm.scanned+j
				}
			}
			if first < 0 {
				break
			}
			answers = append(answers, queries[first].a)
			tm.scanned = at + len(queries[first].q)
		}
		if keep := len(tm.out) - 8; keep > tm.scanned {
			tm.scanned = keep
		}
		tm.answered += len(answers)
	}
	tm.mu.Unlock()
	for _, a := range answers {
		if tm.slow != nil {
			tm.slow <- slowAnswer{a, time.Now().Add(slowTerminal)}
			continue
		}
		_, _ = tm.ptmx.Write([]byte(a))
	}
	select {
	case tm.changed <- struct{}{}:
	default:
	}
}

func (tm *term) output() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return string(tm.out)
}

// waitUntil waits until cond holds over the output, or fails the test after d.
func (tm *term) waitUntil(d time.Duration, what string, cond func(out string, answered int) bool) {
	tm.t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		tm.mu.Lock()
		ok := cond(string(tm.out), tm.answered)
		tm.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-tm.changed:
		case <-tm.exited:
			tm.mu.Lock()
			ok := cond(string(tm.out), tm.answered)
			tm.mu.Unlock()
			if !ok {
				tm.t.Fatalf("muxterm exited (code %d) before %s; output:\n%q", tm.code, what, tm.output())
			}
			return
		case <-deadline.C:
			tm.t.Fatalf("timed out waiting for %s; output:\n%q", what, tm.output())
		}
	}
}

func (tm *term) expect(want string) {
	tm.t.Helper()
	tm.waitUntil(15*time.Second, fmt.Sprintf("%q", want), func(out string, _ int) bool { return strings.Contains(out, want) })
}

func (tm *term) send(s string) {
	tm.t.Helper()
	if _, err := tm.ptmx.Write([]byte(s)); err != nil {
		tm.t.Fatal(err)
	}
}

// cooked reports whether the terminal is in cooked mode (canonical, echoing), as a shell leaves
// it, rather than muxterm's raw mode.
func (tm *term) cooked() bool {
	tm.t.Helper()
	tio, err := unix.IoctlGetTermios(int(tm.ptmx.Fd()), unix.TCGETS)
	if err != nil {
		tm.t.Fatal(err)
	}
	return tio.Lflag&unix.ICANON != 0 && tio.Lflag&unix.ECHO != 0
}

// detach types the detach keys at the start of a line and waits for muxterm to exit 0.
func (tm *term) detach() {
	tm.t.Helper()
	tm.send("\r~.")
	if code := tm.wait(); code != 0 {
		tm.t.Fatalf("detach: exit code %d, want 0; output:\n%q", code, tm.output())
	}
}

// wait waits for the command to exit and returns its code.
func (tm *term) wait() int {
	tm.t.Helper()
	select {
	case <-tm.exited:
		return tm.code
	case <-time.After(15 * time.Second):
		tm.t.Fatalf("muxterm did not exit; output:\n%q", tm.output())
		return -1
	}
}

var idRE = regexp.MustCompile(`^[0-9a-f]{32}\n$`)

// newSession runs `muxterm new` with args and returns the id it printed.
func newSession(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out, errOut, code := runCLI(t, env, append([]string{"new"}, args...)...)
	if code != 0 || !idRE.MatchString(out) {
		t.Fatalf("muxterm new: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	return strings.TrimSpace(out)
}

func TestCLIAttachTypeResizeDetachReattach(t *testing.T) {
	g := startGateway(t)
	env := cliEnv(t, g)
	id := newSession(t, env, "--name", "work")

	out, _, code := runCLI(t, env, "ls")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "work") || !strings.HasPrefix(out, "ID ") {
		t.Fatalf("ls: code %d\n%s", code, out)
	}

	tm := startTerm(t, env, true, "attach", "work")
	tm.send("echo hel''lo-$((6*7))\r")
	tm.expect("hello-42")
	if tm.cooked() {
		t.Fatal("the terminal is not in raw mode while attached")
	}

	// The outer terminal's size follows to the session: SIGWINCH, then session.resize.
	if err := pty.Setsize(tm.ptmx, &pty.Winsize{Rows: 33, Cols: 101}); err != nil {
		t.Fatal(err)
	}
	c := g.dial(t)
	testutil.WaitFor(t, 10*time.Second, "the session to be 101x33", func() bool {
		list, err := c.List(ctxT(t, 5*time.Second))
		return err == nil && len(list) == 1 && list[0].Cols == 101 && list[0].Rows == 33
	})
	tm.send("stty size\r")
	tm.expect("33 101")

	tm.detach()
	if !strings.Contains(tm.output(), "muxterm: detached from session "+id+" (work)") {
		t.Fatalf("no detach line in %q", tm.output())
	}
	if !tm.cooked() {
		t.Fatal("the terminal was not restored after detach")
	}
	list, err := c.List(ctxT(t, 5*time.Second))
	if err != nil || len(list) != 1 || list[0].Session != id || list[0].Exit != nil || list[0].Viewers != 0 {
		t.Fatalf("after detach: %+v %v, want the session running with no viewer", list, err)
	}

	// Reattach by id: the replay shows the earlier output; the program's exit ends attach.
	tm2 := startTerm(t, env, true, "attach", id)
	tm2.expect("hello-42")
	tm2.expect("33 101")
	tm2.send("exit 7\r")
	if code := tm2.wait(); code != 7 {
		t.Fatalf("exit 7: attach exited %d; output:\n%q", code, tm2.output())
	}
	if !strings.Contains(tm2.output(), "exited with code 7") {
		t.Fatalf("no exit line in %q", tm2.output())
	}
	if !tm2.cooked() {
		t.Fatal("the terminal was not restored after the program's exit")
	}
}

func TestCLIReplayQueriesDoNotReachPTY(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "*")
	env := cliEnv(t, g)
	// The program asks DA1, DSR and OSC 11 with nobody attached, then logs every byte it reads
	// (cat -v shows ESC as ^[).
	id := newSession(t, env, "--name", "q", "--", "sh", "-c",
		`printf '\033[c\033[6n\033]11;?\007'; stty raw -echo; printf READY; exec cat -v`)
	c := g.dial(t)
	ctx := ctxT(t, 15*time.Second)
	ch, _, err := c.Attach(ctx, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Read until READY (the client is closed in cleanup, which ends a Read left waiting).
	got := make(chan error, 1)
	go func() {
		var out []byte
		buf := make([]byte, 4096)
		for !bytes.Contains(out, []byte("READY")) {
			n, err := ch.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				got <- fmt.Errorf("read until READY: %w (got %q)", err, out)
				return
			}
		}
		got <- nil
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("no READY from the session")
	}
	if err := ch.Detach(ctx); err != nil {
		t.Fatal(err)
	}

	tm := startTerm(t, env, true, "attach", "q")
	// Three queries in the replay, then attach's sentinel: four answers typed into muxterm.
	tm.waitUntil(15*time.Second, "four answered queries", func(_ string, n int) bool { return n >= 4 })
	tm.send("Z1")
	tm.expect("Z1")
	after := tm.output()[strings.Index(tm.output(), "READY")+len("READY"):]
	if after != "\x1b[cZ1" {
		t.Fatalf("after the replay the terminal shows %q; want the sentinel and Z1 only (a reply reached the PTY)", after)
	}
	tm.detach()
}

func TestCLIExec(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "*")
	env := cliEnv(t, g)
	for _, tc := range []struct {
		cmd  string
		code int
	}{
		{"exit 3", 3},
		{"kill -TERM $$", 143},
		{"exit 0", 0},
	} {
		_, errOut, code := runCLI(t, env, "exec", "--", "sh", "-c", tc.cmd)
		if code != tc.code {
			t.Errorf("exec %q: exit %d, want %d (stderr %q)", tc.cmd, code, tc.code, errOut)
		}
	}
	want := expectedSeq(20000)
	out, errOut, code := runCLI(t, env, "exec", "--", "seq", "1", "20000")
	if code != 0 || out != string(want) {
		t.Fatalf("exec seq: exit %d, %d bytes, want %d (pipes: the program's bytes); stderr %q", code, len(out), len(want), errOut)
	}
	for _, tty := range []string{"-t", "--tty"} {
		out, errOut, code = runCLI(t, env, "exec", tty, "--", "seq", "1", "20000")
		if code != 0 || out != strings.ReplaceAll(string(want), "\n", "\r\n") {
			t.Fatalf("exec %s seq: exit %d, %d bytes, want %d (the PTY's CR LF); stderr %q", tty, code, len(out), len(want)+20000, errOut)
		}
	}
	out, _, code = runCLI(t, env, "exec", "-t", "--lf", "--", "seq", "1", "20000")
	if code != 0 || out != string(want) {
		t.Fatalf("exec -t --lf seq: exit %d, %d bytes, want %d", code, len(out), len(want))
	}
	noSessionsLeft(t, g, "exec") // exec removes its sessions
}

func TestCLIExecSIGTERMKillsSession(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "*")
	r := startCLI(t, cliEnv(t, g), "exec", "--", "sleep", "1000")
	c := g.dial(t)
	var pid int
	testutil.WaitFor(t, 10*time.Second, "the exec session", func() bool {
		list, err := c.List(ctxT(t, 5*time.Second))
		if err == nil && len(list) == 1 {
			pid = list[0].Pid
		}
		return pid != 0
	})
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	if code := r.exitCode(t, 15*time.Second, "exec after SIGTERM"); code != 143 {
		t.Fatalf("exec after SIGTERM: exit %d, want 143; stderr %q", code, r.stderr.String())
	}
	list, err := c.List(ctxT(t, 5*time.Second))
	if err != nil || len(list) != 0 || testutil.Alive(pid) {
		t.Fatalf("after SIGTERM: sessions %+v (%v), sleep alive %v; want none", list, err, testutil.Alive(pid))
	}
}

// Ctrl-C while exec connects ends it at once with 130, even when the server accepted the
// connection and never answers the upgrade (before, exec waited out its 10 s dial timeout).
func TestCLIExecInterruptedWhileConnecting(t *testing.T) {
	addr, accepted := testutil.MuteListener(t)
	r := startCLI(t, cliEnv(t, nil, "MUXTERM_URL=ws://"+addr, "MUXTERM_TOKEN="+randomToken()),
		"exec", "--", "true")
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("exec did not connect")
	}
	sent := time.Now()
	_ = r.cmd.Process.Signal(os.Interrupt)
	// Within 8 s: its dial timeout is 10 s.
	if code := r.exitCode(t, 8*time.Second, "exec after Ctrl-C while connecting"); code != 130 {
		t.Fatalf("exec after Ctrl-C while connecting: exit %d, want 130; stderr %q", code, r.stderr.String())
	}
	if took := time.Since(sent); took > 5*time.Second {
		t.Errorf("exec took %v to end after Ctrl-C", took)
	}
}

// cliRun is a muxterm process a test started; it is killed and waited for at the test's end.
type cliRun struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer  // read it only once done is closed
	done   chan struct{} // closed once the process was waited for, with err its result
	err    error
}

// startCLI starts the muxterm binary with env and args.
func startCLI(t *testing.T, env []string, args ...string) *cliRun {
	t.Helper()
	r := &cliRun{cmd: exec.Command(cliBinary(t), args...), done: make(chan struct{})}
	r.cmd.Env = env
	r.cmd.Stderr = &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
	})
	return r
}

// exitCode waits up to d for the process to exit and returns its exit code; it fails t, with
// the process's stderr, when it is still running then (it is killed) or did not exit by itself.
func (r *cliRun) exitCode(t *testing.T, d time.Duration, what string) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(d):
		_ = r.cmd.Process.Kill()
		<-r.done
		t.Fatalf("%s: still running after %v; stderr %q", what, d, r.stderr.String())
	}
	var ee *exec.ExitError
	switch {
	case r.err == nil:
		return 0
	case errors.As(r.err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode()
	}
	t.Fatalf("%s: %v; stderr %q", what, r.err, r.stderr.String())
	return -1
}

func TestCLIKillAndNames(t *testing.T) {
	g := startGateway(t)
	env := cliEnv(t, g)

	_, errOut, code := runCLI(t, env, "attach", "nosuch")
	if code != 1 || !strings.Contains(errOut, `no session "nosuch": there are no sessions`) {
		t.Fatalf("unknown session, none exist: exit %d, %q", code, errOut)
	}
	a := newSession(t, env, "--name", "dup")
	b := newSession(t, env, "--name", "dup")
	_, errOut, code = runCLI(t, env, "attach", "nosuch")
	if code != 1 || !strings.Contains(errOut, `no session "nosuch"; the sessions are: `+a+" (dup), "+b+" (dup)") {
		t.Fatalf("unknown session: exit %d, %q", code, errOut)
	}
	_, errOut, code = runCLI(t, env, "kill", "dup")
	if code != 1 || !strings.Contains(errOut, `the name "dup" is ambiguous: `+a+" (dup), "+b+" (dup)") {
		t.Fatalf("ambiguous name: exit %d, %q", code, errOut)
	}
	out, errOut, code := runCLI(t, env, "kill", a)
	if code != 0 || out != "killed "+a+" (HUP)\n" {
		t.Fatalf("kill: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = runCLI(t, env, "ls", "-q")
	if code != 0 || out != b+"\n" {
		t.Fatalf("ls -q after kill: exit %d, %q, want only %s", code, out, b)
	}
	out, _, code = runCLI(t, env, "kill", "dup")
	if code != 0 || out != "killed "+b+" (HUP)\n" {
		t.Fatalf("kill by the name, now unique: exit %d, %q", code, out)
	}
}

func TestCLIErrors(t *testing.T) {
	g := startGateway(t)

	_, errOut, code := runCLI(t, cliEnv(t, g, "MUXTERM_TOKEN=not-the-token-0123456789"), "ls")
	if code != 1 || !strings.Contains(errOut, "refused the token (from MUXTERM_TOKEN): check MUXTERM_TOKEN") {
		t.Fatalf("wrong token: exit %d, %q", code, errOut)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "ws://" + l.Addr().String() + "/ws"
	l.Close()
	_, errOut, code = runCLI(t, cliEnv(t, g, "MUXTERM_URL="+dead), "ls")
	if code != 1 || !strings.Contains(errOut, "no gateway at "+dead+": start it with `make run` or set MUXTERM_URL") {
		t.Fatalf("nothing listening: exit %d, %q", code, errOut)
	}

	_, errOut, code = runCLI(t, cliEnv(t, g), "frobnicate")
	if code != 2 || !strings.Contains(errOut, "unknown command") {
		t.Fatalf("unknown command: exit %d, %q", code, errOut)
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}, {"attach", "--help"}} {
		out, _, code := runCLI(t, cliEnv(t, nil), args...)
		if code != 0 || !strings.Contains(out, "MUXTERM_DETACH_KEYS") || !strings.Contains(out, "Examples:") {
			t.Fatalf("%q: exit %d, %q", args, code, out)
		}
	}
	_, errOut, code = runCLI(t, cliEnv(t, g), "exec")
	if code != 2 || !strings.Contains(errOut, "exec needs a command") {
		t.Fatalf("exec without a command: exit %d, %q", code, errOut)
	}
	out, _, code := runCLI(t, cliEnv(t, nil), "version")
	if code != 0 || !strings.HasPrefix(out, "muxterm ") {
		t.Fatalf("version: exit %d, %q", code, out)
	}
}

func TestCLIConfigFile(t *testing.T) {
	g := startGateway(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "muxterm", "config")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("url = "+g.Base+"\ntoken = "+g.Token+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(cliEnv(t, nil), "XDG_CONFIG_HOME="+dir)
	_, errOut, code := runCLI(t, env, "ls")
	if code != 1 || !strings.Contains(errOut, "has mode 0644") || !strings.Contains(errOut, "chmod 600 "+path) {
		t.Fatalf("world-readable config: exit %d, %q", code, errOut)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, env, "ls")
	if code != 0 || !strings.HasPrefix(out, "ID ") {
		t.Fatalf("config 0600 (url %s given as http): exit %d, %q, %q", g.Base, code, out, errOut)
	}
}

// TestCLIAttachResumesAfterDrop cuts muxterm's socket (through a proxy) while attached: it
// reattaches from its offset, so nothing is replayed twice and typing goes on.
func TestCLIAttachResumesAfterDrop(t *testing.T) {
	px := newCutProxy(t, "127.0.0.1:0", "")
	g := startGateway(t, "--allow-host", px.addr())
	px.setTarget(strings.TrimPrefix(g.Base, "http://"))
	env := cliEnv(t, g, "MUXTERM_URL=ws://"+px.addr()+"/ws")
	id := newSession(t, env)
	tm := startTerm(t, env, true, "attach", id)
	tm.send("echo one-$((1+1))\r")
	tm.expect("one-2")
	px.cut()
	px.waitConns(t, 3) // new, attach, and attach's redial
	tm.send("echo three-$((1+2))\r")
	tm.expect("three-3")
	if n := strings.Count(tm.output(), "one-2"); n != 1 {
		t.Fatalf("the output before the drop shows %d times, want once (resumed from the offset):\n%q", n, tm.output())
	}
	tm.detach()
}

func TestCLIExecStdinAndBrokenPipe(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "*")
	env := cliEnv(t, g)

	// -t --stdin forwards stdin to a PTY, which echoes it, as a terminal would.
	cmd := exec.Command(cliBinary(t), "exec", "-t", "--stdin", "--lf", "--", "sh", "-c", "read x; echo got-$x")
	cmd.Env = env
	cmd.Stdin = strings.NewReader("abc\n")
	out, err := cmd.Output()
	if err != nil || string(out) != "abc\ngot-abc\n" {
		t.Fatalf("exec -t --stdin: %v, stdout %q, want the echo then got-abc", err, out)
	}

	// A reader that leaves early: exec exits 141 (as SIGPIPE would) and removes its session.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	head := exec.Command("head", "-c", "2")
	head.Stdin = pr
	var headOut bytes.Buffer
	head.Stdout = &headOut
	mt := exec.Command(cliBinary(t), "exec", "--", "seq", "1", "10000000")
	mt.Env = env
	mt.Stdout = pw
	if err := head.Start(); err != nil {
		t.Fatal(err)
	}
	if err := mt.Start(); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	pw.Close()
	if err := head.Wait(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mt.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 141 {
			t.Fatalf("exec | head: %v, want exit 141", err)
		}
	case <-time.After(20 * time.Second):
		_ = mt.Process.Kill()
		<-done
		t.Fatal("exec did not exit when its reader left")
	}
	if headOut.String() != "1\n" {
		t.Fatalf("head read %q", headOut.String())
	}
	list, err := g.dial(t).List(ctxT(t, 5*time.Second))
	if err != nil || len(list) != 0 {
		t.Fatalf("after exec | head: %+v %v, want no session", list, err)
	}
}

func TestCLINewAttach(t *testing.T) {
	g := startGateway(t)
	env := cliEnv(t, g)
	tm := startTerm(t, env, false, "new", "--attach", "--name", "fresh", "--detach-keys", "ctrl-],d")
	tm.send("echo new-$((40+2))\r")
	tm.expect("new-42")
	tm.send("\x1d\x1d") // the first key twice sends it once: nothing detaches
	tm.send("\x1dd")
	if code := tm.wait(); code != 0 {
		t.Fatalf("detach: exit %d; output:\n%q", code, tm.output())
	}
	out, _, code := runCLI(t, env, "ls")
	if code != 0 || !strings.Contains(out, "fresh") || !strings.Contains(out, "running") {
		t.Fatalf("ls after new --attach: exit %d\n%s", code, out)
	}
}

func TestCLIAttachEndsWhenKilled(t *testing.T) {
	g := startGateway(t)
	env := cliEnv(t, g)
	id := newSession(t, env, "--name", "victim")
	tm := startTerm(t, env, true, "attach", "victim")
	tm.send("echo alive-$((2*3))\r")
	tm.expect("alive-6")
	out, errOut, code := runCLI(t, env, "kill", "victim")
	if code != 0 || out != "killed "+id+" (HUP)\n" {
		t.Fatalf("kill: exit %d, %q, %q", code, out, errOut)
	}
	if code := tm.wait(); code != 1 {
		t.Fatalf("attach after kill: exit %d, want 1; output:\n%q", code, tm.output())
	}
	if !strings.Contains(tm.output(), "muxterm: session "+id+" (victim) was closed by the gateway (killed)") {
		t.Fatalf("no closing line in %q", tm.output())
	}
	if !tm.cooked() {
		t.Fatal("the terminal was not restored after the kill")
	}
}

func TestCLIAttachSIGTERMDetaches(t *testing.T) {
	g := startGateway(t)
	env := cliEnv(t, g)
	id := newSession(t, env)
	tm := startTerm(t, env, true, "attach", id)
	tm.send("echo up-$((3*3))\r")
	tm.expect("up-9")
	_ = tm.cmd.Process.Signal(syscall.SIGTERM)
	if code := tm.wait(); code != 143 {
		t.Fatalf("attach after SIGTERM: exit %d, want 143; output:\n%q", code, tm.output())
	}
	if !strings.Contains(tm.output(), "muxterm: detached from session "+id+" (on terminated)") || !tm.cooked() {
		t.Fatalf("after SIGTERM: cooked %v, output %q", tm.cooked(), tm.output())
	}
	list, err := g.dial(t).List(ctxT(t, 5*time.Second))
	if err != nil || len(list) != 1 || list[0].Viewers != 0 || list[0].Exit != nil {
		t.Fatalf("after SIGTERM: %+v %v, want the session running, unwatched", list, err)
	}
}

// TestCLIReplayAnswersDoNotOutliveAttach attaches to a session whose program asked DA1 and DSR and
// exited: attach replays, exits with the program's code, and leaves none of the terminal's answers
// in the terminal's input for the shell to read as typed.
func TestCLIReplayAnswersDoNotOutliveAttach(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "*")
	env := cliEnv(t, g)
	id := newSession(t, env, "--", "sh", "-c", `printf '\033[c\033[6nBYE'; exit 5`)
	testutil.WaitFor(t, 10*time.Second, "the program's exit", func() bool {
		list, err := g.dial(t).List(ctxT(t, 5*time.Second))
		return err == nil && len(list) == 1 && list[0].Exit != nil
	})
	tm := startTermTTY(t, env, true, true, "attach", id)
	if code := tm.wait(); code != 5 {
		t.Fatalf("attach: exit %d, want 5; output:\n%q", code, tm.output())
	}
	// The terminal answers the three queries (DA1, DSR, the sentinel): by now, or after
	// muxterm's exit if muxterm did not wait for them.
	deadline := time.After(10 * time.Second)
	for {
		tm.mu.Lock()
		w := tm.written
		tm.mu.Unlock()
		if w == 3 {
			break
		}
		select {
		case <-tm.changed:
		case <-deadline:
			t.Fatalf("%d of 3 answers written; output %q", w, tm.output())
		}
	}
	// Non-canonical, so a partial line counts too.
	if _, err := termMakeRaw(tm.tty); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(tm.tty.Fd()), unix.TIOCINQ)
	if err != nil || n != 0 {
		t.Fatalf("%d bytes (%v) left in the terminal's input after attach exited, want 0", n, err)
	}
}

// termMakeRaw clears ICANON on f.
func termMakeRaw(f *os.File) (*unix.Termios, error) {
	tio, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *tio
	raw.Lflag &^= unix.ICANON | unix.ECHO
	return tio, unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, &raw)
}

// runCLIStdin runs muxterm with stdin and returns stdout, stderr and the exit code.
func runCLIStdin(t *testing.T, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(cliBinary(t), args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("muxterm %q: %v", args, err)
		}
		return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("muxterm %q did not end within 30s: stdout %q, stderr %q", args, stdout.String(), stderr.String())
		return "", "", 0
	}
}

// TestCLIExecWithoutATerminal: exec runs its command on pipes, as kubectl exec and docker exec
// do: stdin forwarded with -i and closed at its end (or at once without -i), stdout and stderr
// each to its own place, byte for byte, and the exit code kept.
func TestCLIExecWithoutATerminal(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "*")
	env := cliEnv(t, g)
	for _, tc := range []struct {
		name                string
		stdin               string
		args                []string
		wantOut, wantErrOut string
		code                int
	}{
		{"stdin forwarded, then its end", "hi\n", []string{"exec", "-i", "--", "cat"}, "hi\n", "", 0},
		{"--stdin spelled out", "hi\n", []string{"exec", "--stdin", "--", "cat"}, "hi\n", "", 0},
		{"each stream to its own place", "", []string{"exec", "--", "sh", "-c", "echo out; echo err >&2; exit 3"}, "out\n", "err\n", 3},
		{"stdin not forwarded: the program reads its end at once", "ignored\n", []string{"exec", "--", "cat"}, "", "", 0},
		{"the gateway's shell fed a script", "echo hi\n", []string{"exec", "--stdin"}, "hi\n", "", 0},
		{"-it: a terminal that echoes the input forwarded", "hi\n", []string{"exec", "-it", "--lf", "--", "sh", "-c", "read x; echo got-$x"}, "hi\ngot-hi\n", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runCLIStdin(t, env, tc.stdin, tc.args...)
			if out != tc.wantOut || errOut != tc.wantErrOut || code != tc.code {
				t.Errorf("muxterm %q: got stdout %q, stderr %q, exit %d, want %q, %q, %d", tc.args, out, errOut, code, tc.wantOut, tc.wantErrOut, tc.code)
			}
		})
	}
	noSessionsLeft(t, g, "exec")
	// bash as the gateway's shell, fed a script on stdin: it reads it to its end and exits
	// (on a terminal, the end-of-file key could arrive before its line editor starts, and be lost).
	if _, err := exec.LookPath("bash"); err == nil {
		gb := startGateway(t, "--shell", "/bin/bash")
		out, errOut, code := runCLIStdin(t, cliEnv(t, gb), "echo hi\n", "exec", "--stdin")
		if out != "hi\n" || code != 0 {
			t.Errorf("bash fed a script: got stdout %q, stderr %q, exit %d, want %q, exit 0", out, errOut, code, "hi\n")
		}
	}
}

// noSessionsLeft fails the test unless g holds no session after what ran.
func noSessionsLeft(t *testing.T, g *gateway, what string) {
	t.Helper()
	list, err := g.dial(t).List(ctxT(t, 5*time.Second))
	if err != nil || len(list) != 0 {
		t.Fatalf("after %s: %+v %v, want no session", what, list, err)
	}
}
