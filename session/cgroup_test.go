package session

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/cgroup"
	"github.com/muxterm/muxterm/internal/child"
	"github.com/muxterm/muxterm/internal/testutil"
)

// cgroupOptions are testOptions with cgroups under a root of the test's own (the test is
// skipped, saying why, where cgroups cannot be created). The tree is closed when the test ends.
func cgroupOptions(t *testing.T) Options {
	t.Helper()
	tr, err := cgroup.Open(testutil.CgroupRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.Cgroups = tr
	return opts
}

// cgroupOf is the cgroup v2 line of /proc/pid/cgroup as a path under the mount, as the child
// sees it.
func cgroupRel(t *testing.T, path string) string {
	t.Helper()
	own, err := cgroup.Own()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var ownRel string
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			ownRel = p
		}
	}
	mount := strings.TrimSuffix(own, ownRel)
	return "/" + strings.TrimPrefix(strings.TrimPrefix(path, mount), "/")
}

// The child is in its session's cgroup from its first instruction: clone3 puts it there, so
// even a program that reads its own cgroup as the very first thing it does sees the session's.
func TestCgroupPlacement(t *testing.T) {
	t.Parallel()
	opts := cgroupOptions(t)
	r := NewRegistry(opts, nil)
	wakeCh, wake := testutil.WakeChan()
	s, v := openT(t, r, "alice", wake, "/bin/cat", "/proc/self/cgroup")
	c := collect(t, v, wakeCh, nil)
	want := cgroupRel(t, s.CgroupPath())
	if filepath.Base(s.CgroupPath()) != s.ID() || filepath.Dir(s.CgroupPath()) != opts.Cgroups.Dir() {
		t.Errorf("cgroup path: got %s, want %s/%s", s.CgroupPath(), opts.Cgroups.Dir(), s.ID())
	}
	c.waitOutput(t, "0::"+want+"\r\n", 10*time.Second)
	// Reaping the exited session removes its cgroup.
	testutil.WaitClosed(t, s.exited, 10*time.Second, "exit of cat")
	ctx, cancel := context.WithTimeout(context.Background(), killDeadline)
	defer cancel()
	if res := r.Teardown(ctx, s); res.Survivors != 0 {
		t.Errorf("teardown of an exited session: %+v", res)
	}
	if _, err := os.Stat(s.CgroupPath()); !os.IsNotExist(err) {
		t.Errorf("the session's cgroup outlived its teardown: %v", err)
	}
}

// A kill with cgroups ends the jobs that never touched the PTY, which the signals cannot find
// (a nohup'ed job, a disowned one, a double fork), reports 0 survivors from an empty
// cgroup.procs, and removes the cgroup.
func TestCgroupKillEndsDetachedJobs(t *testing.T) {
	t.Parallel()
	opts := cgroupOptions(t)
	opts.KillGrace = 50 * time.Millisecond
	r := NewRegistry(opts, nil)
	wakeCh, wake := testutil.WakeChan()
	s, v := openT(t, r, "alice", wake, "/bin/sh", "-c",
		`nohup sleep 1000 >/dev/null 2>&1 & echo "J $!"; sleep 1000 </dev/null >/dev/null 2>&1 & echo "J $!"; disown 2>/dev/null; `+
			`(setsid sleep 1000 </dev/null >/dev/null 2>&1 &); echo READY; exec sleep 1000`)
	c := collect(t, v, wakeCh, nil)
	c.waitOutput(t, "READY", 10*time.Second)
	killEmptiesCgroup(t, r, s, 4)
}

