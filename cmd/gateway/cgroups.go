package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/muxterm/muxterm/internal/cgroup"
)

// cgroupsOff is the flag value that turns cgroups off.
const cgroupsOff = "off"

// killPolicyWithout is the kill policy without cgroups, as the start-up line states it.
const killPolicyWithout = "signals only: HUP, TERM, KILL to the session's process group, then to every process holding its PTY; " +
	"processes that left both (nohup, disown, setsid without the terminal) survive a kill, and everything survives a crash of the gateway"

// openCgroups gives sessions cgroups under root (see internal/cgroup) and sweeps what gateways
// that died left there. root "" is the default, a child of the gateway's own cgroup; root "off"
// turns cgroups off. It returns nil with cgroups off, after one log line saying why and which
// kill policy applies; an explicit root that cannot be used is an error (the operator asked
// for cgroups, so the gateway does not run without them).
func openCgroups(ctx context.Context, root string, log *slog.Logger) (*cgroup.Tree, error) {
	if root == cgroupsOff {
		log.Info("cgroups off: --cgroup-root off", "kill_policy", killPolicyWithout)
		return nil, nil
	}
	def := root == ""
	if def {
		r, err := cgroup.DefaultRoot()
		if err != nil {
			log.Warn("cgroups off: "+err.Error(), "kill_policy", killPolicyWithout)
			return nil, nil
		}
		root = r
	}
	t, err := cgroup.Open(root)
	if err != nil {
		if def {
			log.Warn("cgroups off: "+err.Error(), "kill_policy", killPolicyWithout)
			return nil, nil
		}
		return nil, fmt.Errorf("--cgroup-root: %w", err)
	}
	t.RemoveRoot = def
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a process stuck in D state must not stall the start
	defer cancel()
	procs, groups, err := t.Sweep(sctx)
	if err != nil {
		log.Warn("cgroup sweep: some cgroups of a dead gateway are left", "err", err)
	}
	log.Info("cgroups on", "root", t.Root(), "dir", t.Dir(), "swept_processes", procs, "swept_cgroups", groups,
		"kill_policy", "signals, then cgroup.kill of the session's cgroup until cgroup.procs is empty")
	return t, nil
}
