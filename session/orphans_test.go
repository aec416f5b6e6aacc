package session

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/leakcheck"
	"github.com/muxterm/muxterm/internal/testutil"
)

const orphanHelperEnv = "MUXTERM_ORPHAN_HELPER"

// The orphan reaper reaps the orphans re-parented to a subreaper and never the exit status of
// a child other code waits for. It makes the process a subreaper for good, so it runs in a
// process of its own (this test binary again) and reports from there.
func TestOrphanReaperKeepsChildStatuses(t *testing.T) {
	if os.Getenv(orphanHelperEnv) == "1" {
		orphanHelper()
		return
	}
	t.Parallel()
	out := testutil.RunOwnProcess(t, orphanHelperEnv, "ORPHANS OK")
	t.Logf("helper: %s", strings.TrimSpace(out))
}

// orphanHelper becomes a subreaper, runs sessions and a plain command that each leave
// double-forked orphans and exit with a code of their own, and checks that every code arrived,
// that the orphans were reaped (no zombie child is left), then exits (the reaper's goroutine
// lives as long as the process, which the leak check would report).
func orphanHelper() {
	fail := func(format string, args ...any) {
		fmt.Printf("FAIL: "+format+"\n", args...)
		os.Exit(1)
	}
	if err := AdoptOrphans(slog.New(slog.DiscardHandler)); err != nil {
		fail("%v", err)
	}
	opts := testOptions()
	o := opts.withDefaults()
	const n = 20
	var ss []*Session
	for i := range n {
		s, err := spawn(newID(), Spec{Argv: []string{"/bin/sh", "-c",
			fmt.Sprintf("(sleep 0.%d &); (true &); exit %d", i%3, i+1)}, Cols: 80, Rows: 24, Dir: os.TempDir()}, &o, nil, time.Now)
		if err != nil {
			fail("spawn: %v", err)
		}
		ss = append(ss, s)
	}
	// A command started through StartChild keeps its status for cmd.Wait.
	cmd := exec.Command("/bin/sh", "-c", "(sleep 0.1 &); exit 7")
	done, err := StartChild(cmd)
	if err != nil {
		fail("start child: %v", err)
	}
	err = cmd.Wait()
	done()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		fail("StartChild's command: got %v, want exit status 7", err)
	}
	for i, s := range ss {
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			fail("session %d not reaped", i)
		}
		if s.exit.Code != i+1 {
			fail("session %d: exit code %d, want %d (a stolen status reads -1)", i, s.exit.Code, i+1)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Every orphan has exited by now or soon (the longest sleeps 0.2 s); once it has, the
		// reaper reaps it: no child of ours is left, zombie or not.
		left := leakcheck.Children(false)
		if len(left) == 0 && OrphansReaped() >= 2*n+1 {
			break
		}
		if time.Now().After(deadline) {
			fail("children left %v, orphans reaped %d (want >= %d)", left, OrphansReaped(), 2*n+1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Printf("ORPHANS OK: %d orphans reaped, every status kept\n", OrphansReaped())
	os.Exit(0)
}
