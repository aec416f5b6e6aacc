package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/cgroup"
	"github.com/muxterm/muxterm/internal/child"
	"github.com/muxterm/muxterm/internal/procfs"
	"github.com/muxterm/muxterm/otel"
)

// The next image's side of an upgrade in place (handover.go): Registry.Adopt builds each handed
// session anew from its descriptors, checking that each is what the state says it is, and
// registers it, or tears down what of it could be built.

// maxAdopters bounds the goroutines that adopt sessions at once.
const maxAdopters = 4

// Adopt registers the sessions of a state the previous image handed over, on
// GOMAXPROCS-1 goroutines, at least one and at most maxAdopters (each session's adoption is a
// dozen system calls, independent of the others'; the shared tables it enters are locked). One
// processor is left to the rest: the new image serves while it adopts, and on a busy machine
// adopters on every processor delayed its answers by tens of milliseconds. A session it cannot
// adopt (a descriptor that is not what the state says it is) is torn down as a shutdown would,
// and the failure is logged and returned; the others are adopted. It returns once every session
// is adopted or torn down.
func (r *Registry) Adopt(st *HandoverState) (adopted int, err error) {
	for _, h := range st.Gone {
		r.mu.Lock()
		if len(r.goneFIFO) < tombstones {
			r.gone[h.ID] = tombstone{owner: h.Owner, reason: h.Reason}
			r.goneFIFO = append(r.goneFIFO, h.ID)
		}
		r.mu.Unlock()
	}
	errs := make([]error, len(st.Sessions))
	var next, count atomic.Int64
	var wg sync.WaitGroup
	for range min(max(runtime.GOMAXPROCS(0)-1, 1), maxAdopters, len(st.Sessions)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(st.Sessions) {
					return
				}
				if errs[i] = r.adoptAndRegister(st.Sessions[i], st.Taken); errs[i] == nil {
					count.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(count.Load()), errors.Join(errs...)
}

// adoptAndRegister adopts h and registers it, or tears down what of it could be built.
func (r *Registry) adoptAndRegister(h HandedSession, taken time.Time) error {
	s, err := r.adoptOne(h, taken)
	if err != nil {
		err = fmt.Errorf("adopt session %s (pid %d): %w", h.ID, h.Pid, err)
		r.opts.Logger.Error("handover: session not adopted, tearing it down", "session", h.ID, "pid", h.Pid, "err", err)
		if s != nil {
			res := r.Teardown(context.Background(), s)
			r.opts.Logger.Info("handover: session torn down", "session", h.ID, "status", res.Status,
				"survivors", res.Survivors, "signals", res.Signals)
		}
		// It was never registered, so Teardown did not report its removal; a cluster kept its
		// directory entry across the upgrade (KeepOnStart): remove it.
		if f := r.opts.Observer; f != nil {
			r.mu.Lock()
			f(Event{ID: h.ID, Owner: h.Owner, Name: h.Name, Created: h.Created, Opened: false})
			r.mu.Unlock()
		}
		return err
	}
	r.mu.Lock()
	r.sessions[s.id] = s
	r.observe(s, true) // a cluster's directory lists it again (the node swept its entries at start)
	r.mu.Unlock()
	return nil
}

// adoptOne builds a session from h. On error it returns the session as far as it could be
// built (child waited for, master closed), for a teardown, or nil when there is nothing of ours
// to tear down.
func (r *Registry) adoptOne(h HandedSession, taken time.Time) (*Session, error) {
	opts := &r.opts
	r.mu.Lock()
	echo := r.echoGroupLocked(h.Owner)
	r.mu.Unlock()
	s := &Session{
		id: h.ID, owner: h.Owner, name: h.Name, argv: h.Argv, pid: h.Pid, created: h.Created,
		opts: opts, ptsName: h.PtsName, now: r.now,
		exited: make(chan struct{}), readerDone: make(chan struct{}),
		ring: newRing(opts.ScrollbackBytes), viewers: make(map[*Viewer]struct{}),
		cols: h.Cols, rows: h.Rows, testHookBeforeIngest: opts.testHookBeforeIngest,
		unwatchedSince: h.UnwatchedSince, leaseUntil: h.LeaseUntil, outputFinal: h.OutputFinal,
		cgroup: cgroup.Group(h.Cgroup), echo: echo,
	}
	if h.Exit == nil {
		// Our child still: the orphan reaper must leave its exit status to the waiter.
		child.Adopt(h.Pid)
	}
	if s.unwatchedSince.IsZero() {
		s.unwatchedSince = taken // the viewers it had were left behind with the old image
	}
	s.ring.start, s.ring.end = h.RingStart, h.RingStart
	s.ring.append(h.Ring)
	s.adoptScreen(&h)
	s.adoptRecording(&h)
	_, s.readerSpan = opts.Tracer.Start(context.Background(), otel.SpanSessionReader,
		trace.WithAttributes(attribute.String(otel.AttrSessionID, s.id), semconv.ProcessPID(s.pid),
			attribute.Bool("muxterm.session.adopted", true)))
	opts.Instruments.Sessions.Add(context.Background(), 1)

	// The child: known exit, our pidfd, or a pidfd opened anew for a child still ours.
	var childErr error
	switch {
	case h.Exit != nil:
		if h.Pidfd >= 0 {
			unix.Close(h.Pidfd)
		}
		s.exit = *h.Exit
		s.exitSettled = true
		close(s.exited)
	case h.Pidfd >= 0:
		childErr = checkPidfd(h.Pidfd, h.Pid)
		if childErr == nil {
			unix.CloseOnExec(h.Pidfd)
			s.waitChild(h.Pidfd)
		} else {
			unix.Close(h.Pidfd)
		}
	default:
		childErr = errors.New("no pidfd")
	}
	if childErr != nil {
		// Still ours (unreaped, so its pid cannot have been reused)? Then wait through a new
		// pidfd.
		if fd, err := ownChildPidfd(h.Pid); err == nil {
			s.waitChild(fd)
			childErr = nil
		} else {
			childErr = errors.Join(childErr, err)
		}
	}
	if childErr != nil {
		// Nothing we can wait for or safely signal: the status is lost, and no waiter will
		// ever say the pid was reaped, so it is no longer ours for the orphan reaper.
		if h.Exit == nil {
			child.Reaped(h.Pid)
		}
		s.exit = ExitStatus{Code: -1}
		s.exitSettled = true
		close(s.exited)
	}

	// The master.
	var masterErr error
	if h.Master >= 0 {
		if _, err := unix.IoctlGetUint32(h.Master, unix.TIOCGPTN); err != nil {
			masterErr = fmt.Errorf("fd %d is not a PTY master: %w", h.Master, err)
			unix.Close(h.Master)
		} else {
			unix.CloseOnExec(h.Master)
			s.ptmx = os.NewFile(uintptr(h.Master), "/dev/ptmx")
			masterErr = rawFD(s.ptmx, &s.masterFD)
		}
	}
	if s.ptmx == nil || masterErr != nil {
		// Nothing to read: a closed file makes every master call fail as a closed session.
		if s.ptmx == nil {
			s.ptmx = closedFile()
		}
		s.ptmxClosed = true
		// Under s.mu: the child's waiter may already run reaped, which looks at readState.
		s.mu.Lock()
		s.readState = readDone
		s.outputFinal = true
		s.mu.Unlock()
		close(s.readerDone)
		s.readerSpan.End()
	}
	for _, hd := range h.Holds {
		s.mu.Lock()
		s.holdLocked(hd.From, hd.UpTo)
		if n := len(s.holds); n > 0 {
			last := s.holds[n-1]
			last.until = s.now().Add(hd.Left)
			last.timer.Reset(hd.Left)
		}
		s.mu.Unlock()
	}
	if childErr != nil && masterErr != nil {
		// Nothing tears this session down: its recording ends here, and it leaves the count.
		s.endRecording()
		opts.Instruments.Sessions.Add(context.Background(), -1)
		return nil, errors.Join(childErr, masterErr)
	}
	if childErr != nil || masterErr != nil {
		return s, errors.Join(childErr, masterErr)
	}
	if h.Master >= 0 {
		s.mu.Lock()
		if !s.paused && s.minLagLocked() > int64(opts.HighWaterBytes) {
			s.paused, s.pausedAt = true, s.now()
		}
		s.mu.Unlock()
		s.startReading()
	}
	return s, nil
}

// closedFile returns an *os.File that is closed: its methods fail with os.ErrClosed.
func closedFile() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return os.NewFile(^uintptr(0), "closed") // invalid: methods fail with os.ErrInvalid
	}
	f.Close()
	return f
}

// checkPidfd checks that fd is a pidfd for pid (its fdinfo's Pid line).
func checkPidfd(fd, pid int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		return fmt.Errorf("pidfd %d: %w", fd, err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			if p, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && p == pid {
				return nil
			}
			return fmt.Errorf("pidfd %d is for %s, not %d", fd, strings.TrimSpace(v), pid)
		}
	}
	return fmt.Errorf("fd %d is not a pidfd", fd)
}

// ownChildPidfd opens a pidfd for pid if pid is a child of this process (unreaped, so the pid
// is still the one we started).
func ownChildPidfd(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return -1, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	// Checked after the open: the pidfd pins the process it names, so if that process is our
	// child now, it is the child the state names.
	if ppid, err := parentOf(pid); err != nil || ppid != os.Getpid() {
		unix.Close(fd)
		return -1, fmt.Errorf("pid %d is not our child (parent %d, %v)", pid, ppid, err)
	}
	return fd, nil
}

// parentOf reads pid's parent from /proc.
func parentOf(pid int) (int, error) {
	s, err := procfs.ReadStat(pid)
	if err != nil {
		return 0, err
	}
	return s.PPID, nil
}
