package child

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Waiter waits for the children added to it with one goroutine instead of one per child: each
// unreaped child's pidfd is registered, level-triggered, with one epoll instance, and the epoll
// fd itself is registered with the runtime poller, so the goroutine parks without holding an
// OS thread. The goroutine and the epoll fd exist only while some child is unreaped. The zero
// Waiter is ready; its methods may be called from any goroutine.
type Waiter struct {
	// mu guards ep and waiting. Under it only epoll_ctl, close, wait4(WNOHANG) and map updates
	// run, never a blocking wait or a session lock; orphanReaper.mu is taken under it.
	mu      sync.Mutex
	ep      *os.File             // the epoll instance; nil while nothing is waited for
	waiting map[int32]*waitEntry // by pidfd

	// TestHookNotWaitable, when set, makes the waiter treat a child it reports true for as
	// exited but not yet waitable (as a traced child is), without calling wait4. Set before the
	// first child is added; nil in production.
	TestHookNotWaitable func(pid int) bool
}

type waitEntry struct {
	pid   int
	pidfd int32
	// reaped runs once, on its own goroutine, with the child's status or the wait's error.
	reaped func(unix.WaitStatus, error)
}

// Watch waits for pid through pidfd, which it owns from now on, and calls reaped once the child
// is reaped, on a goroutine of its own. When the epoll instance cannot be made or will not take
// the pidfd, it closes the pidfd, hands the child to a blocking wait (correct, if costlier: a
// goroutine holding a thread) and returns why, for the caller to log.
func (w *Waiter) Watch(pid, pidfd int, reaped func(unix.WaitStatus, error)) error {
	err := w.add(pid, pidfd, reaped)
	if err != nil {
		unix.Close(pidfd)
		blockingWait(&waitEntry{pid: pid, reaped: reaped})
	}
	return err
}

// add waits for pid through pidfd, which it owns from now on (it closes it after the reap), and
// calls reaped once the child is reaped. It fails only if the epoll instance cannot be made or
// will not take the pidfd; pidfd is then still the caller's.
func (w *Waiter) add(pid, pidfd int, reaped func(unix.WaitStatus, error)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ep == nil {
		ep, err := newEpoll("children-epoll")
		if err != nil {
			return err
		}
		w.ep = ep
		w.waiting = make(map[int32]*waitEntry)
		go w.loop(w.ep)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(pidfd)}
	if err := w.ctl(unix.EPOLL_CTL_ADD, pidfd, &ev); err != nil {
		if len(w.waiting) == 0 {
			w.closeLocked() // its loop sees the close and ends
		}
		return fmt.Errorf("epoll_ctl add pidfd of %d: %w", pid, err)
	}
	w.waiting[int32(pidfd)] = &waitEntry{pid: pid, pidfd: int32(pidfd), reaped: reaped}
	return nil
}

// ctl runs epoll_ctl on the current instance. w.mu is held.
func (w *Waiter) ctl(op, fd int, ev *unix.EpollEvent) error {
	rc, err := w.ep.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := rc.Control(func(epfd uintptr) { cerr = unix.EpollCtl(int(epfd), op, fd, ev) }); err != nil {
		return err
	}
	return cerr
}

// closeLocked closes the epoll instance; its loop sees the close and returns. w.mu is held.
func (w *Waiter) closeLocked() {
	w.ep.Close()
	w.ep, w.waiting = nil, nil
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

// Detach takes the pidfds of the children in want out of the waiter, still open, by pid: from
// here on this image does not reap them. When none is left it closes the instance.
func (w *Waiter) Detach(want map[int]bool) map[int]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[int]int, len(want))
	if w.ep == nil {
		return out
	}
	for fd, e := range w.waiting {
		if !want[e.pid] {
			continue
		}
		out[e.pid] = int(fd)
		_ = w.ctl(unix.EPOLL_CTL_DEL, int(fd), nil)
		delete(w.waiting, fd)
	}
	if len(w.waiting) == 0 {
		w.closeLocked()
	}
	return out
}

// Idle reports whether w has stopped: no epoll fd, no goroutine.
func (w *Waiter) Idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ep == nil
}

// blockingWait hands e over to a goroutine of its own that blocks in wait4, holding a thread:
// the fallback for a child the shared waiter cannot wait for. e's pidfd must be closed already.
func blockingWait(e *waitEntry) {
	go func() {
		var ws unix.WaitStatus
		var err error
		for {
			_, err = unix.Wait4(e.pid, &ws, 0, nil)
			if err != unix.EINTR {
				break
			}
		}
		orphans.reaped(e.pid)
		e.reaped(ws, err)
	}()
}

// loop waits for the pidfds in ep to become readable (their child exited), reaps those
// children, and returns once none is left.
func (w *Waiter) loop(ep *os.File) {
	rc, err := ep.SyscallConn()
	if err != nil {
		panic(fmt.Sprintf("child: waiter: %v", err)) // an *os.File always has one
	}
	events := make([]unix.EpollEvent, 32)
	var ready []int32
	for {
		ready = ready[:0]
		err := rc.Read(func(epfd uintptr) bool {
			n, err := unix.EpollWait(int(epfd), events, 0)
			if err != nil || n <= 0 {
				return false // nothing yet (EINTR included): park until the poller says so
			}
			for _, ev := range events[:n] {
				ready = append(ready, ev.Fd)
			}
			return true
		})
		w.mu.Lock()
		if w.ep != ep {
			w.mu.Unlock() // closed under us with an empty table; a newer loop owns w now
			return
		}
		if err != nil {
			// The poller failed us: nobody may be left waiting on a dead instance.
			for fd, e := range w.waiting {
				unix.Close(int(fd))
				blockingWait(e)
			}
			w.closeLocked()
			w.mu.Unlock()
			return
		}
		for _, fd := range ready {
			e := w.waiting[fd]
			if e == nil {
				continue // reaped in this round already
			}
			var ws unix.WaitStatus
			var wpid int
			var werr error
			if h := w.TestHookNotWaitable; h != nil && h(e.pid) {
				wpid = 0
			} else {
				wpid, werr = unix.Wait4(e.pid, &ws, unix.WNOHANG, nil)
			}
			if werr == unix.EINTR {
				continue // still readable: the next round tries again
			}
			delete(w.waiting, fd)
			_ = w.ctl(unix.EPOLL_CTL_DEL, int(fd), nil)
			unix.Close(int(fd))
			if werr == nil && wpid != e.pid {
				// Exited but not waitable yet (a tracer such as strace or gdb collects it
				// first): its pidfd would stay readable and spin this loop, so it gets a
				// blocking wait of its own.
				blockingWait(e)
				continue
			}
			orphans.reaped(e.pid)
			// The hand-off takes session locks; the waiter never waits for them.
			go e.reaped(ws, werr)
		}
		if len(w.waiting) == 0 {
			w.closeLocked()
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
}
