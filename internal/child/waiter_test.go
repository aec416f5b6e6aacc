package child

import (
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/testutil"
)

// TestBlockingWaitFallback: a child the shared waiter cannot take (no epoll, or a tracer holding
// its zombie) is reaped by a blocking wait of its own, with its real status.
func TestBlockingWaitFallback(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "kill -TERM $$")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release() // as spawn does: our wait4 reaps it, not os/exec
	type result struct {
		ws  unix.WaitStatus
		err error
	}
	got := make(chan result, 1)
	blockingWait(&waitEntry{pid: pid, reaped: func(ws unix.WaitStatus, err error) { got <- result{ws, err} }})
	select {
	case r := <-got:
		if r.err != nil || !r.ws.Signaled() || r.ws.Signal() != unix.SIGTERM {
			t.Errorf("got status %v, err %v; want killed by SIGTERM", r.ws, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("child not reaped within 10s")
	}
	if testutil.Alive(pid) {
		t.Errorf("pid %d still exists after the reap", pid)
	}
}
