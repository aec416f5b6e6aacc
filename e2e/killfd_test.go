//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
)

// A kill when the gateway's descriptor table is full: the gateway runs under
// a lowered ulimit -n, and once the session and its setsid escapee run, its limit is lowered
// again, to its lowest free descriptor, so that no open, pidfd_open or socket can get one. The
// kill must still find and end the escapee (the kill path's descriptor reserve), and its result
// must never say survivors 0 while the escapee runs: whatever it could not check is counted in
// unverified. With and without cgroups.
func TestKillUnderDescriptorExhaustion(t *testing.T) {
	for _, cg := range []string{"off", "on"} {
		t.Run("cgroups="+cg, func(t *testing.T) {
			root := "off"
			if cg == "on" {
				root = testutil.CgroupRoot(t)
			}
			g := startGatewayNofile(t, 256, "--allow-cmd", "*", "--cgroup-root", root, "--kill-grace", "200ms")
			c := g.dial(t)
			ctx := ctxT(t, 30*time.Second)
			pid := g.cmd.Process.Pid
			before := fdsOf(t, pid)
			ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
				Cmd: []string{"sh", "-c", `setsid sh -c 'echo "ESC $$ READY"; exec sleep 1000' & exec sleep 1000`}})
			if err != nil {
				t.Fatal(err)
			}
			esc, _ := readPid(ctx, t, ch, "READY", "ESC")
			t.Cleanup(func() { _ = syscall.Kill(esc, syscall.SIGKILL) })
			testutil.WaitFor(t, 5*time.Second, "the escapee to exec sleep", func() bool {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", esc))
				return err == nil && string(b) == "sleep\n"
			})

			// The limit goes down to the lowest descriptor the session took (its PTY master, its
			// child's pidfd, ...): every number below it is in use, and those the session frees
			// as its child dies (the pidfd) are at or above it, so they cannot be reused either.
			limit := -1
			for fd := range fdsOf(t, pid) {
				if !before[fd] && (limit < 0 || fd < limit) {
					limit = fd
				}
			}
			if limit < 0 {
				t.Fatal("the session took no descriptor in the gateway")
			}
			lim := unix.Rlimit{Cur: uint64(limit), Max: uint64(limit)}
			if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
				t.Fatalf("prlimit: %v", err)
			}
			t.Logf("descriptor limit lowered to %d: no free descriptor below it", limit)
			res, err := c.Kill(ctx, ch.Session())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("kill: %+v", res)
			if testutil.Alive(esc) && res.Survivors == 0 && res.Unverified == 0 {
				t.Errorf("kill result says survivors 0, unverified 0 while the escapee %d runs: %+v", esc, res)
			}
			if res.Escapees != 1 || res.Survivors != 0 || res.Unverified != 0 {
				t.Errorf("escapees, survivors, unverified: got %d, %d, %d, want 1, 0, 0 (the reserve lets the kill check everything)",
					res.Escapees, res.Survivors, res.Unverified)
			}
			testutil.WaitFor(t, 2*time.Second, "the escapee to die", func() bool { return !testutil.Alive(esc) })
		})
	}
}

// fdsOf returns the descriptor numbers pid has open.
func fdsOf(t *testing.T, pid int) map[int]bool {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	fds := make(map[int]bool, len(ents))
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			fds[fd] = true
		}
	}
	return fds
}

// session.kill of an interactive bash running a foreground job: the job's
// process group gets each signal with the shell's, so the kill ends at HUP (the result's
// signals say so, however slow the host: the grace is long) and the result counts both groups.
func TestKillInteractiveShellWithForegroundJob(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	const grace = 10 * time.Second
	g := startGateway(t, "--allow-cmd", "*", "--cgroup-root", "off", "--kill-grace", grace.String())
	c := g.dial(t)
	ctx := ctxT(t, 60*time.Second)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"bash", "--norc", "--noprofile", "-i"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Write([]byte("PS1='$ '; sh -c 'echo JOB $$ E''ND; exec sleep 1000'\n")); err != nil {
		t.Fatal(err)
	}
	job, _ := readPid(ctx, t, ch, " END", "JOB")
	t.Cleanup(func() { _ = syscall.Kill(job, syscall.SIGKILL) })
	start := time.Now()
	res, err := c.Kill(ctx, ch.Session())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kill took %v: %+v", time.Since(start), res)
	if !slices.Equal(res.Signals, []string{"HUP"}) {
		t.Errorf("signals: got %v, want [HUP]: the kill went past HUP", res.Signals)
	}
	if res.Groups != 2 || res.Survivors != 0 || res.Unverified != 0 {
		t.Errorf("groups, survivors, unverified: got %d, %d, %d, want 2, 0, 0", res.Groups, res.Survivors, res.Unverified)
	}
	testutil.WaitFor(t, 2*time.Second, "the job to die", func() bool { return !testutil.Alive(job) })
}
