package session

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// children waits for every session's child with one goroutine instead of one per session: each
// unreaped child's pidfd is registered, level-triggered, with one epoll instance, and the epoll
// fd itself is registered with the runtime poller, so the goroutine parks without holding an
// OS thread. The goroutine and the epoll fd exist only while some child is unreaped.
var children waiter

// waiter is the process-wide child waiter; see children.
type waiter struct {
	mu      sync.Mutex
	ep      *os.File             // the epoll instance; nil while nothing is waited for
	waiting map[int32]*waitEntry // by pidfd
}

type waitEntry struct {
	pid   int
	pidfd int32
	// reaped runs once, on its own goroutine, with the child's status or the wait's error.
	reaped func(unix.WaitStatus, error)
}

// add waits for pid through pidfd, which it owns from now on (it closes it after the reap), and
// calls reaped once the child is reaped. It fails only if the epoll instance cannot be made or
// will not take the pidfd; pidfd is then still the caller's.
func (w *waiter) add(pid, pidfd int, reaped func(unix.WaitStatus, error)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ep == nil {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			return fmt.Errorf("epoll_create1: %w", err)
		}
		if err := unix.SetNonblock(epfd, true); err != nil {
			unix.Close(epfd)
			return fmt.Errorf("epoll fd nonblocking: %w", err)
		}
		w.ep = os.NewFile(uintptr(epfd), "children-epoll")
		w.waiting = make(map[int32]*waitEntry)
		go w.loop(w.ep)
	}
	rc, err := w.ep.SyscallConn()
	if err != nil {
		return fmt.Errorf("epoll fd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(pidfd)}
	var cerr error
	if err := rc.Control(func(epfd uintptr) {
		cerr = unix.EpollCtl(int(epfd), unix.EPOLL_CTL_ADD, pidfd, &ev)
	}); err != nil {
		return fmt.Errorf("epoll fd: %w", err)
	}
	if cerr != nil {
		if len(w.waiting) == 0 {
			w.closeLocked()
		}
		return fmt.Errorf("epoll_ctl add pidfd of %d: %w", pid, cerr)
	}
	w.waiting[int32(pidfd)] = &waitEntry{pid: pid, pidfd: int32(pidfd), reaped: reaped}
	return nil
}

// closeLocked closes the epoll instance; its loop sees the close and returns. w.mu is held.
func (w *waiter) closeLocked() {
	w.ep.Close()
	w.ep, w.waiting = nil, nil
}

// loop waits for the pidfds in ep to become readable (their child exited), reaps those
// children, and returns once none is left.
func (w *waiter) loop(ep *os.File) {
	rc, err := ep.SyscallConn()
	if err != nil {
		panic(fmt.Sprintf("session: child waiter: %v", err)) // an *os.File always has one
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
		if err != nil {
			return // closed: nothing is waited for any more
		}
		w.mu.Lock()
		if w.ep != ep {
			w.mu.Unlock() // closed under us by a failed add; a newer loop owns the table
			return
		}
		for _, fd := range ready {
			e := w.waiting[fd]
			if e == nil {
				continue // reaped in this round already
			}
			var ws unix.WaitStatus
			wpid, werr := unix.Wait4(e.pid, &ws, unix.WNOHANG, nil)
			if werr == unix.EINTR || (werr == nil && wpid != e.pid) {
				continue // not reaped yet: the pidfd stays registered and readable
			}
			delete(w.waiting, fd)
			_ = rc.Control(func(epfd uintptr) {
				_ = unix.EpollCtl(int(epfd), unix.EPOLL_CTL_DEL, int(fd), nil)
			})
			unix.Close(int(fd))
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
