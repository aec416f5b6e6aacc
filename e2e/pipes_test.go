//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/internal/testutil/rawmux"
	"github.com/muxterm/muxterm/proto"
)

// TestPipeSessionResumeIsByteExactPerStream: a client sharing no code with the gateway (rawmux)
// opens a session on pipes, drops its socket while both streams are flowing, and resumes on a
// new socket from the bytes it received of both: each stream is whole, byte for byte, with no
// duplicate and no gap, and the exit follows.
func TestPipeSessionResumeIsByteExactPerStream(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "*")
	auth := http.Header{"Authorization": {"Bearer " + g.Token}}
	caps := map[string]any{proto.CapabilityPipes: true}
	const half = 3000
	// Half of each stream, then (once told to go on) the other half, while no socket is bound.
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo o$i; echo e$i >&2; i=$((i+1)); done; read x
while [ $i -lt %d ]; do echo o$i; echo e$i >&2; i=$((i+1)); done; exit 7`, half, 2*half)
	var wantOut, wantErr strings.Builder
	for i := range 2 * half {
		fmt.Fprintf(&wantOut, "o%d\n", i)
		fmt.Fprintf(&wantErr, "e%d\n", i)
	}

	c1 := rawmux.DialCaps(t, g.WS, auth, caps)
	var open proto.OpenResult
	c1.Result("session.open", map[string]any{"channel": 1, "tty": false, "cmd": []string{"sh", "-c", script}}, &open)
	c1.WaitOutput(1, fmt.Sprintf("o%d\n", half-1))
	c1.Input(1, "go\n")
	c1.Close() // the second half is being printed: bytes in flight are lost with the socket
	out1, err1 := c1.Output(1), c1.Stderr(1)
	from := len(out1) + len(err1)

	c2 := rawmux.DialCaps(t, g.WS, auth, caps)
	var att proto.AttachResult
	c2.Result("session.attach", map[string]any{"channel": 2, "session": open.Session, "from": from}, &att)
	if att.Offset != int64(from) || att.Lost != 0 || att.TTY == nil || *att.TTY {
		t.Fatalf("attach from %d: got offset %d, lost %d, tty %v, want %d, 0, false", from, att.Offset, att.Lost, att.TTY, from)
	}
	if exit := c2.NextNote("session.exit"); exit["code"] != float64(7) {
		t.Errorf("exit: got %v, want code 7", exit)
	}
	gotOut := string(out1) + string(c2.Output(2))
	gotErr := string(err1) + string(c2.Stderr(2))
	if gotOut != wantOut.String() {
		t.Errorf("stdout across the drop: %d bytes, want %d (first difference at %d)", len(gotOut), wantOut.Len(), firstDiff([]byte(gotOut), []byte(wantOut.String())))
	}
	if gotErr != wantErr.String() {
		t.Errorf("stderr across the drop: %d bytes, want %d (first difference at %d)", len(gotErr), wantErr.Len(), firstDiff([]byte(gotErr), []byte(wantErr.String())))
	}
	t.Logf("dropped after %d bytes (%d of stdout, %d of stderr) of %d", from, len(out1), len(err1), wantOut.Len()+wantErr.Len())
}

// TestGoClientPipeSession: the Go client opens a session on pipes, writes its stdin and closes
// it, reads stdout and stderr apart, and gets the exit; input after the close is refused with
// stdin_closed.
func TestGoClientPipeSession(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "*")
	ctx := ctxT(t, 30*time.Second)
	refused := make(chan *proto.Error, 1)
	c, err := client.Dial(ctx, g.WS, client.DialOptions{Token: g.Token, OnServerError: func(e *proto.Error) {
		select {
		case refused <- e:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch, err := c.Open(ctx, client.OpenOptions{Cmd: []string{"sh", "-c", "cat; echo err >&2; exit 5"}, Pipes: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := ch.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Write([]byte("late")); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-refused:
		if e.Kind() != proto.KindStdinClosed {
			t.Errorf("input after closeStdin: got %v, want %s", e, proto.KindStdinClosed)
		}
	case <-ctx.Done():
		t.Fatal("input after closeStdin: no error")
	}
	var out [2]strings.Builder
	buf := make([]byte, 1024)
	go func() {
		<-ch.Exited()
		_ = ch.Detach(ctx) // the output before the exit has arrived: Read returns it, then io.EOF
	}()
	for {
		n, stderr, err := ch.ReadStream(ctx, buf)
		if stderr {
			out[1].Write(buf[:n])
		} else {
			out[0].Write(buf[:n])
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if out[0].String() != "abc" || out[1].String() != "err\n" {
		t.Errorf("stdout, stderr: got %q, %q, want %q, %q", out[0].String(), out[1].String(), "abc", "err\n")
	}
	if e := ch.ExitInfo(); e == nil || e.Code != 5 {
		t.Errorf("exit: got %+v, want code 5", e)
	}
	kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Kill(kctx, ch.Session()); err != nil {
		t.Fatal(err)
	}
}

// TestCLIExecResumesBothStreamsAfterDrop: muxterm exec's socket is cut while its program runs;
// it redials and resumes from the bytes of both streams it wrote out: stdout and stderr are each
// whole, byte for byte, and the exit code is the program's.
func TestCLIExecResumesBothStreamsAfterDrop(t *testing.T) {
	px := newCutProxy(t, "127.0.0.1:0", "")
	g := startGateway(t, "--allow-cmd", "*", "--allow-host", px.addr())
	px.setTarget(strings.TrimPrefix(g.Base, "http://"))
	env := cliEnv(t, g, "MUXTERM_URL=ws://"+px.addr()+"/ws")
	dir := t.TempDir()
	const half = 2000
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo o$i; echo e$i >&2; i=$((i+1)); done; touch %s/a
while [ ! -e %s/b ]; do sleep 0.01; done
while [ $i -lt %d ]; do echo o$i; echo e$i >&2; i=$((i+1)); done; exit 5`, half, dir, dir, 2*half)
	var wantOut, wantErr strings.Builder
	for i := range 2 * half {
		fmt.Fprintf(&wantOut, "o%d\n", i)
		fmt.Fprintf(&wantErr, "e%d\n", i)
	}
	cmd := exec.Command(cliBinary(t), "exec", "--", "sh", "-c", script)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var err error
	go func() {
		err = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	testutil.WaitFor(t, 10*time.Second, "the first half printed", func() bool {
		_, err := os.Stat(filepath.Join(dir, "a"))
		return err == nil
	})
	px.cut()
	if werr := os.WriteFile(filepath.Join(dir, "b"), nil, 0o600); werr != nil {
		t.Fatal(werr)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("exec did not end within 30s of the drop")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Errorf("exit: got %v, want code 5", err)
	}
	if stdout.String() != wantOut.String() {
		t.Errorf("stdout across the drop: %d bytes, want %d (first difference at %d)", stdout.Len(), wantOut.Len(), firstDiff(stdout.Bytes(), []byte(wantOut.String())))
	}
	// stderr holds the program's stderr, then nothing: exec says nothing of a drop it resumed.
	if stderr.String() != wantErr.String() {
		t.Errorf("stderr across the drop: %d bytes, want %d (first difference at %d; tail %q)", stderr.Len(), wantErr.Len(), firstDiff(stderr.Bytes(), []byte(wantErr.String())), tail(stderr.String()))
	}
	px.waitConns(t, 2) // the first socket and the redial
}
