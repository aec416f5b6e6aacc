//go:build e2e

package e2e

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/internal/vt"
	"github.com/muxterm/muxterm/proto"
)

// fullScreenProgram draws a full-screen program's screen once (alternate screen, application
// cursor keys, mouse tracking with SGR encoding, bracketed paste, a header and a middle line),
// then updates one line in place until the ring has rolled over many times, then says DONE.
const fullScreenProgram = `printf '\033[?1049h\033[?1h\033[?1000h\033[?1006h\033[?2004h\033[H\033[2J\033[1;7mHEADER\033[0m\033[12;1Hmiddle line'
i=0
while [ $i -lt 12000 ]; do printf '\033[5;1Hcounter %06d' $i; i=$((i+1)); done
printf '\033[20;1HDONE'
exec sleep 600`

// watchAll opens program (fullScreenProgram or one like it) and reads every byte of it on a channel attached throughout,
// into a model of the screen, until DONE; it returns the session and that model.
func watchAll(ctx context.Context, t *testing.T, g *gateway, program string) (string, *vt.Terminal) {
	t.Helper()
	c := g.dial(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", program}})
	if err != nil {
		t.Fatal(err)
	}
	want := vt.New(80, 24, vt.Options{})
	var all bytes.Buffer
	buf := make([]byte, 32<<10)
	for !bytes.Contains(all.Bytes(), []byte("DONE")) {
		n, err := ch.ReadContext(ctx, buf)
		if err != nil {
			t.Fatalf("the viewer attached throughout: %v", err)
		}
		all.Write(buf[:n])
	}
	want.Write(all.Bytes())
	if all.Len() < 3*64<<10 {
		t.Fatalf("%d bytes of output: want the ring (64 KiB) rolled over several times", all.Len())
	}
	return ch.Session(), want
}

// readPainted reads what an attach with result res sends up to the output's end at the attach
// (its paint, then the output from res.Offset) into a fresh model of the paint's size.
func readPainted(ctx context.Context, t *testing.T, ch *client.Channel, res proto.AttachResult) *vt.Terminal {
	t.Helper()
	got := vt.New(cmp.Or(res.ScreenCols, res.Cols), cmp.Or(res.ScreenRows, res.Rows), vt.Options{})
	buf := make([]byte, 32<<10)
	for left := int64(res.Screen) + res.End - res.Offset; left > 0; {
		n, err := ch.ReadContext(ctx, buf[:min(int64(len(buf)), left)])
		if err != nil {
			t.Fatal(err)
		}
		got.Write(buf[:n])
		left -= int64(n)
	}
	return got
}

func rows(m *vt.Terminal) []string {
	return strings.Split(strings.TrimRight(string(m.AppendText(nil, vt.SnapshotOptions{})), "\n"), "\n")
}

// TestLateViewerGetsTheScreen: over the wire, a client that attaches after the ring rolled over
// gets a paint of the screen and builds the screen a viewer attached throughout built, modes
// included; session.capture reads the same screen.
func TestLateViewerGetsTheScreen(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh", "--scrollback", "64KiB", "--window", "16KiB")
	ctx := ctxT(t, 60*time.Second)
	id, want := watchAll(ctx, t, g, fullScreenProgram)

	c := g.dial(t)
	from := int64(0)
	ch, res, err := c.AttachWith(ctx, id, client.AttachOptions{From: &from})
	if err != nil {
		t.Fatal(err)
	}
	if res.Screen == 0 || res.Lost == 0 {
		t.Fatalf("attach from 0: %+v, want a paint and lost > 0", res)
	}
	got := readPainted(ctx, t, ch, res)
	if ch.Offset() != res.End {
		t.Errorf("after the paint and the output: offset %d, want the end %d", ch.Offset(), res.End)
	}
	if g, w := strings.Join(rows(got), "\n"), strings.Join(rows(want), "\n"); g != w {
		t.Errorf("late viewer's screen:\n%s\nwant:\n%s", g, w)
	}
	if g, w := got.Modes(), want.Modes(); g != w {
		t.Errorf("late viewer's modes: got %+v, want %+v", g, w)
	}
	cap, err := c.Capture(ctx, id, client.CaptureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := strings.TrimRight(cap.Screen, "\n"), strings.Join(rows(want), "\n"); g != w {
		t.Errorf("capture:\n%s\nwant:\n%s", g, w)
	}
	if m := cap.Modes; !m.AltScreen || !m.AppCursor || m.Mouse != 1000 || m.MouseEncoding != 1006 || !m.BracketedPaste {
		t.Errorf("captured modes %+v: want the alternate screen, application cursor, mouse 1000/1006, bracketed paste", m)
	}
	// A client that does not declare the screen capability gets the raw tail, as before.
	raw := dialRaw(t, g, g.Token)
	b := raw.call(7, "session.attach", map[string]any{"channel": 1, "session": id, "from": 0})
	if !bytes.Contains(b, []byte(`"screen":0`)) {
		t.Errorf("attach without the capability: %s, want screen 0", b)
	}
}

// tmux runs one tmux server of the test's own, killed when the test ends.
type tmux struct {
	t    *testing.T
	sock string
}

func startTmux(t *testing.T) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (apt-get install tmux; .ci/run installs it)")
	}
	tm := &tmux{t: t, sock: fmt.Sprintf("muxterm-e2e-%d-%s", os.Getpid(), randomToken()[:8])}
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", tm.sock, "kill-server").Run() })
	return tm
}

