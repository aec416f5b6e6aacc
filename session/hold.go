package session

import (
	"context"
	"slices"
	"time"
)

// exitSettle is how long after the exit a viewer waits for output still in flight before it
// reports the exit, when a descendant keeps the PTY open (otherwise the end of output comes
// first and is what it waits for).
const exitSettle = 50 * time.Millisecond

// minLagLocked is how far the closest viewer that counts for backpressure is behind the end.
// s.mu must be held. Passive (read-only) viewers do not count: they fall behind and get a gap
// instead of holding the program back. Each resume hold counts as a viewer at its offset while
// the ring still has that offset (one that another viewer let the ring overwrite holds nothing
// any more). It returns -1 when nothing counts.
func (s *Session) minLagLocked() int64 {
	lag := int64(-1)
	for _, h := range s.holds {
		if l := s.ring.end - h.from; h.from >= s.ring.start && (lag < 0 || l < lag) {
			lag = l
		}
	}
	for v := range s.viewers {
		if v.passive {
			continue
		}
		if l := s.ring.end - v.next; lag < 0 || l < lag {
			lag = l
		}
	}
	return lag
}

// maxHolds bounds a session's resume holds (one per read-write channel lost with its socket).
const maxHolds = 64

// hold is one resume hold: backpressure follows offset from until timer removes it. The lost
// viewer had been handed bytes up to upTo; its client resumes somewhere in [from, upTo].
type hold struct {
	from, upTo int64
	until      time.Time // when timer fires, for a handover (handover.go)
	timer      *time.Timer
}

// holdLocked keeps backpressure on offset from (the oldest offset a lost read-write viewer's
// client may resume from; it was handed bytes up to upTo) for ResumeHold. s.mu must be held.
func (s *Session) holdLocked(from, upTo int64) {
	d := s.opts.ResumeHold
	if d <= 0 || s.state != StateRunning {
		return
	}
	s.dropHoldsLocked(func(h *hold) bool { return h.from < s.ring.start }) // dead: overwritten
	if len(s.holds) >= maxHolds {
		// A client dropping sockets in a loop: keep the newest holds, each minLagLocked's
		// walk short.
		oldest := s.holds[0]
		s.dropHoldsLocked(func(h *hold) bool { return h == oldest })
	}
	h := &hold{from: from, upTo: upTo, until: s.now().Add(d)}
	s.holds = append(s.holds, h)
	h.timer = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.holds = slices.DeleteFunc(s.holds, func(x *hold) bool { return x == h })
		s.maybeResumeLocked()
	})
}

// takeOverHoldLocked lets a read-write viewer starting at offset take over the resume hold it
// most likely comes back for: the narrowest one whose range [from, upTo] (what the lost client
// acknowledged, what it had been sent) contains offset. Other holds stay: they may be another
// lost client's. s.mu must be held.
func (s *Session) takeOverHoldLocked(offset int64) {
	var best *hold
	for _, h := range s.holds {
		if h.from <= offset && offset <= h.upTo && (best == nil || h.upTo-h.from < best.upTo-best.from) {
			best = h
		}
	}
	if best != nil {
		s.dropHoldsLocked(func(h *hold) bool { return h == best })
	}
}

// dropHoldsLocked ends the resume holds that match (all of them with nil). s.mu must be held.
func (s *Session) dropHoldsLocked(match func(*hold) bool) {
	s.holds = slices.DeleteFunc(s.holds, func(h *hold) bool {
		if match != nil && !match(h) {
			return false
		}
		h.timer.Stop()
		return true
	})
}

// maybeResumeLocked lifts backpressure when nothing counts for it any more (no read-write
// viewer, no resume hold) or the closest one caught up below the low watermark. s.mu must be
// held.
func (s *Session) maybeResumeLocked() {
	if !s.paused {
		return
	}
	if s.dropOutput || s.minLagLocked() < int64(s.opts.LowWaterBytes) {
		s.paused = false
		s.opts.Instruments.PauseDuration.Add(context.Background(), s.now().Sub(s.pausedAt).Seconds())
		s.wakeReaderLocked()
		if isClosed(s.exited) {
			// The tail the program printed before exiting may still be in the PTY: give the
			// resumed reader exitSettle to take it in before viewers report the exit.
			s.armSettleLocked()
		}
	}
}

func (s *Session) wakeViewersLocked() {
	for v := range s.viewers {
		v.wake()
	}
}

// armSettleLocked (re)starts the settle: exitSettle from now, viewers may report the exit. A
// timer armed before is superseded. s.mu must be held.
func (s *Session) armSettleLocked() {
	s.exitSettled = false
	s.settleGen++
	gen := s.settleGen
	time.AfterFunc(exitSettle, func() { s.settleExit(gen) })
}

// settleExit runs exitSettle after armSettleLocked armed timer gen and, unless a later timer
// superseded it, lets viewers report the exit.
func (s *Session) settleExit(gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.settleGen {
		return
	}
	s.exitSettled = true
	s.wakeViewersLocked()
}
