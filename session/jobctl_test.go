package session

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/leakcheck"
	"github.com/muxterm/muxterm/internal/testutil"
)

// An interactive shell runs its foreground job in a process group of its own. Each step of a kill signals every process group of the session's terminal session, so the
// job dies with the shell at the first step (HUP) and the kill takes well under one grace, not a
// second escalation for the job; the result counts the groups it signalled.
func TestKillSignalsEveryGroupOfTheTerminalSession(t *testing.T) {
	t.Parallel()
	for _, argv := range [][]string{{"bash", "--norc", "--noprofile", "-i"}, {"sh", "-i"}} {
		t.Run(argv[0], func(t *testing.T) {
			t.Parallel()
			killJobControlShell(t, argv)
		})
	}
}

func killJobControlShell(t *testing.T, argv []string) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		t.Skipf("%s not installed", argv[0])
	}
	opts := testOptions()
	opts.KillGrace = 2 * time.Second
	r := NewRegistry(opts, nil)
	wake, wakeFn := testutil.WakeChan()
	s, v := openT(t, r, "alice", wakeFn, append([]string{path}, argv[1:]...)...)
	c := collect(t, v, wake, nil)
	if _, err := s.Write([]byte("set -m; PS1='$ '; echo READ''Y\n")); err != nil {
		t.Fatal(err)
	}
	c.waitOutput(t, "READY", 5*time.Second)
	if _, err := s.Write([]byte("exec 2>&1; sh -c 'echo JOB $$ E''ND; exec sleep 60'\n")); err != nil {
		t.Fatal(err)
	}
	c.waitOutput(t, " END", 5*time.Second)
	var job int
	b := c.bytes()
	if _, err := fmt.Sscanf(string(b[lastIndex(b, "JOB "):]), "JOB %d END", &job); err != nil {
		t.Fatalf("job pid: %v in %q", err, b)
	}
	if pgrp := pgrpOf(t, job); pgrp == s.Pid() {
		t.Fatalf("job %d: got process group %v, want one of its own (job control)", job, pgrp)
	}

	res, took := killWithin(t, 4*opts.KillGrace+2*time.Second, func(ctx context.Context) (KillResult, error) {
		return r.Kill(ctx, s.ID(), "alice")
	})
	t.Logf("kill took %v: signals %v, groups %d, signalled %d, survivors %d", took, res.Signals, res.Groups, res.Signalled, res.Survivors)
	if took > opts.KillGrace {
		t.Errorf("kill took %v, want under one kill grace (%v): the job's group was not signalled with the shell's", took, opts.KillGrace)
	}
	if res.Groups < 2 {
		t.Errorf("groups: got %d, want at least 2 (the shell's and the job's)", res.Groups)
	}
	if res.Survivors != 0 || res.Unverified != 0 {
		t.Errorf("survivors, unverified: got %d, %d, want 0, 0", res.Survivors, res.Unverified)
	}
	testutil.WaitFor(t, time.Second, "job gone", func() bool { return !testutil.Alive(job) })
}

func lastIndex(b []byte, s string) int {
	for i := len(b) - len(s); i >= 0; i-- {
		if string(b[i:i+len(s)]) == s {
			return i
		}
	}
	return 0
}

// When the kill cannot check for survivors at all (every step that needs a descriptor fails,
// as with a full table that even the reserve cannot relieve), the result says so in Unverified;
// it never reports survivors 0 with nothing unverified while an escapee runs.
// With cgroups too: cgroup.procs and cgroup.kill cannot be opened either. Not parallel:
// testNoFDs is package-wide.
func TestKillWithoutDescriptorsReportsUnverified(t *testing.T) {
	for _, cg := range []bool{false, true} {
		t.Run(fmt.Sprintf("cgroups=%v", cg), func(t *testing.T) {
			opts := testOptions()
			if cg {
				opts = cgroupOptions(t)
			}
			r, s, _, pid := openWithEscapee(t, opts, "")
			testNoFDs.Store(true)
			res, _ := killWithin(t, killDeadline, func(ctx context.Context) (KillResult, error) {
				defer testNoFDs.Store(false)
				return r.Kill(ctx, s.ID(), "alice")
			})
			t.Logf("kill: escapees %d, survivors %d, unverified %d", res.Escapees, res.Survivors, res.Unverified)
			if testutil.Alive(pid) && res.Survivors == 0 && res.Unverified == 0 {
				t.Errorf("the escapee %d runs and the result says survivors 0, unverified 0", pid)
			}
			if res.Unverified == 0 {
				t.Errorf("unverified: got 0, want at least 1 (no /proc scan could be made)")
			}
			if !testutil.Alive(pid) {
				t.Errorf("the escapee %d died: want it found by nothing (every check failed), which is what this tests", pid)
			}
			if cg {
				// The cleanup's teardown waits for the one above: end the escapee and the
				// cgroup now that descriptors are back.
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
}

// A stopped job (an interactive shell's ^Z) dies with the first step too: its group gets HUP
// with the shell's, and once the shell is gone the group is orphaned with a stopped member, so
// the kernel follows with HUP and CONT (the kill sends no CONT of its own).
func TestKillWakesAStoppedJob(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.KillGrace = 2 * time.Second
	r := NewRegistry(opts, nil)
	wake, wakeFn := testutil.WakeChan()
	s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c", "set -m; sleep 60 & kill -STOP $!; echo JOB $! E''ND; exec sleep 60")
	c := collect(t, v, wake, nil)
	c.waitOutput(t, " END", 5*time.Second)
	var job int
	b := c.bytes()
	if _, err := fmt.Sscanf(string(b[lastIndex(b, "JOB "):]), "JOB %d END", &job); err != nil {
		t.Fatalf("job pid: %v in %q", err, b)
	}
	testutil.WaitFor(t, 5*time.Second, "the job to stop", func() bool {
		st, _, ok := leakcheck.Stat(job)
		return ok && st == 'T'
	})
	res, took := killWithin(t, 4*opts.KillGrace+2*time.Second, func(ctx context.Context) (KillResult, error) {
		return r.Kill(ctx, s.ID(), "alice")
	})
	t.Logf("kill took %v: signals %v, groups %d, survivors %d", took, res.Signals, res.Groups, res.Survivors)
	if took > opts.KillGrace {
		t.Errorf("kill took %v, want under one kill grace (%v): the stopped job did not act on HUP", took, opts.KillGrace)
	}
	testutil.WaitFor(t, time.Second, "job gone", func() bool { return !testutil.Alive(job) })
}
