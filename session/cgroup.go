package session

import (
	"context"
	"os"
	"syscall"
	"time"

	"github.com/muxterm/muxterm/internal/cgroup"
)

// CgroupPath returns the directory of the session's cgroup, or "" when the session has none
// (cgroups are off). An upgrade in place carries it to the next image.
func (s *Session) CgroupPath() string { return s.cgroup.Path() }

// newCgroup creates the cgroup for session id and points attr at it, so the child is cloned
// straight into it (clone3 with CLONE_INTO_CGROUP): it runs no instruction outside it. The
// caller closes the returned directory once the child started. With cgroups off it does
// nothing.
func newCgroup(opts *Options, id string, attr *syscall.SysProcAttr) (cgroup.Group, *os.File, error) {
	if opts.Cgroups == nil {
		return "", nil, nil
	}
	g, dir, err := opts.Cgroups.NewGroup(id)
	if err != nil {
		return "", nil, err
	}
	attr.UseCgroupFD, attr.CgroupFD = true, int(dir.Fd())
	return g, dir, nil
}

// removeCgroup removes the cgroup of a session whose child never started.
func removeCgroup(g cgroup.Group) {
	if g != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = g.Remove(ctx)
	}
}

// killCgroup is the last step of a kill with cgroups: it writes cgroup.kill (SIGKILL to every
// process still in the session's cgroup, those that never touched the PTY included: nohup'ed,
// disowned, double-forked), waits until cgroup.procs is empty, for the child to be reaped, and
// removes the cgroup, all within wait. It returns how many processes were in the cgroup when it
// was killed and the pids still in it (or below it) at the end: the survivors.
func (s *Session) killCgroup(ctx context.Context, wait time.Duration) (killed int, left []int, err error) {
	g := s.cgroup
	// Bounded by wait alone: a kill whose caller went away (its socket closed) still removes
	// the cgroup it has killed.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	// Each step needs a descriptor: under a full table, the reserve's (withFDs).
	var pids []int
	if err := withFDs(func() (err error) { pids, err = g.AllProcs(); return err }); err != nil {
		return 0, nil, err
	}
	if len(pids) > 0 {
		if err := withFDs(g.Kill); err != nil {
			return 0, pids, err
		}
	}
	err = withFDs(func() (err error) { left, err = g.WaitEmpty(ctx); return err })
	if err != nil || len(left) > 0 {
		return len(pids), left, err
	}
	// The child is reaped by the waiter, the re-parented orphans by the subreaper: neither
	// keeps the cgroup busy once cgroup.procs is empty, but the exit status is part of the result.
	select {
	case <-s.exited:
	case <-ctx.Done():
	}
	// Recursively: a session running as root may have made cgroups of its own (a nested
	// gateway does), emptied by the same cgroup.kill.
	if _, err := cgroup.RemoveAll(ctx, g.Path()); err != nil {
		// Checked empty above: the failure is the directory's, not a process's. Logged, and
		// not an unverified check (left is empty, not unknown).
		s.opts.Logger.Warn("kill: remove the session's cgroup", "session", s.id, "cgroup", g.Path(), "err", err)
	}
	return len(pids), nil, nil
}