func (tm *tmux) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", tm.sock}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return string(out)
}

// pane returns the pane's visible rows, trailing blank rows trimmed.
func (tm *tmux) pane() []string {
	return strings.Split(strings.TrimRight(tm.run("capture-pane", "-p", "-t", "w"), "\n"), "\n")
}

// TestCLIAttachInTmuxPaintsAndRestores: muxterm attach in a real terminal (a tmux pane) after
// the ring rolled over shows the screen a viewer attached throughout has, and the pane takes
// the session's modes (so its keys are encoded as the program expects: ESC O A for Up); a
// detach gives the pane back with none of them (no alternate screen, no application cursor,
// no mouse tracking: the flags tmux reports).
func TestCLIAttachInTmuxPaintsAndRestores(t *testing.T) {
	tm := startTmux(t)
	g := startGateway(t, "--allow-cmd", "sh", "--scrollback", "64KiB", "--window", "16KiB")
	ctx := ctxT(t, 60*time.Second)
	id, want := watchAll(ctx, t, g, fullScreenProgram)

	env := cliEnv(t, g)
	cmd := "exec env"
	for _, kv := range env {
		if strings.HasPrefix(kv, "MUXTERM_") || strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			cmd += " '" + kv + "'"
		}
	}
	cmd += " '" + cliBinary(t) + "' attach " + id
	tm.run("-f", "/dev/null", "new-session", "-d", "-s", "e2e", "-n", "w", "-x", "80", "-y", "24", cmd)
	tm.run("set-option", "-t", "e2e", "remain-on-exit", "on")
	flags := func() string {
		return strings.TrimSpace(tm.run("display-message", "-p", "-t", "w",
			"alt=#{alternate_on} appcursor=#{keypad_cursor_flag} mouse=#{mouse_standard_flag} sgr=#{mouse_sgr_flag}"))
	}
	wantRows := rows(want)
	testutil.WaitFor(t, 20*time.Second, "the pane to show the session's screen", func() bool {
		return strings.Join(tm.pane(), "\n") == strings.Join(wantRows, "\n")
	})
	if f := flags(); f != "alt=1 appcursor=1 mouse=1 sgr=1" {
		t.Errorf("attached pane: %s, want the session's modes all on", f)
	}
	tm.run("send-keys", "-t", "w", "Enter", "~", ".")
	testutil.WaitFor(t, 20*time.Second, "muxterm to leave after the detach keys", func() bool {
		return strings.TrimSpace(tm.run("display-message", "-p", "-t", "w", "#{pane_dead}")) == "1"
	})
	if f := flags(); f != "alt=0 appcursor=0 mouse=0 sgr=0" {
		t.Errorf("pane after detach: %s, want every mode the session set undone", f)
	}
}

