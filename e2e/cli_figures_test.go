//go:build e2e

package e2e

import (
	"errors"
	"io"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/muxterm/muxterm/client"
)

// TestCLIFigures measures the figures of docs/benchmarks.md ("The muxterm command"), each
// against its baseline in the same run, interleaved repetition by repetition. It runs only with
// MUXTERM_CLI_FIGURES=1 (it takes about half a minute):
//
//	make build && MUXTERM_CLI_FIGURES=1 MUXTERM_BIN=$PWD/bin/gateway MUXTERM_CLI_BIN=$PWD/bin/muxterm \
//	  go test -count=1 -tags e2e -run TestCLIFigures -v ./e2e/
func TestCLIFigures(t *testing.T) {
	measurement(t, "MUXTERM_CLI_FIGURES")
	const reps = 41
	g := startGateway(t, "--allow-cmd", "*", "--max-open-rate", "0")
	env := cliEnv(t, g)
	cli := cliBinary(t)

	// `muxterm exec -- true` against a raw spawn of true under a PTY.
	var raw, execT, versionT []time.Duration
	for range reps {
		// The process start alone: muxterm version dials nothing.
		start := time.Now()
		if out, err := exec.Command(cli, "version").CombinedOutput(); err != nil {
			t.Fatalf("muxterm version: %v %s", err, out)
		}
		versionT = append(versionT, time.Since(start))

		start = time.Now()
		cmd := exec.Command("true")
		ptmx, err := pty.Start(cmd)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, ptmx) // EIO once true has exited
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		raw = append(raw, time.Since(start))
		ptmx.Close()

		start = time.Now()
		cmd = exec.Command(cli, "exec", "--", "true")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("muxterm exec: %v %s", err, out)
		}
		execT = append(execT, time.Since(start))
	}

	// Attach to first byte: the command (process start to the replay's first byte on its
	// terminal) against the Go client in process: DialOpen to the first byte of a new session,
	// and Dial + Attach to the first replayed byte.
	id := newSession(t, env, "--", "sh", "-c", "echo ready; exec sleep 600")
	var cliT, dialOpenT, attachT []time.Duration
	buf := make([]byte, 4096)
	for range reps {
		start := time.Now()
		cmd := exec.Command(cli, "attach", id)
		cmd.Env = env
		ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ptmx.Read(buf); err != nil {
			t.Fatal(err)
		}
		cliT = append(cliT, time.Since(start))
		_, _ = ptmx.Write([]byte("\r~."))
		_, _ = io.Copy(io.Discard, ptmx)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("attach: %v", err)
		}
		ptmx.Close()

		ctx := ctxT(t, 10*time.Second)
		start = time.Now()
		c, ch, err := client.DialOpen(ctx, g.WS, client.DialOptions{Token: g.Token}, client.OpenOptions{Cmd: []string{"sh", "-c", "echo ready; exec sleep 600"}, Cols: 80, Rows: 24})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.Read(buf); err != nil {
			t.Fatal(err)
		}
		dialOpenT = append(dialOpenT, time.Since(start))
		if _, err := c.Kill(ctx, ch.Session()); err != nil {
			t.Fatal(err)
		}
		c.Close()

		start = time.Now()
		c, err = client.Dial(ctx, g.WS, client.DialOptions{Token: g.Token})
		if err != nil {
			t.Fatal(err)
		}
		ach, _, err := c.Attach(ctx, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ach.Read(buf); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		attachT = append(attachT, time.Since(start))
		if err := ach.Detach(ctx); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	med := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	t.Logf("%d repetitions, medians:", reps)
	t.Logf("raw spawn of true under a PTY      %v", med(raw))
	t.Logf("muxterm exec -- true               %v  (%.1fx raw, +%v)", med(execT), float64(med(execT))/float64(med(raw)), med(execT)-med(raw))
	t.Logf("muxterm version (process start)    %v", med(versionT))
	t.Logf("Go client DialOpen to first byte   %v", med(dialOpenT))
	t.Logf("Go client Dial+Attach to first byte %v", med(attachT))
	t.Logf("muxterm attach to first byte       %v  (%.2fx DialOpen, %.2fx Dial+Attach)", med(cliT), float64(med(cliT))/float64(med(dialOpenT)), float64(med(cliT))/float64(med(attachT)))
}
