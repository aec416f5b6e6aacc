package session

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// waiterIdle reports whether the shared child waiter has stopped: no epoll fd, no goroutine.
func waiterIdle() bool {
	children.mu.Lock()
	defer children.mu.Unlock()
	return children.ep == nil
}

// TestWaiterReapsChildrenThatExitTogether: 64 children share one waiter and exit at once; each
// session gets its own child's status, and the waiter's goroutine and epoll fd go away with
// the last child.
func TestWaiterReapsChildrenThatExitTogether(t *testing.T) {
	const n = 64
	fds := countFDs()
	gate := t.TempDir() + "/go"
	sessions := make([]*Session, n)
	for i := range sessions {
		// Every child waits for the same file, then exits with its own code.
		script := fmt.Sprintf("while [ ! -e %s ]; do sleep 0.01; done; exit %d", gate, i+1)
		sessions[i] = spawnT(t, testOptions(), "/bin/sh", "-c", script)
	}
	if waiterIdle() {
		t.Fatal("waiter idle with 64 children unreaped")
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, s := range sessions {
		waitClosed(t, s.Exited(), 10*time.Second, fmt.Sprintf("exit of child %d", i))
		if e, ok := s.Exit(); !ok || e.Code != i+1 || e.Signal != 0 {
			t.Errorf("child %d: got %+v %v, want code %d", i, e, ok, i+1)
		}
	}
	for _, s := range sessions {
		waitClosed(t, s.ReaderDone(), 10*time.Second, "reader end")
	}
	waitFor(t, 5*time.Second, "the waiter to stop", waiterIdle)
	waitFor(t, 5*time.Second, "fds back to the start", func() bool { return countFDs() == fds })
}
