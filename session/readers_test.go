package session

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/leakcheck"
	"github.com/muxterm/muxterm/internal/poller"
)

// Many sessions streaming at once through the shared workers: each viewer gets its own
// session's output exactly, in order, with nothing lost, repeated or taken from another.
func TestConcurrentStreamsAreExact(t *testing.T) {
	t.Parallel()
	const sessions, lines = 8, 30000
	type stream struct {
		s    *Session
		c    *collector
		want []byte
	}
	streams := make([]stream, sessions)
	for i := range streams {
		// A different first number per session, so a chunk read from the wrong master would
		// not match.
		from := 1 + i*1000000
		var want []byte
		for k := from; k < from+lines; k++ {
			want = strconv.AppendInt(want, int64(k), 10)
			want = append(want, '\n')
		}
		s := spawnT(t, testOptions(), "/bin/sh", "-c",
			fmt.Sprintf("stty raw -echo; seq %d %d", from, from+lines-1))
		wake, wakeFn := testutil.WakeChan()
		v, _, err := s.Subscribe(0, wakeFn)
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = stream{s: s, c: collect(t, v, wake, nil), want: want}
	}
	for i, st := range streams {
		if err := st.c.waitEnd(t, 60*time.Second); err != io.EOF {
			t.Fatalf("session %d: viewer end: got %v, want %v", i, err, io.EOF)
		}
		got, gaps, _ := st.c.result()
		if len(gaps) != 0 {
			t.Errorf("session %d: gaps %v, want none (the ring holds the whole stream)", i, gaps)
		}
		checkStream(t, fmt.Sprintf("session %d", i), got, gaps, st.want)
	}
}

// failCtl returns options whose own readers fail epoll_ctl op with EPERM, and those readers.
func failCtl(op int) (Options, *readers) {
	o, rp, _ := ownPollersWith(testOptions(), poller.Options{TestHookEpollCtl: func(_, o int) error {
		if o == op {
			return unix.EPERM
		}
		return nil
	}})
	return o, rp
}

// A session whose master the readers cannot take is refused, and leaves nothing behind: the
// child is killed and reaped, the master and the pidfd are closed, no reader runs. Not parallel:
// it counts the process's children and descriptors.
func TestSpawnFailsWhenMasterCannotBeRegistered(t *testing.T) {
	o, rp := failCtl(unix.EPOLL_CTL_ADD)
	fds, pts := leakcheck.FDs(), countPTS()
	o = o.withDefaults()
	_, err := spawn(newID(), Spec{Argv: []string{"/bin/sh", "-c", "exec sleep 60"}, Cols: 80, Rows: 24}, &o, nil, time.Now)
	if !errors.Is(err, ErrSpawn) || !errors.Is(err, unix.EPERM) {
		t.Fatalf("spawn: got %v, want ErrSpawn wrapping EPERM", err)
	}
	testutil.WaitFor(t, 10*time.Second, "the child to be reaped and its fds closed", func() bool {
		return len(leakcheck.Children(false)) == 0 && len(leakcheck.OpenedSince(fds)) == 0 && countPTS() <= pts
	})
	if rp.poller.Running() {
		t.Error("readers still running with no master registered")
	}
}

// A master that cannot be re-armed ends its session's reading instead of leaving the output
// stopped for good: what was read is kept, the end reaches viewers, the master is closed.
func TestFailedRearmEndsReading(t *testing.T) {
	t.Parallel()
	o, _ := failCtl(unix.EPOLL_CTL_MOD)
	// One write of three bytes, so the first turn reads all of it (echo's newline would reach
	// the master as a second piece, "\r\n").
	s := spawnT(t, o, "/bin/sh", "-c", "printf ONE; exec sleep 60")
	wake, wakeFn := testutil.WakeChan()
	v, _, err := s.Subscribe(0, wakeFn)
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, v, wake, nil)
	testutil.WaitClosed(t, s.ReaderDone(), 10*time.Second, "reader end after the failed re-arm")
	if err := c.waitEnd(t, 10*time.Second); err != io.EOF {
		t.Fatalf("viewer end: got %v, want %v", err, io.EOF)
	}
	if got := string(c.bytes()); got != "ONE" {
		t.Errorf("output %q: want the bytes read before the failed re-arm, %q", got, "ONE")
	}
	if !masterClosed(t, s) {
		t.Error("master still open after the reading ended")
	}
}

// A poller that fails ends the reading of every master registered with it, rather than leave
// their output stopped for good; the next spawn gets a new instance and is read.
func TestFailedPollerEndsEveryReading(t *testing.T) {
	t.Parallel()
	var waitFails atomic.Bool
	o, rp, _ := ownPollersWith(testOptions(), poller.Options{TestWaitFails: &waitFails})
	idle := spawnT(t, o, "/bin/sh", "-c", "exec sleep 60")
	busy := spawnT(t, o, "/bin/sh", "-c", "read x; echo WOKE; exec sleep 60")
	waitFails.Store(true)
	// The output that wakes a worker, which then finds its wait failed.
	if _, err := busy.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Session{idle, busy} {
		testutil.WaitClosed(t, s.ReaderDone(), 10*time.Second, "reading of "+s.ID()+" ended by the failed poller")
		if !masterClosed(t, s) {
			t.Errorf("%s: master still open after its reading ended", s.ID())
		}
	}
	testutil.WaitFor(t, 10*time.Second, "readers to stop", func() bool { return !rp.poller.Running() })

	after := spawnT(t, o, "/bin/sh", "-c", "printf AFTER; exec sleep 60")
	wake, wakeFn := testutil.WakeChan()
	v, _, err := after.Subscribe(0, wakeFn)
	if err != nil {
		t.Fatal(err)
	}
	collect(t, v, wake, nil).waitOutput(t, "AFTER", 10*time.Second)
}
