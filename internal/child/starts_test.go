package child

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
)

// While one start's ends are open, no other child of the process is forked: a start that comes
// meanwhile waits, and gets the lock only once the first child runs its program and our copies
// of its ends are closed, so it never inherits them. (A lock released before the ends are
// closed fails: the close waits for the waiting start to take the lock, 100 ms at most.)
func TestStartWithExcludesOtherStarts(t *testing.T) {
	waits, secondLocked := make(chan struct{}, 1), make(chan struct{})
	var locked atomic.Int32
	var endsClosed atomic.Bool
	testHookStartWaits = func() { waits <- struct{}{} }
	testHookStartLocked = func() {
		if locked.Add(1) == 2 {
			if !endsClosed.Load() {
				t.Error("the second start took the lock while the first's ends were open")
			}
			close(secondLocked)
		}
	}
	t.Cleanup(func() { testHookStartWaits, testHookStartLocked = nil, nil })

	var r *os.File
	first := exec.Command("/bin/sh", "-c", "echo first")
	second := exec.Command("/bin/true")
	secondStarted := make(chan error, 1)
	err := StartWith(first, func() (func(), error) {
		var w *os.File
		var err error
		if r, w, err = os.Pipe(); err != nil {
			return nil, err
		}
		first.Stdout = w
		go func() { secondStarted <- Start(second) }()
		testutil.WaitClosed(t, waits, 10*time.Second, "the second start to wait for the first")
		return func() {
			// A start that let go of the lock before this close would let the waiting start
			// in now, which takes it within microseconds: it is given the time, the ends open.
			// (With the lock held here, as it must be, the wait runs out.)
			select {
			case <-secondLocked:
			case <-time.After(100 * time.Millisecond):
			}
			w.Close()
			endsClosed.Store(true)
		}, nil
	})
	if err != nil {
		t.Fatalf("first start: %v", err)
	}
	defer r.Close()
	if err := <-secondStarted; err != nil {
		t.Fatalf("second start: %v", err)
	}
	if n := locked.Load(); n != 2 {
		t.Errorf("%d starts took the lock, want 2", n)
	}
	// EOF once the first child exits: StartWith closed our copy of its end, and no other child
	// kept one.
	out, err := io.ReadAll(r)
	if err != nil || string(out) != "first\n" {
		t.Errorf("the first child's output: %q, %v", out, err)
	}
	for _, c := range []*exec.Cmd{first, second} {
		if err := c.Wait(); err != nil {
			t.Errorf("%v: %v", c.Args, err)
		}
		Reaped(c.Process.Pid)
	}
}

// A start whose ends cannot be opened starts nothing and says why.
func TestStartWithEndsRefused(t *testing.T) {
	cmd := exec.Command("/bin/true")
	err := StartWith(cmd, func() (func(), error) { return nil, os.ErrPermission })
	if !errors.Is(err, os.ErrPermission) || cmd.Process != nil {
		t.Fatalf("StartWith with refused ends: err %v, process %v", err, cmd.Process)
	}
}
