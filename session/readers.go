package session

import (
	"errors"
	"fmt"

	"github.com/muxterm/muxterm/internal/poller"
)

// readers reads every session's PTY master with a few goroutines instead of one per session:
// each master is registered with a poller.Poller, whose GOMAXPROCS workers wait on one
// epoll instance; the one that wakes takes one ready master and reads it (Session.readReady),
// so masters that are ready at once are read in parallel and a master is never read by two
// workers at a time (one-shot: it is disarmed until readReady re-arms it). The workers and the
// epoll fd exist only while some master is registered. The fair share (fair.go) decides which
// streaming masters are not re-armed at the end of a turn.
//
// defaultReaders is the process-wide instance, every Registry's default (Options.readers): one
// epoll instance and one set of workers per process. A test may give its Options readers of
// their own, to set the test hooks or to count their workers, without touching other tests'
// sessions.
type readers struct {
	poller *poller.Poller // immutable after newReaders
	fair   *fairShare     // immutable after newReaders

	// testHookEchoHold, when set, is called with a session whose master is held for another's
	// echo (true, under its echoGroup.mu) and once it is released (false, under the session's
	// mu). Set before the first master is added; nil in production.
	testHookEchoHold func(s *Session, held bool)
}

var defaultReaders = newReaders(poller.Options{})

// newReaders returns readers on a poller of their own, made with po (its buffer size aside),
// with the fair share's defaults.
func newReaders(po poller.Options) *readers {
	po.BufBytes = readChunk
	return &readers{poller: poller.New(po), fair: newFairShare()}
}

// add registers s's master, armed. It fails only if the epoll instance cannot be made or will
// not take the master. s.mu is held (so a worker that reads the master finds s.reg set).
func (r *readers) add(s *Session) error {
	reg, err := r.poller.Add(s.masterFD, s.readReady, func(err error) {
		// The poller failed: s's master is no longer registered. Its share goes first, as
		// with remove, then its reading ends unless a worker reads it now.
		r.fair.remove(s)
		s.failReading(fmt.Errorf("wait on the readers' epoll instance: %w", err))
	})
	if err != nil {
		return err
	}
	s.reg = reg
	return nil
}

// rearm lets s's master be reported again once it is readable (at once if it is now). A master
// re-armed while the fair share held it (a kill, the program's exit, an echo's release) is no
// longer held: the hold timer must not count it as a master kept waiting.
func (r *readers) rearm(s *Session) error {
	r.fair.unhold(s)
	return r.rearmReg(s)
}

// rearmReg re-arms s's registration; its error names s.
func (r *readers) rearmReg(s *Session) error {
	err := r.poller.Rearm(s.reg)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, poller.ErrNotRegistered):
		return errNotRegistered(s)
	default:
		return fmt.Errorf("re-arm master of %s: %w", s.id, err)
	}
}

func errNotRegistered(s *Session) error {
	return fmt.Errorf("re-arm master of %s: not registered", s.id)
}

// remove unregisters s's master, if it is registered; it must be called before the master is
// closed, so the fd number is never in the instance while it may name another file. The fair
// share lets go of s first: it polls a master it counts (fairShare.dropIdleLocked), which must
// still be open.
func (r *readers) remove(s *Session) {
	if s.reg == nil {
		return // never registered: a pipe session's, or one whose spawn failed
	}
	r.fair.remove(s)
	r.poller.Remove(s.reg)
}

// settle ends s's turn with the readers: the fair share counts it (fairShare.settle) and s is
// re-armed unless it is paused or held. It returns the held masters this turn lets go, for the
// caller to re-arm (releaseHeld) once it has let go of s.mu. s.mu is held.
func (r *readers) settle(s *Session, read int, full, paused, closing, echoHeld bool) (
	hold bool, release []*Session, err error) {
	hold, release, ok := r.fair.settle(s, read, full, paused, closing, echoHeld)
	if !ok {
		return false, nil, errNotRegistered(s)
	}
	if hold || paused || echoHeld {
		return hold, release, nil
	}
	return false, release, r.rearmReg(s)
}
