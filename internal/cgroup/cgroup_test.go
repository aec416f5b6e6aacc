package cgroup_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/cgroup"
	"github.com/muxterm/muxterm/internal/testutil"
)

// startIn starts argv in g (clone3 into the cgroup) and returns it with its stdout; the test
// reaps it in cleanup.
func startIn(t *testing.T, tr *cgroup.Tree, name string, argv ...string) (*exec.Cmd, cgroup.Group, *bufio.Reader) {
	t.Helper()
	g, f, err := tr.NewGroup(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, g, bufio.NewReader(out)
}

// A process started into a group is in its cgroup.procs from its first instruction; cgroup.kill
// ends it and the jobs it left behind (a double fork, setsid, nohup), cgroup.procs is then empty
// and the group can be removed.
func TestKillEndsEveryProcess(t *testing.T) {
	tr, err := cgroup.Open(testutil.CgroupRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	cmd, g, out := startIn(t, tr, "s1", "/bin/sh", "-c",
		`grep "^0::" /proc/self/cgroup; (sleep 1000 &); setsid sleep 1000 & nohup sleep 1000 >/dev/null 2>&1 & sleep 0.2; echo ready; exec sleep 1000`)
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Base(g.Path()); !strings.HasSuffix(strings.TrimSpace(line), "/"+filepath.Base(tr.Dir())+"/"+want) {
		t.Errorf("the child's first view of its cgroup: got %q, want .../%s/%s", line, filepath.Base(tr.Dir()), want)
	}
	if _, err := out.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	pids, err := g.Procs()
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 4 || !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("cgroup.procs: got %v, want the child %d and its three jobs", pids, cmd.Process.Pid)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	left, err := g.WaitEmpty(ctx)
	if err != nil || len(left) != 0 {
		t.Fatalf("after cgroup.kill: left %v, err %v", left, err)
	}
	_ = cmd.Wait()
	for _, pid := range pids {
		if testutil.Alive(pid) {
			t.Errorf("pid %d still runs after cgroup.kill", pid)
		}
	}
	if err := g.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tr.Dir()); !os.IsNotExist(err) {
		t.Errorf("the gateway's directory survived Close: %v", err)
	}
}

// Sweep ends the directory of a gateway that is gone (its processes killed, its cgroups
// removed) and leaves alone those of gateways still running, its own included.
func TestSweepEndsOnlyDeadGateways(t *testing.T) {
	root := testutil.CgroupRoot(t)
	tr, err := cgroup.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	// A dead gateway: a pid beyond pid_max never runs.
	dead := filepath.Join(root, "gw-999999999-1")
	if err := os.Mkdir(dead, 0o755); err != nil {
		t.Fatal(err)
	}
	deadTree := &fakeTree{t: t, dir: dead}
	cmd := deadTree.start("s", "/bin/sh", "-c", "setsid sleep 1000 & echo ready; exec sleep 1000")
	ours, _, ourOut := startIn(t, tr, "mine", "/bin/sh", "-c", "echo ready; exec sleep 1000")
	if _, err := ourOut.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	procs, groups, err := tr.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if procs != 2 || groups != 1 {
		t.Errorf("sweep: got %d processes in %d cgroups, want 2 in 1", procs, groups)
	}
	_ = cmd.Wait()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead gateway's directory survived the sweep: %v", err)
	}
	if err := ours.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the sweep touched this gateway's own session: %v", err)
	}
	if n, err := tr.Close(ctx); err != nil || n != 1 {
		t.Errorf("close: killed %d, err %v; want 1 (our session), nil", n, err)
	}
}

// fakeTree starts processes into cgroups under a directory made by hand (a dead gateway's).
type fakeTree struct {
	t   *testing.T
	dir string
}

func (f *fakeTree) start(name string, argv ...string) *exec.Cmd {
	f.t.Helper()
	dir := filepath.Join(f.dir, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	fd, err := os.Open(dir)
	if err != nil {
		f.t.Fatal(err)
	}
	defer fd.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	out, err := cmd.StdoutPipe()
	if err != nil {
		f.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		f.t.Fatal(err)
	}
	return cmd
}

// Open refuses a root outside cgroupfs, saying so, and creates nothing there.
func TestOpenRefusesOtherFilesystems(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not-a-cgroup")
	_, err := cgroup.Open(dir)
	if err == nil || !strings.Contains(err.Error(), "not on a cgroup v2 filesystem") {
		t.Fatalf("got %v, want a refusal naming the filesystem", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Open created %s", dir)
	}
}
