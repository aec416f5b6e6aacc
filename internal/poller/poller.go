package poller

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Poller serves the fds registered with it with a few goroutines instead of one per fd: each
// fd is registered with one epoll instance, EPOLLIN | EPOLLONESHOT, and the epoll fd itself is
// registered with the runtime poller. GOMAXPROCS workers wait on it; the one that wakes takes
// one ready fd and runs its ready callback, so fds that are ready at once are served in
// parallel; an fd is reported once per arming (one-shot: it is disarmed until its callback,
// or whoever it hands the fd to, calls Rearm). A worker runs a callback after it looked the
// registration up, with no lock held: a report taken before a Remove may run its callback
// after Remove returns, and one taken before a Rearm made outside the callback may run
// alongside the next report's. The owner claims its fd under its own lock before touching it
// (see the package doc). The workers and the epoll fd exist only while some fd is registered.
// Make one with New; its methods may be called from any goroutine.
type Poller struct {
	opts Options // immutable after New

	// mu guards ep, epfd, regs and next. Under it only epoll_ctl, close and map updates run:
	// no callback, and no other lock is taken under it.
	mu   sync.Mutex
	ep   *os.File                 // the epoll instance; nil while no fd is registered
	epfd int                      // ep's fd, open as long as some fd is registered
	regs map[uint64]*Registration // by token (the epoll event's data)
	next uint64                   // the last token handed out
}

// Options configure a Poller.
type Options struct {
	// BufBytes is the size of the buffer each worker owns and lends to every ready callback it
	// runs (0: DefaultBufBytes).
	BufBytes int

	// TestHookEpollCtl, when set, runs before each epoll_ctl on an fd (ADD, MOD and DEL; under
	// the poller's mu), and an error it returns stands for the call's: a failing epoll_ctl cannot be
	// produced for real on demand. Tests only; nil in production.
	TestHookEpollCtl func(fd, op int) error
	// TestWaitFails, when set and true, makes the next worker that wakes set it to false and
	// treat its wait as failed: a poller that fails cannot be produced for real either. Tests
	// only; nil in production.
	TestWaitFails *atomic.Bool
}

// Registration is one fd registered with a Poller, from Add until Remove or a failed wait. Its
// methods may be called from any goroutine; its callbacks run on the poller's workers.
type Registration struct {
	// immutable after Add:
	fd    int
	token uint64
	// ready runs on a worker each time the fd was reported readable, with the worker's
	// buffer, which is the callback's until it returns. A report is taken once per arming, but
	// its callback may run after Remove returned, or alongside the next report's when the fd
	// was re-armed from outside the callback (Poller).
	ready func(buf []byte)
	// failed runs once, with no lock of the poller's held, if the poller's wait fails while
	// the fd is registered: the fd is then no longer registered.
	failed func(err error)

	// live: registered now. Set by Add, cleared by Remove or a failed wait, under the
	// poller's mu; read without it by Registered.
	live atomic.Bool
}

// Registered reports whether reg is still registered: it was not removed, and its poller did
// not fail. A caller that must not act on a registration gone meanwhile serialises with the
// failed callback itself.
func (reg *Registration) Registered() bool { return reg.live.Load() }

// ErrNotRegistered is Rearm's error for a registration that was removed, or whose poller
// failed.
var ErrNotRegistered = errors.New("poller: not registered")

// DefaultBufBytes is a worker's buffer when Options.BufBytes is 0.
const DefaultBufBytes = 32 << 10

// New returns a Poller with no fd registered (and no worker).
func New(opts Options) *Poller {
	if opts.BufBytes <= 0 {
		opts.BufBytes = DefaultBufBytes
	}
	return &Poller{opts: opts}
}

// Add registers fd, armed: once it is readable, a worker calls ready. If the poller's wait
// fails first, failed is called instead, once. It fails only if the epoll instance cannot be
// made or will not take fd. fd must stay open until Remove returns, and its owner must not
// act on a callback that runs after it (Poller).
func (p *Poller) Add(fd int, ready func(buf []byte), failed func(err error)) (*Registration, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ep == nil {
		ep, epfd, err := newEpoll("poller-epoll")
		if err != nil {
			return nil, err
		}
		p.ep, p.epfd = ep, epfd
		p.regs = make(map[uint64]*Registration)
		for range runtime.GOMAXPROCS(0) {
			go p.loop(p.ep)
		}
	}
	p.next++
	reg := &Registration{fd: fd, token: p.next, ready: ready, failed: failed}
	if err := p.ctlLocked(unix.EPOLL_CTL_ADD, reg); err != nil {
		if len(p.regs) == 0 {
			p.closeLocked()
		}
		return nil, fmt.Errorf("epoll_ctl add: %w", err)
	}
	reg.live.Store(true)
	p.regs[reg.token] = reg
	return reg, nil
}

