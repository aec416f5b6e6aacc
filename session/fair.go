package session

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The readers share the reading fairly among streaming masters.
//
// The epoll instance hands ready masters to the workers in turn, so masters that are ready
// together get equal turns, but not equal bytes: a PTY holds ~18 KiB before its writer blocks,
// so a session whose program did not get a CPU for a millisecond or two is found empty and
// misses turns while the others are read on, and the programs the readers keep reading get
// the CPUs that would let it catch up. Equal bytes per turn (deficit round robin) does not
// close that gap, and costs more CPU per GiB (one batch per turn: more turns); only not reading
// the masters that are ahead does (docs/benchmarks.md, "What each change measured"). So a
// heavy master (one whose turn read all maxBatchesPerTurn batches: its program writes as fast
// as it is read) that is more than fairSlack bytes ahead of the slowest heavy master is held: not re-armed, so its
// program blocks on a full PTY and leaves the CPU to the others, until the slowest is within
// fairSlack again. A heavy master stops counting (light) until a turn of it reads all its
// batches again when
//   - it is idle: no turn of it has ended for fairIdle, none is under way and its master is not
//     readable. Its program stopped producing (a burst ended, it waits for input), or has not
//     had a CPU for that long; a master that is readable is only waiting for a worker. Checked
//     when it would hold another and, while one is held, every fairIdle;
//   - it lets a held master wait fairWait without catching up: it is not held back by the CPU
//     but prints slowly;
//   - its viewer holds it back (backpressure), it is past its kill point, or it is held for its
//     owner's echo.
// A held master that is typed into is let go at once, level with the slowest, and its next
// turn is not held (letGo), at most once per fairWait while it counts: an echo that comes by
// that turn does not wait for the hold, and a client that types without pause still cannot
// take its stream out of the fair share.

const (
	// defaultFairSlack: how far ahead of the slowest heavy master a heavy master may read before
	// it is held. It is less than a full turn (maxBatchesPerTurn × readChunk, 128 KiB, unless
	// a small scrollback shrinks the batches), so a master that read a full turn is held until
	// the slowest has had its turn too: the streams go round in step. Over 8 `yes` streams
	// 256 KiB gives fairness ~0.97 and 32 KiB ~0.996, for ~5% more gateway CPU per GiB
	// (docs/benchmarks.md, "What each change measured").
	defaultFairSlack = 32 << 10
	// defaultFairWait: how long a hold may last before the masters behind are taken for slow.
	defaultFairWait = 20 * time.Millisecond
	// defaultFairIdle: how long a heavy master may go without a turn, unreadable, before it is
	// taken for idle. A `yes` refills its empty PTY within a millisecond once it has a CPU, so
	// this waits for one that misses the CPU for a few; a bursty program that stopped holds the
	// others this long after its burst, not the whole wait (without the idle bound a steady
	// `yes` beside `head -c 400000` every 30 ms is held for 20 ms of every 30).
	defaultFairIdle = 5 * time.Millisecond
)

// noHeavy stands for the slowest heavy master's count when there is none: every held master
// is let go.
const noHeavy = 1 << 62

// fairShare is the fair share among the streaming masters of one readers. Its methods may be
// called from any goroutine.
type fairShare struct {
	// mu guards shares, held and holdTimer: each heavy master's account, the masters held back,
	// and the timer that, while one is held, looks for idle masters every fairIdle and ends a
	// hold after fairWait. Under it only map updates, timer calls and the zero-timeout poll of
	// an idle-looking master (dropIdleLocked) run; it is taken under Session.mu (a turn's end,
	// a re-arm, a keystroke's letGo, dropShare), and no lock is taken under it.
	mu        sync.Mutex
	shares    map[*Session]*share
	held      map[*Session]struct{}
	holdTimer *time.Timer

	// fairSlack, fairWait and fairIdle are defaultFairSlack, defaultFairWait and
	// defaultFairIdle unless a test set them before the first master was added.
	fairSlack int64
	fairWait  time.Duration
	fairIdle  time.Duration

	// testHookHold, when set, runs (under mu) when a master is held by the fair share. Nil in
	// production.
	testHookHold func(s *Session)
}

// newFairShare returns a fair share with nothing counted and the default bounds.
func newFairShare() *fairShare {
	return &fairShare{shares: make(map[*Session]*share), held: make(map[*Session]struct{}),
		fairSlack: defaultFairSlack, fairWait: defaultFairWait, fairIdle: defaultFairIdle}
}

