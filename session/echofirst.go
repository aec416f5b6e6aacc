package session

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Echo first. While a session waits for the echo of a keystroke, the readers hold
// the other sessions of its echo group, the sessions of the same owner (the principal that
// opened them): a worker that takes one's master parks it (readParked) instead of reading it,
// and a worker in a turn stops at the next batch. Other owners' sessions are never held: one
// principal who types cannot slow another's streams. The hold ends as soon as a viewer reads
// the echo (Viewer.Read: the echo's frame is on its way to the socket), or the reader ingests it
// if no viewer is attached, or the session's reading ends, or Options.EchoHold after the
// keystroke. An echo next to a stream of its owner's then waits neither behind the stream's
// turns at the readers nor, on a machine with few CPUs, behind the stream's producer, the
// gateway's work for it and its client, which all compete with the echo's program for a CPU.
// While the hold lasts, Held tells a socket's writer to send the held sessions' output in small
// frames. A stream loses at most EchoHold per keystroke of its owner's; with nobody typing
// nothing is held and the cost is one atomic load per read batch.

// echoGroup is the echo-first state of one owner's sessions: a keystroke in one of them holds
// only the others. A Registry keeps one per owner (echoGroupLocked) for as long as it lives:
// a group is a few words, and there are as many as principals that ever opened a session (the
// principals are the gateway's configured tokens), so dropping one with its last session would
// save little and would let a session that outlives its group split the owner's sessions in
// two. A session joins its owner's group when it is spawned or adopted and never changes it; a
// session spawned outside a registry (tests) is given a group, or has one of its own.
type echoGroup struct {
	// last is the session that took the group's latest keystroke: its echo ends the hold (an
	// earlier keystroke whose echo never comes, a key the program does not echo, cannot make
	// later ones wait for EchoHold). holdUntil (since epoch) is when the hold ends otherwise;
	// the latest keystroke's echo sets it to now.
	last      atomic.Pointer[Session]
	holdUntil atomic.Int64

	// mu guards held, the group's masters parked while one of its sessions awaits an echo,
	// and holdTimer, which releases them when the hold ends without an echo. Taken under a
	// held session's Session.mu (hold); release and unhold take a Session.mu after releasing it.
	mu        sync.Mutex
	held      []*Session
	holdTimer *time.Timer
}

// maxKeystroke is the longest input counted as a keystroke (a paste is longer).
const maxKeystroke = 64

// DefaultEchoHold is Options.EchoHold's default.
const DefaultEchoHold = 2 * time.Millisecond

// epoch is the origin of echoGroup.holdUntil's monotonic times.
var epoch = time.Now()

func sinceEpoch() int64 { return int64(time.Since(epoch)) }

// keystroke records that s takes a keystroke: the other masters of s's group are held until its
// echo is read or s.opts.EchoHold has passed. It is called before the keystroke is written to
// the PTY.
func (s *Session) keystroke() {
	// A master the fair share holds behind slower streams is read on at once, echo first or
	// not: its echo must not wait for them (letGo bounds how often).
	s.mu.Lock()
	if s.opts.readers.fair.letGo(s, time.Now()) && (!s.paused || s.dropOutput) {
		s.wakeReaderLocked()
	}
	s.mu.Unlock()
	hold := s.opts.EchoHold
	if hold < 0 {
		return
	}
	g := s.echo
	until := sinceEpoch() + int64(hold)
	for cur := g.holdUntil.Load(); cur < until && !g.holdUntil.CompareAndSwap(cur, until); {
		cur = g.holdUntil.Load()
	}
	s.awaitingEcho.Store(true)
	g.last.Store(s)
	if s.readEnded.Load() {
		// s's reading ended (the program closed the PTY; Write still takes input until the
		// session is closed): no echo will come, and endReading's echoed may have run before
		// the mark above. Either this or endReading's call sees the other's store, and echoed
		// clears the mark once.
		s.echoed()
	}
	// A session typed into while it is held for another's echo is read on at once: its own
	// echo must not wait for the other's.
	if g.unhold(s) {
		s.mu.Lock()
		if !s.paused || s.dropOutput {
			s.wakeReaderLocked()
		}
		s.mu.Unlock()
	}
}

