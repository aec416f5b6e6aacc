package child

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/procfs"
	"github.com/muxterm/muxterm/internal/testutil"
)

const orphanFirstPassEnv = "MUXTERM_ORPHAN_FIRST_PASS"

// An orphan that became a zombie before AdoptOrphans (after an upgrade's exec, say) sent its
// SIGCHLD before anyone listened: the reaper must still reap it, with a first pass at start.
// In a process of its own, as AdoptOrphans is for the life of the process.
func TestOrphanReaperFirstPass(t *testing.T) {
	if os.Getenv(orphanFirstPassEnv) == "1" {
		orphanFirstPassHelper()
		return
	}
	t.Parallel()
	testutil.RunOwnProcess(t, orphanFirstPassEnv, "FIRST PASS OK")
}

// orphanFirstPassHelper leaves a child unwaited until it is a zombie, then adopts orphans and
// expects the zombie gone with no further SIGCHLD to prompt the reaper.
func orphanFirstPassHelper() {
	fail := func(format string, args ...any) {
		fmt.Printf("FAIL: "+format+"\n", args...)
		os.Exit(1)
	}
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		fail("start: %v", err)
	}
	pid := cmd.Process.Pid
	zombie := func() bool {
		st, err := procfs.ReadStat(pid)
		return err == nil && st.Zombie()
	}
	if !waitUntil(10*time.Second, zombie) {
		fail("child %d never became a zombie", pid)
	}
	// Nothing here kicked the reaper, as in a new image after exec; a kick left behind would
	// hide a missing first pass.
	select {
	case <-orphans.kick:
	default:
	}
	if err := AdoptOrphans(slog.New(slog.DiscardHandler)); err != nil {
		fail("%v", err)
	}
	gone := func() bool {
		_, err := procfs.ReadStat(pid)
		return err != nil && OrphansReaped() == 1
	}
	if !waitUntil(10*time.Second, gone) {
		fail("zombie %d still there after AdoptOrphans (reaped %d)", pid, OrphansReaped())
	}
	fmt.Println("FIRST PASS OK")
	os.Exit(0)
}

// waitUntil polls cond until it holds or the deadline passes (no testing.T in a helper process).
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
