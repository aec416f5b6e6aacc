package session

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/leakcheck"
	"github.com/muxterm/muxterm/internal/testutil"
)

// TestWaiterReapsChildrenThatExitTogether: 64 children share one waiter and exit at once; each
// session gets its own child's status, and the waiter's goroutine and epoll fd go away with
// the last child. Not parallel: it compares the process's descriptors with those at its start.
func TestWaiterReapsChildrenThatExitTogether(t *testing.T) {
	const n = 64
	opts, _, w := ownPollers(testOptions())
	before := leakcheck.FDs()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("descriptors opened since the start, still open:\n  %s\nclosed since:\n  %s",
				strings.Join(leakcheck.OpenedSince(before), "\n  "),
				strings.Join(leakcheck.ClosedSince(before), "\n  "))
		}
	})
	gate := t.TempDir() + "/go"
	sessions := make([]*Session, n)
	for i := range sessions {
		// Every child waits for the same file, then exits with its own code.
		script := fmt.Sprintf("while [ ! -e %s ]; do sleep 0.01; done; exit %d", gate, i+1)
		sessions[i] = spawnT(t, opts, "/bin/sh", "-c", script)
	}
	if w.Idle() {
		t.Fatal("waiter idle with 64 children unreaped")
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, s := range sessions {
		testutil.WaitClosed(t, s.Exited(), 10*time.Second, fmt.Sprintf("exit of child %d", i))
		if e, ok := s.Exit(); !ok || e.Code != i+1 || e.Signal != 0 {
			t.Errorf("child %d: got %+v %v, want code %d", i, e, ok, i+1)
		}
	}
	for _, s := range sessions {
		testutil.WaitClosed(t, s.ReaderDone(), 10*time.Second, "reader end")
	}
	testutil.WaitFor(t, 5*time.Second, "the waiter to stop", w.Idle)
	// Descriptors close after the reader ends and the waiter stops, on their goroutines: a
	// loaded machine can take over 5 s. Compared by number and identity, not counted: an
	// earlier test's descriptor that closes meanwhile must not hold the count under the start.
	testutil.WaitFor(t, 20*time.Second, "the descriptors opened since the start to close", func() bool {
		return len(leakcheck.OpenedSince(before)) == 0
	})
}

// TestWaiterHandsOverAChildItCannotReap: a child whose pidfd says it exited but which wait4
// cannot reap yet (a tracer holds its zombie) would keep the level-triggered epoll readable and
// spin the waiter; it is handed to a blocking wait instead and its exit still arrives.
func TestWaiterHandsOverAChildItCannotReap(t *testing.T) {
	t.Parallel()
	gate := t.TempDir() + "/go"
	opts, _, w := ownPollers(testOptions())
	var target atomic.Int64 // the child's pid, once spawned
	calls := 0              // only the waiter goroutine calls the hook
	w.TestHookNotWaitable = func(pid int) bool {
		if int64(pid) == target.Load() {
			calls++
			return true
		}
		return false
	}
	s := spawnT(t, opts, "/bin/sh", "-c", fmt.Sprintf("while [ ! -e %s ]; do sleep 0.01; done; exit 5", gate))
	target.Store(int64(s.pid))
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosed(t, s.Exited(), 10*time.Second, "exit of the child handed over")
	if e, _ := s.Exit(); e.Code != 5 {
		t.Errorf("exit: got %+v, want code 5", e)
	}
	// The waiter wrote calls before it handed the child over, which happened before the exit.
	if calls != 1 {
		t.Errorf("the waiter looked at the unreapable child %d times, want 1 (then it let go)", calls)
	}
}
