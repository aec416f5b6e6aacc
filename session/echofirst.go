package session

import (
	"time"
)

// Echo first (issue 17). While a session waits for the echo of a keystroke, the readers hold
// every other session's master: a worker that takes one parks it (readParked) instead of
// reading it, and a worker in a turn stops at the next batch. The hold ends as soon as a viewer
// reads the echo (Viewer.Read: the echo's frame is on its way to the socket), or the reader
// ingests it if no viewer is attached, or the session's reading ends, or Options.EchoHold after
// the keystroke. An echo next to a stream then waits neither behind the stream's turns at the
// readers nor, on a machine with few CPUs, behind the stream's producer, the gateway's work for
// it and its client, which all compete with the echo's program for a CPU. While the hold lasts,
// Held tells a socket's writer to send the held sessions' output in small frames. A stream loses
// at most EchoHold per keystroke; with nobody typing nothing is held and the cost is one atomic
// load per read batch.

// maxKeystroke is the longest input counted as a keystroke (a paste is longer).
const maxKeystroke = 64

// DefaultEchoHold is Options.EchoHold's default.
const DefaultEchoHold = 2 * time.Millisecond

// epoch is the origin of readPoller.holdUntil's monotonic times.
var epoch = time.Now()

func sinceEpoch() int64 { return int64(time.Since(epoch)) }

// keystroke records that s takes a keystroke: the other masters are held until its echo is read
// or s.opts.EchoHold has passed. It is called before the keystroke is written to the PTY.
func (r *readPoller) keystroke(s *Session) {
	hold := s.opts.EchoHold
	if hold < 0 {
		return
	}
	until := sinceEpoch() + int64(hold)
	for cur := r.holdUntil.Load(); cur < until && !r.holdUntil.CompareAndSwap(cur, until); {
		cur = r.holdUntil.Load()
	}
	if s.awaitingEcho.CompareAndSwap(false, true) {
		r.awaiting.Add(1)
	}
}

// echoed records that s's echo is on its way (or that its reading ended): once no session
// awaits an echo any more the held masters are re-armed.
func (r *readPoller) echoed(s *Session) {
	if s.awaitingEcho.Load() && s.awaitingEcho.CompareAndSwap(true, false) {
		if r.awaiting.Add(-1) == 0 {
			r.releaseHeld()
		}
	}
}

// holding reports whether s's master is to be held now: another session awaits an echo, the
// last keystroke's hold has not ended, and s has read a batch since it was last released (so
// keystrokes that keep coming without an echo cannot stop another session's output for good:
// it reads at least one batch per EchoHold).
func (r *readPoller) holding(s *Session) bool {
	return r.awaiting.Load() > 0 && !s.awaitingEcho.Load() && !s.released.Load() &&
		sinceEpoch() < r.holdUntil.Load()
}

// hold adds s, whose master a worker has just parked (s.mu held), to the held masters, unless
// no session awaits an echo any more: it then reports false and the caller re-arms. A timer
// releases the held masters when the hold ends, if no echo does first.
func (r *readPoller) hold(s *Session) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.awaiting.Load() == 0 {
		return false // released since holding said yes
	}
	r.held = append(r.held, s)
	if r.holdTimer == nil {
		r.holdTimer = time.AfterFunc(time.Duration(max(r.holdUntil.Load()-sinceEpoch(), 0)), r.releaseHeld)
	}
	if h := r.testHookHold; h != nil {
		h(s, true)
	}
	return true
}

// releaseHeld re-arms every held master that is still parked, unless backpressure holds it.
// It takes no lock of its caller's: it takes readPoller.mu, then each held session's mu.
func (r *readPoller) releaseHeld() {
	r.mu.Lock()
	held := r.held
	r.held = nil
	if r.holdTimer != nil {
		r.holdTimer.Stop()
		r.holdTimer = nil
	}
	r.mu.Unlock()
	for _, s := range held {
		s.released.Store(true)
		s.mu.Lock()
		if !s.paused || s.dropOutput {
			s.wakeReaderLocked()
		}
		if h := r.testHookHold; h != nil {
			h(s, false)
		}
		s.mu.Unlock()
	}
}

// holdReading parks s's master, which this worker has just taken (readBusy), while another
// session awaits an echo. It reports false if the master is to be read after all: the hold
// ended meanwhile, or an upgrade in place takes the session over (the turn's end stops it).
func (s *Session) holdReading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handingOver {
		return false
	}
	s.readState = readParked
	if s.opts.readers.hold(s) {
		return true
	}
	s.readState = readBusy
	return false
}

// Held reports whether s's output is held for another session's echo now: a socket's writer
// then sends it in small frames, so that an echo queued behind it waits for little.
func (s *Session) Held() bool { return s.opts.readers.holding(s) }
