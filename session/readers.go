package session

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// readers reads every session's PTY master with a few goroutines instead of one per session:
// each master is registered with one epoll instance, EPOLLIN | EPOLLONESHOT, and the epoll fd
// itself is registered with the runtime poller. GOMAXPROCS workers wait on it; the one that
// wakes takes one ready master and reads it (Session.readReady), so masters that are ready at
// once are read in parallel and a master is never read by two workers at a time (one-shot: it
// is disarmed until readReady re-arms it). The workers and the epoll fd exist only while some
// master is registered.
//
// This is the process-wide instance, every Registry's default (Options.readers): one epoll
// instance and one set of workers per process. A test may give its Options a readPoller of its
// own, to set the test hooks below or to count its workers, without touching other tests'
// sessions.
var readers readPoller

// readPoller reads the masters registered with it, sharing the reading fairly among the
// streaming ones (fair.go); see readers.
type readPoller struct {
	// mu guards ep, epfd, sessions, next and the fair share's shares, held and holdTimer.
	// Under it only epoll_ctl, close, map updates, timer calls and the fair share's
	// zero-timeout poll of an idle-looking master run; it is taken under Session.mu (a
	// re-arm), never the other way round.
	mu       sync.Mutex
	ep       *os.File            // the epoll instance; nil while no master is registered
	epfd     int                 // ep's fd, open as long as some master is registered
	sessions map[uint64]*Session // by registration token (the epoll event's data)
	next     uint64              // the last token handed out
	// shares, held and holdTimer are the fair share among streaming masters (fair.go): each
	// master's account once it streamed, the masters held back, and the timer that, while one
	// is held, looks for idle masters every fairIdle and ends a hold after fairWait.
	shares    map[*Session]*share
	held      map[*Session]struct{}
	holdTimer *time.Timer
	// fairSlack, fairWait and fairIdle are set when the first master is added:
	// defaultFairSlack, defaultFairWait and defaultFairIdle unless a test set them before.
	fairSlack int64
	fairWait  time.Duration
	fairIdle  time.Duration

	// testHookEpollCtl, when set, runs before each epoll_ctl on a master (under mu), and an
	// error it returns stands for the call's: a failing epoll_ctl cannot be produced for real
	// on demand. Set before the first master is added; nil in production.
	testHookEpollCtl func(s *Session, op int) error
	// testHookHold, when set, runs (under mu) when a master is held by the fair share. Nil in
	// production.
	testHookHold func(s *Session)
	// testHookEchoHold, when set, is called with a session whose master is held for another's
	// echo (true, under its echoGroup.mu) and once it is released (false, under the session's
	// mu). Set before the first master is added; nil in production.
	testHookEchoHold func(s *Session, held bool)
	// testWaitFails, when set, makes the next worker that wakes treat its wait as failed: a
	// poller that fails cannot be produced for real either. False in production.
	testWaitFails atomic.Bool
}

// add registers s's master, armed. It fails only if the epoll instance cannot be made or will
// not take the master.
func (r *readPoller) add(s *Session) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ep == nil {
		ep, err := newEpoll("readers-epoll")
		if err != nil {
			return err
		}
		r.ep = ep
		if err := rawFD(ep, &r.epfd); err != nil {
			r.closeLocked()
			return fmt.Errorf("readers' epoll fd: %w", err)
		}
		r.sessions = make(map[uint64]*Session)
		r.shares, r.held = make(map[*Session]*share), make(map[*Session]struct{})
		if r.fairSlack == 0 {
			r.fairSlack = defaultFairSlack
		}
		if r.fairWait == 0 {
			r.fairWait = defaultFairWait
		}
		if r.fairIdle == 0 {
			r.fairIdle = defaultFairIdle
		}
		for range runtime.GOMAXPROCS(0) {
			go r.loop(r.ep)
		}
	}
	r.next++
	s.readToken = r.next
	if err := r.ctlLocked(unix.EPOLL_CTL_ADD, s); err != nil {
		if len(r.sessions) == 0 {
			r.closeLocked()
		}
		return fmt.Errorf("epoll_ctl add master: %w", err)
	}
	r.sessions[s.readToken] = s
	return nil
}

