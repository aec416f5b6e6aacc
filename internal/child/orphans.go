package child

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// orphans is the process-wide orphan reaper: once AdoptOrphans made the gateway a child
// subreaper, descendants of sessions whose parent died (a double fork, a job of a shell that
// was killed) are re-parented to the gateway, and someone must reap them. The reaper must never
// take the exit status of a child that other code waits for (a session's child, which the
// waiter reaps through its pidfd, or a command started with StartChild): every such child is
// registered in own before anything can see it exit, and the reaper only reaps zombies that
// are not registered.
var orphans = orphanReaper{own: make(map[int]struct{}), kick: make(chan struct{}, 1)}

type orphanReaper struct {
	// gate is held shared by every start of a child we wait for ourselves, from before the
	// fork until its pid is in own, and exclusively by the reaper while it peeks and reaps: the
	// reaper never sees one of our children exit before it knows the child is ours.
	gate sync.RWMutex
	// mu guards own: the pids of our own children not reaped yet.
	mu  sync.Mutex
	own map[int]struct{}
	// kick wakes the reaper after an own child was reaped: a zombie of ours may have hidden
	// orphans behind it (waitid reports one zombie at a time). Capacity 1, sends never block.
	kick chan struct{}
	// reaped counts the orphans reaped, for tests and logs.
	count atomic.Int64
	// on says AdoptOrphans ran.
	on atomic.Bool
}

// start starts cmd as one of our own children: the reaper leaves its exit status to its waiter.
func (o *orphanReaper) start(cmd *exec.Cmd) error {
	o.gate.RLock()
	defer o.gate.RUnlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	o.mu.Lock()
	o.own[cmd.Process.Pid] = struct{}{}
	o.mu.Unlock()
	return nil
}

// adopt registers pid, a child this image did not start (a session adopted after an upgrade),
// as one of ours: the reaper leaves it to its waiter.
func (o *orphanReaper) adopt(pid int) {
	o.gate.RLock()
	defer o.gate.RUnlock()
	o.mu.Lock()
	o.own[pid] = struct{}{}
	o.mu.Unlock()
}

// reaped says our own child pid was reaped by its waiter.
func (o *orphanReaper) reaped(pid int) {
	o.mu.Lock()
	delete(o.own, pid)
	o.mu.Unlock()
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// starts is held by every start of a child (Start, StartWith, StartChild) from before the
// descriptors meant for that child alone exist until they are closed, after its exec: a child
// forked meanwhile would inherit them (every descriptor, close-on-exec or not, until its own
// exec closes them) and hold another session's terminal slave or pipes' write ends for a while,
// where a kill's scan of the terminal's holders would count it, or signal it. (The descriptors
// the process keeps, such as a pipe session's read ends, are still inherited until the exec:
// their users must tell them apart.) exec.Cmd.Start returns
// once the child's exec closed its close-on-exec descriptors (its status pipe's EOF), so nothing
// it inherited outlives the lock.
var starts sync.Mutex

// testHookStartWaits runs when a start finds another under way and is about to wait for it;
// testHookStartLocked once a start holds starts (tests only; set before any start).
var testHookStartWaits, testHookStartLocked func()

func lockStarts() {
	if starts.TryLock() {
		return
	}
	if testHookStartWaits != nil {
		testHookStartWaits()
	}
	starts.Lock()
}

// Start starts cmd as one of our own children: the orphan reaper leaves its exit status to its
// waiter, which must call Reaped once it reaped it (a Waiter does).
func Start(cmd *exec.Cmd) error { return StartWith(cmd, nil) }

// StartWith is Start for a child with descriptors meant for it alone: ends opens them and puts
// them in cmd (its stdio), and returns what closes our copies of them, which StartWith calls
// once the child runs its program or failed to. No other child of this process is forked
// between ends and that close, so no other child ever holds them. A nil ends opens nothing.
func StartWith(cmd *exec.Cmd, ends func() (closeEnds func(), err error)) error {
	lockStarts()
	defer starts.Unlock()
	if testHookStartLocked != nil {
		testHookStartLocked()
	}
	if ends != nil {
		closeEnds, err := ends()
		if err != nil {
			return err
		}
		defer closeEnds()
	}
	return orphans.start(cmd)
}

// Adopt registers pid, a child this process did not start (a session adopted after an upgrade),
// as one of ours: the orphan reaper leaves it to its waiter, which must call Reaped.
func Adopt(pid int) { orphans.adopt(pid) }

// Reaped says our own child pid was reaped (or will never be waited for): the orphan reaper may
// reap a zombie with its pid from now on.
func Reaped(pid int) { orphans.reaped(pid) }

// StartChild starts cmd so that the orphan reaper leaves its exit status to cmd.Wait. Code in
// the gateway that starts a child process and waits for it must start it here once
// AdoptOrphans ran, and call done after cmd.Wait returned.
func StartChild(cmd *exec.Cmd) (done func(), err error) {
	if err := Start(cmd); err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	return func() { orphans.reaped(pid) }, nil
}

// AdoptOrphans makes this process a child subreaper (PR_SET_CHILD_SUBREAPER) and starts the
// goroutine that reaps the orphans re-parented to it. Call it once, from main, before the first
// session is opened: it is process-wide and for the life of the process.
func AdoptOrphans(log *slog.Logger) error {
	if !orphans.on.CompareAndSwap(false, true) {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		orphans.on.Store(false)
		return fmt.Errorf("prctl PR_SET_CHILD_SUBREAPER: %w", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	// Orphans that became zombies before Notify (after an upgrade's exec, for one) sent their
	// SIGCHLD to nobody: one pass first.
	select {
	case orphans.kick <- struct{}{}:
	default:
	}
	go func() {
		for {
			select {
			case <-sigs:
			case <-orphans.kick:
			}
			if n := orphans.reap(); n > 0 {
				log.Debug("reaped orphans", "count", n)
			}
		}
	}()
	return nil
}

// OrphansReaped returns how many re-parented orphans the reaper reaped.
func OrphansReaped() int64 { return orphans.count.Load() }

// waitidInfo is the part of siginfo_t that waitid fills in for a child (x/sys's Siginfo
// hides the union): si_signo, si_errno, si_code, padding, si_pid, si_uid, si_status.
type waitidInfo struct {
	signo, errno, code, _ int32
	pid, uid, status      int32
	_                     [100]byte
}

// peekZombie returns the pid of a child that exited and has not been reaped, without reaping
// it (WNOWAIT), or 0 when there is none.
func peekZombie() (int, error) {
	for {
		var info waitidInfo
		_, _, e := unix.Syscall6(unix.SYS_WAITID, unix.P_ALL, 0, uintptr(unsafe.Pointer(&info)),
			unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, 0, 0)
		switch e {
		case 0:
			return int(info.pid), nil
		case unix.EINTR:
			continue
		case unix.ECHILD:
			return 0, nil
		default:
			return 0, e
		}
	}
}

// reap reaps every zombie child that is not one of our own, until none is waitable or the next
// one is ours (its waiter reaps it and kicks us). It returns how many it reaped.
func (o *orphanReaper) reap() int {
	o.gate.Lock()
	defer o.gate.Unlock()
	n := 0
	for {
		pid, err := peekZombie()
		if err != nil || pid == 0 {
			return n
		}
		o.mu.Lock()
		_, mine := o.own[pid]
		o.mu.Unlock()
		if mine {
			return n
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WNOHANG|unix.WALL, nil); err != nil && err != unix.EINTR {
			return n
		}
		n++
		o.count.Add(1)
	}
}