// share is a heavy master's account in the fair share (fairShare.shares holds heavy masters
// only: one that turns light loses its share). Guarded by fairShare.mu.
type share struct {
	// read counts bytes read since it became heavy, on the scale the heavy masters share: a
	// master that becomes heavy starts level with the slowest heavy one, not owed what it did
	// not ask for.
	read int64
	// heldSince is when the current hold began; zero while not held.
	heldSince time.Time
	// last is when its latest turn ended (was counted).
	last time.Time
	// letGo is when a keystroke last let it go (fairShare.letGo); zero if never. pass: the
	// turn after that is not held.
	letGo time.Time
	pass  bool
}

// slowestLocked is the least read among heavy masters, and whether there is one. f.mu is held.
// It looks at every heavy master, once or twice per turn of a counted master (a turn reads up
// to 128 KiB); a light master's turn does not call it.
func (f *fairShare) slowestLocked() (int64, bool) {
	var m int64
	found := false
	for _, sh := range f.shares {
		if !found || sh.read < m {
			m, found = sh.read, true
		}
	}
	return m, found
}

// dropIdleLocked turns light every heavy master that is not held, has read less than below and
// is idle at now: no turn of it has ended for fairIdle, none is under way (Session.inTurn) and
// its master is not readable. It reports whether it dropped one. It polls only the masters
// behind that have had no turn for fairIdle, the ones that may hold another back. f.mu is held.
func (f *fairShare) dropIdleLocked(now time.Time, below int64) bool {
	dropped := false
	for s, sh := range f.shares {
		if sh.read >= below || now.Sub(sh.last) < f.fairIdle || !sh.heldSince.IsZero() ||
			s.inTurn.Load() || readable(s.masterFD) {
			continue
		}
		delete(f.shares, s) // light now: it stopped producing, or has had no CPU for fairIdle
		dropped = true
	}
	return dropped
}

// readable reports whether a registered master has something to read (or a hang-up to report):
// a zero-timeout poll. A failed poll counts as readable: the master is not taken for idle. The
// fd is used bare: a master that has a share stays open (readers.remove takes the share away
// before the master is unregistered and closed).
func readable(fd int) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	return err != nil || n > 0
}

// settle counts s's turn (read bytes; full: it read all maxBatchesPerTurn batches; paused:
// backpressure holds it; closing: the kill point passed, so what is left is drained, never
// held; echoHeld: a keystroke's echo holds it, which its caller does, echofirst.go) and says
// whether s is held (not to be re-armed). It returns the held masters this turn lets go, for
// the caller to re-arm (releaseHeld) once it has let go of s.mu. It counts nothing and reports
// !registered if s's master is no longer registered. s.mu is held (readers.settle).
func (f *fairShare) settle(s *Session, read int, full, paused, closing, echoHeld bool) (
	hold bool, release []*Session, registered bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.inTurn.Store(false) // counted now, and re-armed after (or parked): no longer in a turn
	if !s.reg.Registered() {
		return false, nil, false
	}
	sh := f.shares[s]
	counted := sh != nil
	switch {
	case paused || closing || echoHeld:
		// Its viewer holds it back, it ends, or its owner's echo holds it: it must not hold
		// the others (nor another owner's streams wait for it). A later full turn levels it
		// anew.
		delete(f.shares, s)
		sh = nil
	case sh == nil && full:
		sh = &share{}
		if m, ok := f.slowestLocked(); ok {
			sh.read = m
		}
		f.shares[s] = sh
	}
	// A light master that was never counted costs no scan: the shares hold heavy masters only.
	if sh != nil || counted {
		now := time.Now()
		pass := false
		if sh != nil {
			sh.read += int64(read)
			sh.last = now
			pass, sh.pass = sh.pass, false
		}
		m, ok := f.slowestLocked()
		// Before holding s back, the masters behind it that went idle stop counting: s waits
		// for masters that are behind, not for programs that stopped.
		if ok && sh != nil && !echoHeld && !pass && sh.read > m+f.fairSlack &&
			f.dropIdleLocked(now, sh.read-f.fairSlack) {
			m, ok = f.slowestLocked()
		}
		if !ok {
			m = noHeavy // no heavy master left: nothing to wait for
		}
		release = f.releaseLocked(m)
		if sh != nil && !echoHeld && !pass && sh.read > m+f.fairSlack {
			sh.heldSince = now
			f.held[s] = struct{}{}
			if f.holdTimer == nil {
				f.armHoldTimerLocked(min(f.fairWait, f.fairIdle))
			}
			if h := f.testHookHold; h != nil {
				h(s)
			}
			return true, release, true
		}
	}
	return false, release, true
}