// TestCLICaptureAndSend: muxterm send types key names and text into a session, its arrows
// encoded for the program's mode (application cursor keys here: ESC O A), and muxterm capture
// prints what the screen shows.
func TestCLICaptureAndSend(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh")
	env := cliEnv(t, g)
	id := newSession(t, env, "--name", "keys", "--", "sh", "-c",
		`printf '\033[?1h'; stty raw -echo; printf 'READY\r\n'; exec od -An -tx1 -v -w1`)
	c := g.dial(t)
	ctx := ctxT(t, 30*time.Second)
	testutil.WaitFor(t, 10*time.Second, "READY on the screen", func() bool {
		res, err := c.Capture(ctx, id, client.CaptureOptions{})
		return err == nil && strings.Contains(res.Screen, "READY")
	})
	if out, errOut, code := runCLI(t, env, "send", "keys", "Up", "ab", "C-c", "Enter"); code != 0 {
		t.Fatalf("muxterm send: code %d, %q %q", code, out, errOut)
	}
	// od prints one byte a line; raw mode's bare \n makes a staircase of them.
	want := " 1b 4f 41 61 62 03 0d"
	var got string
	testutil.WaitFor(t, 10*time.Second, "od to print what was sent", func() bool {
		out, _, code := runCLI(t, env, "capture", "keys")
		_, after, _ := strings.Cut(out, "READY")
		got = strings.Join(regexp.MustCompile(` [0-9a-f]{2}\b`).FindAllString(after, -1), "")
		return code == 0 && got == want
	})
	out, _, _ := runCLI(t, env, "capture", "--ansi", id)
	if !strings.Contains(out, "\x1b[?1h") {
		t.Errorf("capture --ansi: %q, want a paint that sets application cursor keys", out)
	}
}