// rearm lets s's master be reported again once it is readable (at once if it is now).
func (r *readPoller) rearm(s *Session) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[s.readToken] != s {
		return errNotRegistered(s)
	}
	// A master re-armed while the fair share held it (a kill, the program's exit, an echo's
	// release) is no longer held: holdExpired must not count it as a master kept waiting.
	if _, ok := r.held[s]; ok {
		delete(r.held, s)
		if sh := r.shares[s]; sh != nil {
			sh.heldSince = time.Time{}
		}
	}
	if err := r.ctlLocked(unix.EPOLL_CTL_MOD, s); err != nil {
		return fmt.Errorf("re-arm master of %s: epoll_ctl: %w", s.id, err)
	}
	return nil
}

func errNotRegistered(s *Session) error {
	return fmt.Errorf("re-arm master of %s: not registered", s.id)
}

// remove unregisters s's master; it must be called before the master is closed, so the fd
// number is never in the instance while it may name another file.
func (r *readPoller) remove(s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[s.readToken] != s {
		return
	}
	delete(r.sessions, s.readToken)
	delete(r.shares, s)
	delete(r.held, s)
	_ = r.ctlLocked(unix.EPOLL_CTL_DEL, s)
	if len(r.sessions) == 0 {
		r.closeLocked()
	}
}

// ctlLocked runs epoll_ctl for s's master on the current instance. r.mu is held. Both fds are
// used bare: the instance stays open while s is registered, and s's master is closed only by
// endReading, after remove.
func (r *readPoller) ctlLocked(op int, s *Session) error {
	if h := r.testHookEpollCtl; h != nil {
		if err := h(s, op); err != nil {
			return err
		}
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT,
		Fd: int32(uint32(s.readToken)), Pad: int32(uint32(s.readToken >> 32))}
	return unix.EpollCtl(r.epfd, op, s.masterFD, &ev)
}

// newEpoll makes an epoll instance whose fd is non-blocking and registered with the runtime
// poller, so a goroutine waiting for its events parks without holding an OS thread.
func newEpoll(name string) (*os.File, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("epoll fd nonblocking: %w", err)
	}
	return os.NewFile(uintptr(epfd), name), nil
}

// rawFD stores f's descriptor in fd without Fd(), which would make it blocking.
func rawFD(f *os.File, fd *int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(d uintptr) { *fd = int(d) })
}

// closeLocked closes the epoll instance; its workers see the close and return. r.mu is held.
func (r *readPoller) closeLocked() {
	r.ep.Close()
	r.ep, r.sessions, r.shares, r.held = nil, nil, nil, nil
	if r.holdTimer != nil {
		r.holdTimer.Stop()
		r.holdTimer = nil
	}
}

// loop is one worker: it takes one ready master at a time and reads it, until the instance is
// closed.
func (r *readPoller) loop(ep *os.File) {
	rc, err := ep.SyscallConn()
	if err != nil {
		panic(fmt.Sprintf("session: PTY reader: %v", err)) // an *os.File always has one
	}
	// Room for one event: what else is ready stays for the next worker.
	events := make([]unix.EpollEvent, 1)
	buf := make([]byte, readChunk)
	for {
		var tok uint64
		err := rc.Read(func(epfd uintptr) bool {
			n, err := unix.EpollWait(int(epfd), events, 0)
			if err != nil || n <= 0 {
				return false // nothing yet (EINTR included): park until the poller says so
			}
			tok = uint64(uint32(events[0].Fd)) | uint64(uint32(events[0].Pad))<<32
			return true
		})
		if err == nil && r.testWaitFails.CompareAndSwap(true, false) {
			err = errors.New("test hook: the wait failed")
		}
		r.mu.Lock()
		if r.ep != ep {
			r.mu.Unlock() // closed with no master left; a newer set of workers owns r now
			return
		}
		if err != nil {
			// The poller failed us (a registered epoll fd fails a read only once closed, which
			// is handled above): no master may stay registered with a dead instance.
			failed := make([]*Session, 0, len(r.sessions))
			for _, s := range r.sessions {
				failed = append(failed, s)
			}
			r.closeLocked()
			r.mu.Unlock()
			for _, s := range failed {
				s.failReading(fmt.Errorf("wait on the readers' epoll instance: %w", err))
			}
			return
		}
		s := r.sessions[tok]
		r.mu.Unlock()
		if s != nil { // nil: unregistered since it was reported
			s.readReady(buf)
		}
	}
}