// dropShare makes s light: a master held for its owner's echo must not be the slowest stream
// the others wait for. s.mu is held (taken before f.mu).
func (f *fairShare) dropShare(s *Session) {
	f.mu.Lock()
	s.inTurn.Store(false) // light now: the flag matters only to a master with a share
	delete(f.shares, s)
	f.mu.Unlock()
}

// letGo takes s out of the held masters, levels its count with the slowest heavy master's and
// lets its next turn pass unheld, unless it was let go less than fairWait ago: a keystroke is
// about to be written to it, and its echo must not wait for the streams behind it to catch
// up. Level, not behind: no other master is held behind it. It reports whether s was let go,
// for the caller to re-arm it. s.mu is held.
func (f *fairShare) letGo(s *Session, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	sh := f.shares[s]
	if _, held := f.held[s]; !held || sh == nil || now.Sub(sh.letGo) < f.fairWait {
		return false
	}
	f.unholdLocked(s)
	sh.letGo = now
	sh.pass = true
	if m, ok := f.slowestLocked(); ok {
		sh.read = m
	}
	return true
}

// unhold takes s out of the held masters: it is being re-armed (readers.rearm).
func (f *fairShare) unhold(s *Session) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.held[s]; ok {
		f.unholdLocked(s)
	}
}

// unholdLocked takes held master s out of the held masters. f.mu is held.
func (f *fairShare) unholdLocked(s *Session) {
	delete(f.held, s)
	if sh := f.shares[s]; sh != nil {
		sh.heldSince = time.Time{}
	}
}

// remove drops s's share and hold: its master is being unregistered, or its poller failed.
func (f *fairShare) remove(s *Session) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.shares, s)
	delete(f.held, s)
}

// releaseLocked takes out of held every master no more than fairSlack ahead of m. f.mu is held.
func (f *fairShare) releaseLocked(m int64) []*Session {
	var out []*Session
	for s := range f.held {
		if sh := f.shares[s]; sh == nil || sh.read <= m+f.fairSlack {
			f.unholdLocked(s)
			out = append(out, s)
		}
	}
	return out
}

// armHoldTimerLocked arms the hold timer. f.mu is held.
func (f *fairShare) armHoldTimerLocked(d time.Duration) {
	f.holdTimer = time.AfterFunc(d, f.holdExpired)
}

// holdExpired runs while masters are held, every fairIdle and fairWait after each hold began:
// the masters behind a held one that went idle turn light, so does every heavy master more
// than fairSlack behind a master held for fairWait, and the masters no longer ahead are let go.
// A timer that outlives every held master (each was re-armed, or unregistered: remove) finds
// nothing held and does nothing.
func (f *fairShare) holdExpired() {
	f.mu.Lock()
	now := time.Now()
	var top, ahead int64
	expired := false
	for s := range f.held {
		sh := f.shares[s]
		if sh == nil {
			continue
		}
		ahead = max(ahead, sh.read)
		if now.Sub(sh.heldSince) >= f.fairWait {
			top, expired = max(top, sh.read), true
		}
	}
	f.dropIdleLocked(now, ahead-f.fairSlack)
	if expired {
		for s, sh := range f.shares {
			if sh.read+f.fairSlack < top {
				delete(f.shares, s) // light now: slow, not starved
			}
		}
	}
	m, ok := f.slowestLocked()
	if !ok {
		m = noHeavy
	}
	release := f.releaseLocked(m)
	var oldest time.Time
	for s := range f.held {
		if sh := f.shares[s]; sh != nil && (oldest.IsZero() || sh.heldSince.Before(oldest)) {
			oldest = sh.heldSince
		}
	}
	f.holdTimer = nil
	if !oldest.IsZero() {
		f.armHoldTimerLocked(min(max(f.fairWait-now.Sub(oldest), 0), f.fairIdle))
	}
	f.mu.Unlock()
	releaseHeld(release)
}

// releaseHeld re-arms masters the fair share let go, unless they are no longer parked (ended,
// handed over, re-armed by wakeReaderLocked) or backpressure holds them now.
func releaseHeld(ss []*Session) {
	for _, s := range ss {
		s.mu.Lock()
		if s.readState != readParked || s.paused && !s.dropOutput {
			s.mu.Unlock()
			continue
		}
		s.readState = readArmed
		err := s.opts.readers.rearm(s)
		if err != nil {
			s.readState = readBusy
		}
		s.mu.Unlock()
		if err != nil {
			s.endReading(err)
		}
	}
}
