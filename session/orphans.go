package session

import (
	"log/slog"
	"os/exec"

	"github.com/muxterm/muxterm/internal/child"
)

// StartChild starts cmd so that the orphan reaper leaves its exit status to cmd.Wait. Code in
// the gateway that starts a child process and waits for it must start it here once
// AdoptOrphans ran, and call done after cmd.Wait returned (internal/child).
func StartChild(cmd *exec.Cmd) (done func(), err error) { return child.StartChild(cmd) }

// AdoptOrphans makes this process a child subreaper (PR_SET_CHILD_SUBREAPER) and starts the
// goroutine that reaps the orphans re-parented to it (internal/child). Call it once, from main,
// before the first session is opened: it is process-wide and for the life of the process.
func AdoptOrphans(log *slog.Logger) error { return child.AdoptOrphans(log) }

// OrphansReaped returns how many re-parented orphans the reaper reaped.
func OrphansReaped() int64 { return child.OrphansReaped() }
