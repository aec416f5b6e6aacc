//go:build e2e

package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
)

// TestStopSignalAtTheNewImagesStart sends SIGTERM as early in the new image's start as a Go
// program can be reached: a build (-tags muxterm_starthold) whose upgraded image waits in a
// package initializer that runs before internal/earlysignal's, after the Go runtime installed
// its signal handlers. There, SIGTERM ends the process with the runtime's default (no handler
// can be registered earlier, and the runtime unblocks SIGTERM whatever mask the exec left:
// internal/earlysignal's TestRuntimeUnblocksStopSignals). It is a crash, and what a crash
// leaves is what the next start with the same --cgroup-root sweeps: the test checks both, the
// documented outcome (docs/operations.md, "Upgrade and restart", Limits) and that no session
// process outlives the next start.
func TestStopSignalAtTheNewImagesStart(t *testing.T) {
	root := testutil.CgroupRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "gateway")
	if out, err := exec.Command("go", "build", "-tags", "muxterm_starthold", "-o", bin,
		"github.com/muxterm/muxterm/cmd/gateway").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags muxterm_starthold: %v\n%s", err, out)
	}
	fifo := filepath.Join(dir, "start-hold")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tok := randomToken()
	mark := randomToken()
	g := launchGatewayBin(t, bin, tok, []string{"MUXTERM_TEST_START_HOLD=" + fifo}, "--token", tok,
		"--allow-cmd", "*", "--cgroup-root", root, "--kill-grace", "100ms")
	openMarked(t, g, len(hardJobs)+2, mark)
	t.Cleanup(func() {
		for _, pid := range marked(mark) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	// This open returns once the new image has opened the FIFO for reading: it is in the hold.
	held := make(chan *os.File, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Errorf("open the hold's FIFO: %v", err)
		}
		held <- f
	}()
	var w *os.File
	select {
	case w = <-held:
	case <-g.exited:
		t.Fatalf("the gateway exited before the new image's start:\n%s", g.Logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("the new image did not reach the hold:\n%s", g.Logs())
	}
	if w == nil {
		t.FailNow()
	}
	defer w.Close()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.exited:
	case <-time.After(10 * time.Second):
		_, _ = w.Write([]byte{1}) // let it go on: then it must stop as on any SIGTERM
		t.Fatalf("SIGTERM at the new image's start did not end it; the window may be closed now (update docs/operations.md and this test):\n%s", g.Logs())
	}
	var ee *exec.ExitError
	if !errors.As(g.err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("gateway exit %v, want killed by SIGTERM (the runtime's default action)", g.err)
	}
	orphaned := marked(mark)
	if len(orphaned) < hardSurvivors {
		t.Fatalf("after the crash only %d marked processes run; the test needs the hard jobs alive:%s", len(orphaned), describe(orphaned))
	}
	// The next start sweeps them.
	g2 := startGateway(t, "--cgroup-root", root)
	if left := marked(mark); len(left) > 0 {
		t.Errorf("%d processes of the killed gateway's sessions outlived the next start:%s", len(left), describe(left))
	}
	testutil.WaitFor(t, 5*time.Second, "the 'cgroups on ... swept_processes=' log line", func() bool {
		return sweptRE.FindStringSubmatch(g2.Logs()) != nil
	})
	t.Logf("SIGTERM in the new image's start: killed by it; %d session processes left, swept by the next start", len(orphaned))
}