// Rearm lets reg's fd be reported again once it is readable (at once if it is now). It fails
// with ErrNotRegistered once reg is no longer registered, or with epoll_ctl's error.
func (p *Poller) Rearm(reg *Registration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.regs[reg.token] != reg {
		return ErrNotRegistered
	}
	if err := p.ctlLocked(unix.EPOLL_CTL_MOD, reg); err != nil {
		return fmt.Errorf("epoll_ctl mod: %w", err)
	}
	return nil
}

// Remove unregisters reg's fd, unless it is no longer registered; it must be called before the
// fd is closed, so the fd number is never in the instance while it may name another file. A
// report a worker took before may still run its callback after Remove returns (Poller). The
// last removal closes the instance, and its workers return. A ready callback may call it.
func (p *Poller) Remove(reg *Registration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.regs[reg.token] != reg {
		return
	}
	delete(p.regs, reg.token)
	reg.live.Store(false)
	_ = p.ctlLocked(unix.EPOLL_CTL_DEL, reg)
	if len(p.regs) == 0 {
		p.closeLocked()
	}
}

// Running reports whether p has an epoll instance, and so its workers.
func (p *Poller) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ep != nil
}

// ctlLocked runs epoll_ctl for reg's fd on the current instance. p.mu is held. Both fds are
// used bare: the instance stays open while reg is registered, and reg's fd is closed only
// after Remove.
func (p *Poller) ctlLocked(op int, reg *Registration) error {
	if h := p.opts.TestHookEpollCtl; h != nil {
		if err := h(reg.fd, op); err != nil {
			return err
		}
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT,
		Fd: int32(uint32(reg.token)), Pad: int32(uint32(reg.token >> 32))}
	return unix.EpollCtl(p.epfd, op, reg.fd, &ev)
}

// newEpoll makes an epoll instance whose fd is non-blocking and registered with the runtime
// poller, so a goroutine waiting for its events parks without holding an OS thread. It returns
// the fd too, taken before os.NewFile wraps it (Fd would make it blocking).
func newEpoll(name string) (*os.File, int, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, 0, fmt.Errorf("epoll_create1: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, 0, fmt.Errorf("epoll fd nonblocking: %w", err)
	}
	return os.NewFile(uintptr(epfd), name), epfd, nil
}

// closeLocked closes the epoll instance; its workers see the close and return. Every
// registration left is no longer registered. p.mu is held.
func (p *Poller) closeLocked() {
	p.ep.Close()
	for _, reg := range p.regs {
		reg.live.Store(false)
	}
	p.ep, p.regs = nil, nil
}

// loop is one worker: it takes one ready fd at a time and runs its ready callback, until the
// instance is closed.
func (p *Poller) loop(ep *os.File) {
	rc, err := ep.SyscallConn()
	if err != nil {
		panic(fmt.Sprintf("poller: worker: %v", err)) // an *os.File always has one
	}
	// Room for one event: what else is ready stays for the next worker.
	events := make([]unix.EpollEvent, 1)
	buf := make([]byte, p.opts.BufBytes)
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
		if f := p.opts.TestWaitFails; err == nil && f != nil && f.CompareAndSwap(true, false) {
			err = errors.New("test hook: the wait failed")
		}
		p.mu.Lock()
		if p.ep != ep {
			p.mu.Unlock() // closed with no fd left; a newer set of workers owns p now
			return
		}
		if err != nil {
			// The runtime poller failed us (a registered epoll fd fails a read only once
			// closed, which is handled above): no fd may stay registered with a dead instance.
			failed := make([]*Registration, 0, len(p.regs))
			for _, reg := range p.regs {
				failed = append(failed, reg)
			}
			p.closeLocked()
			p.mu.Unlock()
			for _, reg := range failed {
				reg.failed(err)
			}
			return
		}
		reg := p.regs[tok]
		p.mu.Unlock()
		if reg != nil { // nil: unregistered since it was reported
			reg.ready(buf)
		}
	}
}