// echoed records that s's echo is on its way (or that its reading ended): if s took the
// group's latest keystroke, the hold ends and the group's held masters are re-armed.
func (s *Session) echoed() {
	if s.awaitingEcho.Load() && s.awaitingEcho.CompareAndSwap(true, false) {
		g := s.echo
		if g.last.Load() == s {
			g.holdUntil.Store(sinceEpoch())
			g.release()
		}
	}
}

// unhold takes s out of g's held masters and reports whether it was there.
func (g *echoGroup) unhold(s *Session) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.Index(g.held, s)
	if i >= 0 {
		g.held = slices.Delete(g.held, i, i+1)
	}
	return i >= 0
}

// holding reports whether s's master is to be held now: the group's hold has not ended (by the
// latest keystroke's echo or its EchoHold), s awaits no echo of its own, its program has not
// exited (its tail is read before its exit is reported), and s has read a batch since it was
// last released (so keystrokes that keep coming without an echo cannot stop another session's
// output for good: it reads at least one batch per EchoHold).
func (s *Session) holding() bool {
	g := s.echo
	return sinceEpoch() < g.holdUntil.Load() && !s.awaitingEcho.Load() && !s.released.Load() &&
		!isClosed(s.exited)
}

// hold adds s, whose master a worker has just parked (s.mu held), to its group's held masters,
// unless the hold has ended: it then reports false and the caller re-arms. A timer releases the
// held masters when the hold ends, if no echo does first.
func (s *Session) hold() bool {
	g := s.echo
	g.mu.Lock()
	defer g.mu.Unlock()
	// Released since holding said yes, or typed into since: keystroke marks s before it looks
	// in held (under g.mu), so either it finds s there and re-arms it, or this sees the mark.
	if sinceEpoch() >= g.holdUntil.Load() || s.awaitingEcho.Load() {
		return false
	}
	g.held = append(g.held, s)
	if g.holdTimer == nil {
		g.holdTimer = time.AfterFunc(time.Duration(max(g.holdUntil.Load()-sinceEpoch(), 0)), g.release)
	}
	if h := s.opts.readers.testHookEchoHold; h != nil {
		h(s, true)
	}
	return true
}

// release re-arms every held master of g that is still parked, unless backpressure holds it.
// It takes no lock of its caller's: it takes g.mu, then each held session's mu.
func (g *echoGroup) release() {
	g.mu.Lock()
	held := g.held
	g.held = nil
	if g.holdTimer != nil {
		g.holdTimer.Stop()
		g.holdTimer = nil
	}
	g.mu.Unlock()
	for _, s := range held {
		s.released.Store(true)
		s.mu.Lock()
		if !s.paused || s.dropOutput {
			s.wakeReaderLocked()
		}
		if h := s.opts.readers.testHookEchoHold; h != nil {
			h(s, false)
		}
		s.mu.Unlock()
	}
}

// holdReading parks s's master, which this worker has just taken (readBusy), while another
// session of its group awaits an echo. It reports false if the master is to be read after all: the hold
// ended meanwhile, or an upgrade in place takes the session over (the turn's end stops it).
func (s *Session) holdReading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handingOver || s.dropOutput || isClosed(s.exited) {
		return false // taken over, or past its kill point or its exit: read on, never held
	}
	// Held for an echo, it counts as light in the readers' fair share, so it is not taken as
	// the slowest stream that another owner's streams wait for (fair.go).
	s.opts.readers.fair.dropShare(s)
	s.readState = readParked
	if s.hold() {
		return true
	}
	s.readState = readBusy
	return false
}

// Held reports whether s's output is held for the echo of another session of its owner's now: a
// socket's writer then sends it in small frames, so that an echo queued behind it waits for
// little.
func (s *Session) Held() bool { return s.holding() }