// killEmptiesCgroup waits for n processes in s's cgroup, kills s (alice's) and checks that
// none of them survived, the child was reaped, and the cgroup is gone.
func killEmptiesCgroup(t *testing.T, r *Registry, s *Session, n int) {
	t.Helper()
	g := cgroup.Group(s.CgroupPath())
	var pids []int
	testutil.WaitFor(t, 5*time.Second, strconv.Itoa(n)+" processes in the cgroup", func() bool {
		pids, _ = g.Procs()
		return len(pids) == n
	})
	res, _ := killWithin(t, killDeadline, func(ctx context.Context) (KillResult, error) {
		return r.Kill(ctx, s.ID(), "alice")
	})
	if res.Survivors != 0 || !res.Reaped {
		t.Errorf("kill: got survivors %d, reaped %v, want 0, true (%+v)", res.Survivors, res.Reaped, res)
	}
	for _, pid := range pids {
		if testutil.Alive(pid) {
			t.Errorf("pid %d (%s) survived the kill", pid, comm(pid))
		}
	}
	if _, err := os.Stat(s.CgroupPath()); !os.IsNotExist(err) {
		t.Errorf("the session's cgroup outlived its kill: %v", err)
	}
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// A session running as root may make cgroups below its own (a gateway run inside a session
// does) and move processes there: cgroup.kill reaches them, and the kill removes the session's
// cgroup with everything below it.
func TestCgroupKillRemovesNestedCgroups(t *testing.T) {
	t.Parallel()
	opts := cgroupOptions(t)
	opts.KillGrace = 50 * time.Millisecond
	r := NewRegistry(opts, nil)
	own, err := cgroup.Own()
	if err != nil {
		t.Fatal(err)
	}
	mount := strings.TrimSuffix(own, cgroupRel(t, own))
	wakeCh, wake := testutil.WakeChan()
	s, v, err := r.Open(Spec{Argv: []string{"/bin/sh", "-c",
		`d="$MNT$(sed -n 's/^0:://p' /proc/self/cgroup)/inner"; mkdir "$d" && ` +
			`sh -c 'echo $$ > "$1/cgroup.procs" && exec sleep 1000' _ "$d" </dev/null >/dev/null 2>&1 & ` +
			`echo "INNER $!"; echo READY; exec sleep 1000`},
		Env: []string{"MNT=" + mount}, Cols: 80, Rows: 24, Dir: os.TempDir(), Owner: "alice"}, 0, wake)
	if err != nil {
		t.Fatal(err)
	}
	cleanupSession(t, s)
	c := collect(t, v, wakeCh, nil)
	c.waitOutput(t, "READY", 10*time.Second)
	inner := cgroup.Group(filepath.Join(s.CgroupPath(), "inner"))
	var pids []int
	testutil.WaitFor(t, 5*time.Second, "a process in the nested cgroup", func() bool {
		pids, _ = inner.Procs()
		return len(pids) == 1
	})
	res, _ := killWithin(t, killDeadline, func(ctx context.Context) (KillResult, error) {
		return r.Kill(ctx, s.ID(), "alice")
	})
	if res.Survivors != 0 {
		t.Errorf("kill: survivors %d, want 0 (%+v)", res.Survivors, res)
	}
	if testutil.Alive(pids[0]) {
		t.Errorf("the process in the nested cgroup (%d) survived", pids[0])
	}
	if _, err := os.Stat(s.CgroupPath()); !os.IsNotExist(err) {
		t.Errorf("the session's cgroup outlived its kill: %v", err)
	}
}

// A process outside the session's cgroup that holds its PTY when the cgroup has been emptied
// counts as a survivor only if a scan KillGrace later still finds the PTY held: one on its way
// out (a process exiting; here a spared escapee the test ends right after the first scan) is
// not one. One that stays
// is, and so is one that hands the terminal to another process and exits.
func TestCgroupKillCountsOnlyHoldersThatStay(t *testing.T) {
	for _, tc := range []struct {
		name            string
		leaves, handsOn bool
		survivors       int
	}{
		{"holder leaves after the scan", true, false, 0},
		{"holder stays", false, false, 1},
		{"holder hands the terminal on and leaves", true, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := cgroupOptions(t)
			opts.KillGrace = 50 * time.Millisecond
			opts.SpareEscapees = true // killHolders leaves the outsider to endCgroup's scan
			var holder *exec.Cmd
			seen := make(chan int, 1)
			opts.testHookOutsideHolders = func(s *Session, n int) {
				seen <- n
				if tc.handsOn {
					startHolder(t, s.ptsName)
				}
				if tc.leaves {
					_ = holder.Process.Kill()
					_ = holder.Wait()
				}
			}
			r := NewRegistry(opts, nil)
			wakeCh, wake := testutil.WakeChan()
			s, v := openT(t, r, "alice", wake, "/bin/sh", "-c", "echo READY; exec sleep 1000")
			c := collect(t, v, wakeCh, nil)
			c.waitOutput(t, "READY", 10*time.Second)
			// The outsider: a process of the test's own, in the test's cgroup, holding the slave.
			if holder = startHolder(t, s.ptsName); holder == nil {
				t.FailNow()
			}
			res, _ := killWithin(t, killDeadline, func(ctx context.Context) (KillResult, error) {
				return r.Kill(ctx, s.ID(), "alice")
			})
			select {
			case n := <-seen:
				if n != 1 {
					t.Errorf("the scan found %d holders outside the cgroup, want 1", n)
				}
			default:
				t.Fatal("the kill's end never scanned for holders outside the cgroup")
			}
			if res.Survivors != tc.survivors || !res.Reaped {
				t.Errorf("kill: got survivors %d, reaped %v, want %d, true (%+v)", res.Survivors, res.Reaped, tc.survivors, res)
			}
		})
	}
}

// startHolder starts a `sleep` of the test's own (outside any session's cgroup) holding the
// slave path as its stdin, ended when the test ends if it still runs. It may run off the test's
// goroutine (in a kill's hook): it reports a failure with t.Error and returns nil.
func startHolder(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	// Started as the gateway starts a session's child (child.StartWith): the slave is opened
	// under the lock that keeps it out of any other child (a sibling test's spawn's).
	err := child.StartWith(cmd, func() (func(), error) {
		slave, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			return nil, err
		}
		cmd.Stdin = slave
		return func() { slave.Close() }, nil
	})
	if err != nil {
		t.Error(err)
		return nil
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		child.Reaped(cmd.Process.Pid)
	})
	return cmd
}
