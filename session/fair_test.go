package session

import (
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/testutil"
)

// turnLog counts the bytes each reader turn read and the holds, for the sessions that share
// one Options.
type turnLog struct {
	mu    sync.Mutex
	total map[*Session]int64
	held  map[*Session]int
}

// logTurns gives o its own readers with the fair share's slack and wait, and counts each
// turn's bytes and each hold.
func logTurns(o Options, slack int64, wait time.Duration) (Options, *readPoller, *turnLog) {
	o, rp, _ := ownPollers(o)
	rp.fairSlack, rp.fairWait = slack, wait
	l := &turnLog{total: map[*Session]int64{}, held: map[*Session]int{}}
	o.testHookAfterTurn = func(s *Session, read int, _ bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.total[s] += int64(read)
	}
	rp.testHookHold = func(s *Session) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.held[s]++
	}
	return o, rp, l
}

func (l *turnLog) bytes(s *Session) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total[s]
}

// heavy reports whether every one of ss counts in rp's fair share as streaming.
func (rp *readPoller) heavy(ss ...*Session) bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for _, s := range ss {
		if rp.shares[s] == nil {
			return false
		}
	}
	return true
}

// spawnYes starts n sessions that print as fast as they are read.
func spawnYes(t *testing.T, o Options, n int) []*Session {
	ss := make([]*Session, n)
	for i := range ss {
		ss[i] = spawnT(t, o, "/bin/sh", "-c", "stty raw -echo; exec yes")
	}
	return ss
}

// Two streams read by the same readers get the same bytes, within the fair share's slack: the
// one ahead is held until the other catches up, whichever program the CPUs favour.
func TestFairShareKeepsStreamsLevel(t *testing.T) {
	t.Parallel()
	const slack = 64 << 10
	o, rp, l := logTurns(testOptions(), slack, time.Minute)
	turnMax := int64(maxBatchesPerTurn * o.withDefaults().batchSize())
	ss := spawnYes(t, o, 2)
	testutil.WaitFor(t, 30*time.Second, "both streams to count as streaming", func() bool { return rp.heavy(ss...) })
	a0, b0 := l.bytes(ss[0]), l.bytes(ss[1])
	const span = 16 << 20
	testutil.WaitFor(t, 60*time.Second, "16 MiB read from the two", func() bool {
		return l.bytes(ss[0])-a0+l.bytes(ss[1])-b0 >= span
	})
	// After a turn that was not held, a stream is at most the slack ahead of the other, and its
	// next turn adds at most turnMax; the two counts started up to that far apart, either way.
	a, b := l.bytes(ss[0])-a0, l.bytes(ss[1])-b0
	if d := max(a-b, b-a); d > 2*(slack+turnMax) {
		t.Errorf("bytes read since both streamed: %d and %d, %d apart; want at most twice the slack %d plus a turn %d",
			a, b, d, slack, turnMax)
	}
}

// A stream that stops (its program stopped, or printing slowly) holds the others back for at
// most the fair share's wait: it then stops counting, and the other is read on.
func TestFairShareLetsGoOfAStoppedStream(t *testing.T) {
	t.Parallel()
	const slack = 64 << 10
	o, rp, l := logTurns(testOptions(), slack, 50*time.Millisecond)
	runner, stopped := stopOneOfTwoStreams(t, o, rp)
	// Read what was left in the stopped one's PTY, then see the other run far ahead of it.
	base := l.bytes(stopped)
	testutil.WaitFor(t, 30*time.Second, "the running stream 8 MiB ahead of the stopped one", func() bool {
		return l.bytes(runner)-l.bytes(stopped) > 8<<20
	})
	// A turn under way when the signal came, then what the PTY held (~18 KiB).
	if after, most := l.bytes(stopped)-base, int64(maxBatchesPerTurn*o.withDefaults().batchSize()+64<<10); after > most {
		t.Errorf("the stopped stream was read %d bytes after SIGSTOP; want at most a turn and its PTY's contents, %d", after, most)
	}
	l.mu.Lock()
	held := l.held[runner]
	l.mu.Unlock()
	if held == 0 {
		t.Error("the running stream was never held behind the stopped one")
	}
	if rp.heavy(stopped) {
		t.Error("the stopped stream still counts as streaming after the wait")
	}
}

// A held stream that is killed is drained and ended at once, not held to the end of the wait:
// past the kill point a master never counts as streaming.
func TestFairShareNeverHoldsAClosingSession(t *testing.T) {
	t.Parallel()
	o, rp, l := logTurns(testOptions(), 64<<10, time.Hour)
	runner, _ := stopOneOfTwoStreams(t, o, rp)
	waitFairHeld(t, l, runner)
	// endSession fails the test unless the reading ends within 15 s; the hold would last an hour.
	endSession(t, runner)
}

// A held stream whose program exits on its own (not through a kill: no kill point) is read to
// its end at once: its exit is reported once its output is read, so a tail left held would be
// lost (the hold here would last an hour).
func TestFairShareReadsAnExitedStreamToItsEnd(t *testing.T) {
	t.Parallel()
	o, rp, l := logTurns(testOptions(), 64<<10, time.Hour)
	runner, _ := stopOneOfTwoStreams(t, o, rp)
	waitFairHeld(t, l, runner)
	if err := unix.Kill(runner.pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosed(t, runner.Exited(), 10*time.Second, "the held stream's exit")
	// The slave closed with the program: the master is read to EIO, which ends the reading.
	testutil.WaitClosed(t, runner.ReaderDone(), 10*time.Second, "the held stream read to its end")
}

// stopOneOfTwoStreams spawns two `yes` sessions, waits until both count as streaming, then
// stops the second with SIGSTOP (continued when the test ends).
func stopOneOfTwoStreams(t *testing.T, o Options, rp *readPoller) (runner, stopped *Session) {
	t.Helper()
	ss := spawnYes(t, o, 2)
	runner, stopped = ss[0], ss[1]
	testutil.WaitFor(t, 30*time.Second, "both streams to count as streaming", func() bool { return rp.heavy(ss...) })
	if err := unix.Kill(stopped.pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Kill(stopped.pid, unix.SIGCONT) })
	return runner, stopped
}

// waitFairHeld waits until the fair share has held s at least once.
func waitFairHeld(t *testing.T, l *turnLog, s *Session) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, "the running stream held behind the stopped one", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.held[s] > 0
	})
}
