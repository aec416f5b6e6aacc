package session

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/leakcheck"
	"github.com/muxterm/muxterm/internal/testutil"
)

// turnLog counts the bytes each reader turn read and the holds, for the sessions that share
// one Options.
type turnLog struct {
	mu    sync.Mutex
	total map[*Session]int64
	full  map[*Session]int // turns that read all maxBatchesPerTurn batches
	held  map[*Session]int
}

// logTurns gives o its own readers with the fair share's slack, wait and idle bound (0: the
// default), and counts each turn's bytes, its full turns and each hold.
func logTurns(o Options, slack int64, wait, idle time.Duration) (Options, *readers, *turnLog) {
	o, rp, _ := ownPollers(o)
	if slack != 0 {
		rp.fair.fairSlack = slack
	}
	if wait != 0 {
		rp.fair.fairWait = wait
	}
	if idle != 0 {
		rp.fair.fairIdle = idle
	}
	l := &turnLog{total: map[*Session]int64{}, full: map[*Session]int{}, held: map[*Session]int{}}
	o.testHookAfterTurn = func(s *Session, read int, full bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.total[s] += int64(read)
		if full {
			l.full[s]++
		}
	}
	rp.fair.testHookHold = func(s *Session) {
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

// counts returns s's bytes read, full turns and holds so far.
func (l *turnLog) counts(s *Session) (read int64, full, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total[s], l.full[s], l.held[s]
}

// heavy reports whether every one of ss counts in rp's fair share as streaming.
func (rp *readers) heavy(ss ...*Session) bool {
	rp.fair.mu.Lock()
	defer rp.fair.mu.Unlock()
	for _, s := range ss {
		if rp.fair.shares[s] == nil {
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
// one ahead is held until the other catches up, whichever program the CPUs favour. (The idle
// bound is an hour here: a yes the loaded machine starves of CPU for a few milliseconds would
// otherwise stop counting, by design, and the other read on unheld; TestFairShareLetsGoOfADrainedBurst
// covers that.)
func TestFairShareKeepsStreamsLevel(t *testing.T) {
	t.Parallel()
	const slack = 64 << 10
	o, rp, l := logTurns(testOptions(), slack, time.Minute, time.Hour)
	turnMax := int64(maxBatchesPerTurn * o.withDefaults().batchSize())
	ss := spawnYes(t, o, 2)
	testutil.WaitFor(t, 30*time.Second, "both streams to count as streaming", func() bool { return rp.heavy(ss...) })
	a0, b0 := l.bytes(ss[0]), l.bytes(ss[1])
	const span = 16 << 20
	testutil.WaitFor(t, 60*time.Second, "16 MiB read from the two", func() bool {
		return l.bytes(ss[0])-a0+l.bytes(ss[1])-b0 >= span
	})
	// After a turn that was not held, a stream is at most the slack ahead of the other, and its
	// next turn adds at most turnMax; the two counts started up to that far apart, either way,
	// and one more of each is margin. A fair share that did not work would leave them megabytes
	// apart over these 16 MiB.
	a, b := l.bytes(ss[0])-a0, l.bytes(ss[1])-b0
	if d := max(a-b, b-a); d > 3*(slack+turnMax) {
		t.Errorf("bytes read since both streamed: %d and %d, %d apart; want at most three times the slack %d plus a turn %d",
			a, b, d, slack, turnMax)
	}
}

// A stream that stops (its program stopped, or printing slowly) holds the others back for at
// most the fair share's wait: it then stops counting, and the other is read on. (The idle bound
// is an hour here: the stopped master, drained, would be let go as idle first.)
func TestFairShareLetsGoOfAStoppedStream(t *testing.T) {
	t.Parallel()
	const slack = 64 << 10
	o, rp, l := logTurns(testOptions(), slack, 50*time.Millisecond, time.Hour)
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

// A stream next to a bursty one is not held once the bursty one's program has stopped
// producing: a drained master that stays unreadable stops counting after the fair share's idle
// bound, not its wait (an hour here, so a hold that waited for the idle master would never end),
// and the steady stream is read on. (Measured: a `yes` beside `head -c 400000` every 30 ms was
// held for the whole 20 ms wait of every cycle, and read half of what it read with the hold off.)
func TestFairShareLetsGoOfADrainedBurst(t *testing.T) {
	t.Parallel()
	o, rp, l := logTurns(testOptions(), 32<<10, time.Hour, 0)
	steady := spawnYes(t, o, 1)[0]
	// Each line typed into it is a burst of 4 MiB, then the program waits for the next line.
	// The "R" says the terminal is raw, so a newline typed after it is not echoed.
	const burst = 4 << 20
	bursty := spawnT(t, o, "/bin/sh", "-c",
		fmt.Sprintf("stty raw -echo; printf R; while read -r x; do head -c %d /dev/zero; done", burst))
	testutil.WaitFor(t, 30*time.Second, "the bursty session's terminal raw", func() bool { return l.bytes(bursty) >= 1 })
	testutil.WaitFor(t, 30*time.Second, "the steady stream to count as streaming", func() bool { return rp.heavy(steady) })
	// Burst until a burst counted as streaming (a turn of it read all its batches) while the
	// steady stream did: at its end, the bursty master is the slowest heavy one, drained.
	for i := 1; ; i++ {
		_, full0, _ := l.counts(bursty)
		if _, err := bursty.Write([]byte("\n")); err != nil {
			t.Fatalf("burst %d: %v", i, err)
		}
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("burst %d read to its end", i), func() bool {
			return l.bytes(bursty) >= 1+int64(i)*burst
		})
		if _, full, _ := l.counts(bursty); full > full0 {
			break
		}
		if i == 10 {
			t.Fatal("no turn of 10 bursts of 4 MiB read all its batches: the bursty master never counted as streaming")
		}
	}
	// Nothing more comes from the bursty one: the steady stream is held at most once more (it
	// may be, until the bursty master has been idle for the bound), then read on.
	read0, _, held0 := l.counts(steady)
	testutil.WaitFor(t, 30*time.Second, "the steady stream read 16 MiB after the burst", func() bool {
		return l.bytes(steady)-read0 >= 16<<20
	})
	if _, _, held := l.counts(steady); held-held0 > 1 {
		t.Errorf("the steady stream was held %d times after the burst ended; want at most once", held-held0)
	}
	if rp.heavy(bursty) {
		t.Error("the drained bursty master still counts as streaming")
	}
}

// A stream the fair share holds is read on as soon as it is typed into, behind a stream that
// never catches up (stopped, with the wait and the idle bound an hour); and a stream typed into
// again within the wait is not let go again, so typing cannot take it out of the fair share.
func TestFairShareLetsGoOfAStreamTypedInto(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.EchoHold = -1 // the let-go does not depend on echo first
	o, rp, l := logTurns(opts, 64<<10, time.Hour, time.Hour)
	runner, stopped := stopOneOfTwoStreams(t, o, rp)
	waitHeldForGood(t, rp, runner, stopped)
	before := l.bytes(runner)
	if _, err := runner.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the held stream read on after a keystroke", func() bool {
		return l.bytes(runner) > before
	})
	// It reads a turn and its slack past the stopped one, and is held again.
	waitHeldForGood(t, rp, runner, stopped)
	letGo := func(at time.Time) bool {
		runner.mu.Lock()
		defer runner.mu.Unlock()
		ok := rp.fair.letGo(runner, at)
		if ok {
			runner.wakeReaderLocked() // as a keystroke does
		}
		return ok
	}
	if letGo(time.Now()) {
		t.Error("let go twice within the fair share's wait")
	}
	if !letGo(time.Now().Add(time.Hour)) {
		t.Error("not let go again once the wait has passed")
	}
}

// waitHeldForGood waits until the fair share holds runner behind stopped, whose program is
// stopped and whose master is drained and out of a turn: nothing can let runner go but a test.
func waitHeldForGood(t *testing.T, rp *readers, runner, stopped *Session) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, "the running stream held behind the drained stopped one", func() bool {
		rp.fair.mu.Lock()
		_, held := rp.fair.held[runner]
		rp.fair.mu.Unlock()
		return held && !readable(stopped.masterFD) && !stopped.inTurn.Load()
	})
}

// A held stream that is killed is drained and ended at once, not held to the end of the wait:
// past the kill point a master never counts as streaming.
func TestFairShareNeverHoldsAClosingSession(t *testing.T) {
	t.Parallel()
	o, rp, l := logTurns(testOptions(), 64<<10, time.Hour, time.Hour)
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
	o, rp, l := logTurns(testOptions(), 64<<10, time.Hour, time.Hour)
	runner, _ := stopOneOfTwoStreams(t, o, rp)
	waitFairHeld(t, l, runner)
	if err := unix.Kill(runner.pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosed(t, runner.Exited(), 10*time.Second, "the held stream's exit")
	// The slave closed with the program: the master is read to EIO, which ends the reading.
	testutil.WaitClosed(t, runner.ReaderDone(), 10*time.Second, "the held stream read to its end")
	rp.notInFairShare(t, runner)
}

// A stream that ends by itself, read to EIO while it counts as streaming, leaves nothing in the
// fair share once its reading ended.
func TestFairShareForgetsAStreamThatEnded(t *testing.T) {
	t.Parallel()
	o, rp, _ := logTurns(testOptions(), 64<<10, time.Hour, time.Hour)
	spawnYes(t, o, 1)
	s := spawnT(t, o, "/bin/sh", "-c", "stty raw -echo; exec head -c 32M /dev/zero")
	testutil.WaitFor(t, 30*time.Second, "the finite stream to count as streaming", func() bool { return rp.heavy(s) })
	testutil.WaitClosed(t, s.ReaderDone(), 60*time.Second, "the finite stream read to its end")
	rp.notInFairShare(t, s)
}

// notInFairShare fails t if s, whose reading ended, still has a share or a hold in rp's fair
// share: the idle poll would look at its closed fd, whose number may name another file by then.
func (rp *readers) notInFairShare(t *testing.T, s *Session) {
	t.Helper()
	rp.fair.mu.Lock()
	share := rp.fair.shares[s] != nil
	_, held := rp.fair.held[s]
	rp.fair.mu.Unlock()
	if share || held {
		t.Errorf("a stream whose reading ended is still in the fair share: share %v, held %v", share, held)
	}
}

// stopOneOfTwoStreams spawns two `yes` sessions, waits until both count as streaming, then
// stops the second with SIGSTOP (continued when the test ends).
func stopOneOfTwoStreams(t *testing.T, o Options, rp *readers) (runner, stopped *Session) {
	t.Helper()
	ss := spawnYes(t, o, 2)
	runner, stopped = ss[0], ss[1]
	testutil.WaitFor(t, 30*time.Second, "both streams to count as streaming", func() bool { return rp.heavy(ss...) })
	if err := unix.Kill(stopped.pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Kill(stopped.pid, unix.SIGCONT) })
	testutil.WaitFor(t, 10*time.Second, "the stopped stream's program stopped", func() bool {
		state, _, ok := leakcheck.Stat(stopped.pid)
		return ok && state == 'T'
	})
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

// The fair share takes a heavy master for idle only if its master is empty and no turn of it is
// under way: one whose program has printed and waits for a worker (here: parked by
// backpressure, its PTY full), or that a worker is reading, is still waited for, however long
// ago its last turn ended.
func TestFairShareIdleIsEmptyAndOutOfTurn(t *testing.T) {
	t.Parallel()
	o, rp, _ := ownPollers(testOptions())
	o.ScrollbackBytes = 64 << 10 // a viewer that never reads pauses the stream soon
	r := NewRegistry(o, nil)
	quiet, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", "stty raw -echo; printf R; exec sleep 1000")
	reading, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", "stty raw -echo; printf R; exec sleep 1000")
	full, v := openT(t, r, "alice", func() {}, "/bin/sh", "-c", "stty raw -echo; exec yes")
	defer v.Close() // never read
	testutil.WaitFor(t, 10*time.Second, "the quiet sessions' output read", func() bool {
		return quiet.Info().End >= 1 && reading.Info().End >= 1
	})
	testutil.WaitFor(t, 10*time.Second, "the stream paused with its PTY full", func() bool {
		return isPaused(full) && readable(full.masterFD)
	})
	if readable(quiet.masterFD) || readable(reading.masterFD) {
		t.Fatal("a quiet session's master is readable")
	}
	// None of the three is read now (two print nothing more, one is parked): their accounts
	// are not touched by a worker while this looks at them.
	reading.inTurn.Store(true) // as a worker does from its claim to the turn's count
	defer reading.inTurn.Store(false)
	f := rp.fair
	f.mu.Lock()
	long := time.Now().Add(-time.Hour)
	for _, s := range []*Session{quiet, reading, full} {
		f.shares[s] = &share{last: long}
	}
	dropped := f.dropIdleLocked(time.Now(), 1)
	_, quietKept := f.shares[quiet]
	_, readingKept := f.shares[reading]
	_, fullKept := f.shares[full]
	delete(f.shares, reading)
	delete(f.shares, full)
	f.mu.Unlock()
	if !dropped || quietKept {
		t.Error("the quiet master, empty and out of a turn, still counts as streaming")
	}
	if !readingKept {
		t.Error("a master in a turn was taken for idle")
	}
	if !fullKept {
		t.Error("a master with output to read was taken for idle")
	}
}

// A worker's turn marks its master in a turn from the claim to the fair share's count, so the
// fair share cannot take a master that a worker drained and still ingests for idle. The turn is
// stopped before its ingest: the master is marked, and dropIdleLocked keeps it although its PTY
// is empty and its last turn an hour old; once the turn is counted the mark is gone.
func TestFairShareTurnIsMarked(t *testing.T) {
	t.Parallel()
	o, rp, _ := ownPollers(testOptions())
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	o.testHookBeforeIngest = func([]byte) {
		once.Do(func() {
			close(entered)
			<-release
		})
	}
	s := spawnT(t, o, "/bin/sh", "-c", "printf X; exec sleep 1000")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("no turn read the session's output within 10s")
	}
	inTurn := s.inTurn.Load()
	f := rp.fair
	f.mu.Lock()
	f.shares[s] = &share{last: time.Now().Add(-time.Hour)}
	dropped := f.dropIdleLocked(time.Now(), 1<<62)
	delete(f.shares, s)
	f.mu.Unlock()
	close(release)
	if !inTurn {
		t.Error("a worker's turn did not mark its master")
	}
	if dropped {
		t.Error("a master in a worker's turn was taken for idle")
	}
	testutil.WaitFor(t, 10*time.Second, "the turn counted", func() bool { return !s.inTurn.Load() })
}