// TestScreenCrossesAnUpgrade: a session's screen survives an upgrade in place (SIGUSR2): the new
// image captures the same screen, exactly (lost 0), although its ring lost the header long ago,
// and a late viewer of the new image is painted from it.
func TestScreenCrossesAnUpgrade(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh", "--scrollback", "64KiB", "--window", "16KiB")
	ctx := ctxT(t, 90*time.Second)
	id, want := watchAll(ctx, t, g, fullScreenProgram)
	c := g.dial(t)
	before, err := c.Capture(ctx, id, client.CaptureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, "upgrade complete", 1, 60*time.Second)
	c2 := g.dial(t)
	after, err := c2.Capture(ctx, id, client.CaptureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Screen != before.Screen || after.Lost != 0 || after.Offset != before.Offset {
		t.Fatalf("after the upgrade: %q at %d lost %d\nwant: %q at %d lost 0", after.Screen, after.Offset, after.Lost, before.Screen, before.Offset)
	}
	ch, res, err := c2.AttachWith(ctx, id, client.AttachOptions{Screen: proto.ScreenAlways})
	if err != nil {
		t.Fatal(err)
	}
	got := readPainted(ctx, t, ch, res)
	if g, w := strings.Join(rows(got), "\n"), strings.Join(rows(want), "\n"); g != w || got.Modes() != want.Modes() {
		t.Errorf("painted by the new image:\n%s\n%+v\nwant:\n%s\n%+v", g, got.Modes(), w, want.Modes())
	}
}

// TestClusterRelayPaintsTheScreen: an attach relayed to the node that owns the session gets the
// owner's paint of the screen (the relay carries the mode and the size), and session.capture
// through either node reads the owner's screen.
func TestClusterRelayPaintsTheScreen(t *testing.T) {
	small := []string{"--scrollback", "64KiB"}
	tc := startClusterWith(t, map[string][]string{"a": small, "b": small, "c": small}, "a", "b", "c")
	ctx := ctxT(t, 90*time.Second)
	id, want := watchAll(ctx, t, tc.nodes["a"], fullScreenProgram)
	ca := dialAs(t, tc.nodes["a"], tc.alice)
	owner := listed(t, ca, id)
	other := "a"
	if owner == "a" {
		other = "b"
	}
	c := dialAs(t, tc.nodes[other], tc.alice)
	waitListed(t, c, id, owner, 10*time.Second)
	ch, res, err := c.AttachWith(ctx, id, client.AttachOptions{From: ptrTo(int64(0)), Cols: 80, Rows: 24})
	if err != nil {
		t.Fatalf("attach through %s: %v", other, err)
	}
	if res.Screen == 0 {
		t.Fatalf("relayed attach from 0: %+v, want the owner's paint", res)
	}
	got := readPainted(ctx, t, ch, res)
	if g, w := strings.Join(rows(got), "\n"), strings.Join(rows(want), "\n"); g != w || got.Modes() != want.Modes() {
		t.Errorf("relayed paint:\n%s\n%+v\nwant:\n%s\n%+v", g, got.Modes(), w, want.Modes())
	}
	cap, err := c.Capture(ctx, id, client.CaptureOptions{})
	if err != nil {
		t.Fatalf("capture through %s: %v", other, err)
	}
	if g, w := strings.TrimRight(cap.Screen, "\n"), strings.Join(rows(want), "\n"); g != w {
		t.Errorf("relayed capture:\n%s\nwant:\n%s", g, w)
	}
}

// TestCLIAttachShowsAnImposedSize: when another viewer's size is applied to the session (the
// gateway's --window-size latest, the other viewer typing), muxterm attach draws the session at
// that size and says so on a status line below it; when its own size is back, the line goes.
func TestCLIAttachShowsAnImposedSize(t *testing.T) {
	tm := startTmux(t)
	g := startGateway(t, "--allow-cmd", "sh")
	ctx := ctxT(t, 60*time.Second)
	c := g.dial(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c",
		`stty raw -echo; printf 'TOP LINE\r\n'; while read -r x; do printf 'got\r\n'; done`}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	cmd := "exec env"
	for _, kv := range cliEnv(t, g) {
		if strings.HasPrefix(kv, "MUXTERM_") || strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			cmd += " '" + kv + "'"
		}
	}
	cmd += " '" + cliBinary(t) + "' attach " + ch.Session()
	tm.run("-f", "/dev/null", "new-session", "-d", "-s", "e2e", "-n", "w", "-x", "80", "-y", "24", cmd)
	tm.run("set-option", "-t", "e2e", "status", "off") // the pane is the whole 80x24
	testutil.WaitFor(t, 20*time.Second, "the pane to show the session", func() bool {
		return strings.Contains(strings.Join(tm.pane(), "\n"), "TOP LINE")
	})
	// Another viewer, 60x20, types: under --window-size latest its size is the session's.
	other, _, err := c.AttachWith(ctx, ch.Session(), client.AttachOptions{Cols: 60, Rows: 20, Screen: proto.ScreenNever})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Write([]byte("x\r")); err != nil {
		t.Fatal(err)
	}
	var last []string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the pane:\n%s", strings.Join(last, "\n"))
		}
	})
	testutil.WaitFor(t, 20*time.Second, "a status line naming the imposed size", func() bool {
		p := tm.pane()
		last = p
		return strings.Contains(p[len(p)-1], "the session is 60x20 (another viewer's size); this terminal is 80x24") &&
			strings.Contains(strings.Join(p, "\n"), "TOP LINE")
	})
	// This terminal's viewer types: its size is the session's again, and the line goes.
	tm.run("send-keys", "-t", "w", "y", "Enter")
	testutil.WaitFor(t, 20*time.Second, "the status line to go", func() bool {
		return !strings.Contains(strings.Join(tm.pane(), "\n"), "another viewer's size")
	})
}
