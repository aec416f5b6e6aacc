package session

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelmetric "go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/otel"
)

// KillResult reports what a kill did.
type KillResult struct {
	Status    string        // "killed", or "exited" when the process had already exited
	Reason    Reason        // why the session was closed
	Exit      ExitStatus    // valid when Reaped
	Reaped    bool          // the child was reaped before Kill returned
	Duration  time.Duration // from the kill point to the return
	Signals   []string      // signals sent to the process group, in order ("HUP", "TERM", "KILL")
	Escapees  int           // processes outside the session that held the PTY
	Signalled int           // escapees and group stragglers that were signalled
	Survivors int           // processes (child or PTY holders) still alive when Kill returned
	Offset    int64         // the final output offset
	// ReaderBlocked says reading the master had not ended when Kill returned: a descendant held
	// the PTY open, so the master is still registered with the readers.
	ReaderBlocked bool
}

// beginCloseLocked marks the kill point: the state moves to closing, output is final from
// here on, and viewers and a paused reader are woken. It returns false if closing had already
// begun. s.mu must be held.
func (s *Session) beginCloseLocked(reason Reason) bool {
	if s.killDone != nil {
		return false
	}
	s.killDone = make(chan struct{})
	s.killRes = new(KillResult)
	s.state = StateClosing
	s.reason = reason
	if reason != ReasonExited {
		// The kill point: nothing read from here on is kept, and the end is final. A session
		// reaped because its process exited keeps what the reader still drains: the tail the
		// program printed before it exited is output, not noise after a kill.
		s.dropOutput = true
		s.outputFinal = true
	}
	s.dropHoldsLocked(nil) // nobody can reattach to a closing session
	s.paused = false
	s.wakeReaderLocked()
	s.wakeViewersLocked()
	return true
}

// teardown signals the process group (HUP, TERM, KILL, KillGrace apart, stopping once the child
// is reaped), then the processes that still hold the PTY, and records the result. It never
// waits for the reader: the reader closes the PTY itself when its read ends. beginCloseLocked
// must have run first. Only the first call tears down; later calls wait for its result.
func (s *Session) teardown(ctx context.Context) (res KillResult) {
	start := s.now()
	s.mu.Lock()
	res = KillResult{Status: "killed", Reason: s.reason, Offset: s.ring.end}
	done, out := s.killDone, s.killRes
	if s.tearing {
		// Another teardown runs or ran: its result is the result.
		s.mu.Unlock()
		select {
		case <-done:
			return *out
		case <-ctx.Done():
			return res
		}
	}
	s.tearing = true
	s.mu.Unlock()
	ctx, span := s.opts.Tracer.Start(ctx, otel.SpanSessionKill,
		trace.WithLinks(trace.Link{SpanContext: s.readerSpan.SpanContext()}),
		trace.WithAttributes(attribute.String(otel.AttrSessionID, s.id), semconv.ProcessPID(s.pid),
			attribute.String(otel.AttrReason, string(res.Reason))))
	// The reader span ends later, often much later (an escapee holds the PTY): link it back.
	s.readerSpan.AddLink(trace.Link{SpanContext: span.SpanContext()})
	defer func() {
		outcome := res.Status
		if res.Survivors > 0 {
			outcome = "survivors"
		}
		span.SetAttributes(attribute.String(otel.AttrOutcome, outcome),
			attribute.Int(otel.AttrEscapees, res.Escapees), attribute.Int(otel.AttrSurvivors, res.Survivors),
			attribute.Bool(otel.AttrReaderAlive, res.ReaderBlocked))
		span.End()
		s.opts.Instruments.KillDuration.Record(ctx, res.Duration.Seconds(),
			otelmetric.WithAttributes(attribute.String(otel.AttrOutcome, outcome)))
		s.opts.Instruments.Sessions.Add(ctx, -1)
	}()

	grace := s.opts.KillGrace
	if _, exited := s.Exit(); exited {
		res.Status = "exited"
	} else {
	escalate:
		for i, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGKILL} {
			if err := syscall.Kill(-s.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				s.opts.Logger.Warn("kill: signal group", "session", s.id, "pid", s.pid, "signal", sig, "err", err)
			}
			res.Signals = append(res.Signals, strings.TrimPrefix(unix.SignalName(sig), "SIG"))
			span.AddEvent(otel.EventSignalSent, trace.WithAttributes(
				attribute.String(otel.AttrSignal, res.Signals[len(res.Signals)-1])))
			wait := grace
			if i == 2 {
				wait = max(4*grace, time.Second)
			}
			t := time.NewTimer(wait)
			select {
			case <-s.exited:
				t.Stop()
				break escalate
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				break escalate
			}
		}
	}
	esc, sig, surv := s.killHolders(ctx)
	if s.cgroup != "" {
		// The kernel's word on what is left: whatever the signals above missed dies here.
		surv = s.endCgroup(ctx, span, max(4*grace, time.Second))
	}
	if e, ok := s.Exit(); ok {
		res.Exit, res.Reaped = e, true
		span.AddEvent(otel.EventChildReaped, trace.WithAttributes(semconv.ProcessExitCode(e.Code)))
	} else if s.cgroup == "" {
		res.Survivors++ // with a cgroup, a child still running is in the cgroup's count
	}
	res.Escapees, res.Signalled, res.Survivors = esc, sig, res.Survivors+surv
	if esc > 0 {
		span.AddEvent(otel.EventEscapeesFound, trace.WithAttributes(
			attribute.Int(otel.AttrEscapees, esc), attribute.Int("muxterm.kill.signalled", sig)))
	}
	select {
	case <-s.readerDone:
	default:
		res.ReaderBlocked = true
		span.AddEvent(otel.EventReaderBlocked)
	}
	s.mu.Lock()
	if !s.outputFinal {
		// A reap of an exited session kept what the reader drained during the teardown; a
		// descendant still holding the PTY (a spared escapee) adds nothing from here on.
		s.dropOutput, s.outputFinal = true, true
		s.paused = false
		s.wakeReaderLocked()
		s.wakeViewersLocked()
	}
	res.Offset = s.ring.end
	s.mu.Unlock()
	res.Duration = s.now().Sub(start)

	s.mu.Lock()
	s.state = StateClosed
	*out = res
	close(done)
	s.wakeViewersLocked()
	s.mu.Unlock()
	return res
}

// endCgroup runs killCgroup and returns the survivors: the processes still in the session's
// cgroup, plus any process outside it that still holds the PTY (one that moved itself out of
// the cgroup, or was handed the terminal over a socket).
func (s *Session) endCgroup(ctx context.Context, span trace.Span, wait time.Duration) int {
	killed, left, err := s.killCgroup(ctx, wait)
	if err != nil {
		s.opts.Logger.Warn("kill: cgroup", "session", s.id, "cgroup", s.cgroup.Path(), "err", err)
	}
	span.AddEvent(otel.EventCgroupKilled, trace.WithAttributes(attribute.Int(otel.AttrCgroupProcs, killed),
		attribute.Int(otel.AttrSurvivors, len(left))))
	survivors := len(left)
	s.ptyMu.Lock()
	defer s.ptyMu.Unlock()
	if s.ptmxClosed || s.masterHungUpLocked() {
		return survivors
	}
	self := os.Getpid()
	for _, pid := range ptyHolders(s.ptsName) {
		if slices.Contains(left, pid) {
			continue
		}
		if _, ppid, err := sessionOf(pid); err == nil && ppid == self && preExec(pid) {
			continue // a sibling spawn's child before its exec (see killHolders)
		}
		survivors++
	}
	return survivors
}

// killHolders finds processes other than the reaped child that still hold the PTY slave: group
// stragglers (same session id) and escapees (a descendant that called setsid). Stragglers are
// always signalled; escapees too unless Options.SpareEscapees. Each is signalled through a
// pidfd that was opened before its fds were re-checked, so a recycled pid is never hit. It
// returns the escapees found, the processes signalled and those still alive at the end (spared
// escapees included: they still hold the PTY).
func (s *Session) killHolders(ctx context.Context) (escapees, signalled, survivors int) {
	var fds []int
	spared := 0
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	// ptyMu is held only while we look: once a holder's pidfd is open, a recycled pid can no
	// longer be hit, and the reader may close the master while we wait for the holders.
	s.ptyMu.Lock()
	if s.ptmxClosed || s.masterHungUpLocked() {
		// Closed: the slave name may belong to another session by now. Hung up: no process
		// holds the slave any more, so there is nothing to scan /proc for.
		s.ptyMu.Unlock()
		return 0, 0, 0
	}
	self := os.Getpid()
	for _, pid := range ptyHolders(s.ptsName) {
		sid, ppid, err := sessionOf(pid)
		if err != nil {
			continue
		}
		if ppid == self && preExec(pid) {
			// A sibling spawn's child between fork and exec: it inherits every fd we have
			// open, this slave included, and is no descendant of this session. (A real
			// escapee may have us as its parent too: when the gateway is PID 1 or a
			// subreaper, orphans are re-parented to it; those have exec'd.)
			continue
		}
		escapee := sid != s.pid
		if escapee {
			escapees++
			if s.opts.SpareEscapees {
				spared++
				continue
			}
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if !holds(pid, s.ptsName) {
			unix.Close(fd)
			continue
		}
		fds = append(fds, fd)
	}
	s.ptyMu.Unlock()
	signalled = len(fds)
	if len(fds) == 0 {
		return escapees, 0, spared
	}
	for i, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGKILL} {
		for _, fd := range fds {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		}
		wait := s.opts.KillGrace
		if i == 2 {
			wait = max(4*s.opts.KillGrace, time.Second)
		}
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		fds = waitPidfds(fds, wait)
		if len(fds) == 0 {
			return escapees, signalled, spared
		}
	}
	return escapees, signalled, len(fds) + spared
}

// waitPidfds waits up to d for the processes behind fds to exit and returns (and keeps open)
// the fds of those still alive; it closes the others.
func waitPidfds(fds []int, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for len(fds) > 0 {
		pfds := make([]unix.PollFd, len(fds))
		for i, fd := range fds {
			pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		}
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms <= 0 {
			break
		}
		n, err := unix.Poll(pfds, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			break
		}
		alive := fds[:0]
		for i, p := range pfds {
			if p.Revents != 0 {
				unix.Close(fds[i])
			} else {
				alive = append(alive, fds[i])
			}
		}
		fds = alive
	}
	return fds
}

// ptyHolders lists the pids (not ours) with an open fd on the slave at path.
func ptyHolders(path string) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	self := os.Getpid()
	var pids []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == self {
			continue
		}
		if holds(pid, path) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// holds reports whether pid has an open fd on path.
func holds(pid int, path string) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	d, err := os.Open(dir)
	if err != nil {
		return false
	}
	fds, _ := d.Readdirnames(-1)
	d.Close()
	for _, fd := range fds {
		if target, err := os.Readlink(dir + "/" + fd); err == nil && target == path {
			return true
		}
	}
	return false
}

// preExec reports whether pid still runs our own executable: a child we forked that has not
// exec'd yet.
func preExec(pid int) bool {
	self, err1 := os.Readlink("/proc/self/exe")
	exe, err2 := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return err1 == nil && err2 == nil && exe == self
}

// sessionOf reads pid's session id and parent pid from /proc/pid/stat.
// It keeps its own parser (not internal/procfs's) only because kill.go is being changed by
// another branch this round; the next round switches it to procfs.ReadStat.
func sessionOf(pid int) (sid, ppid int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command's closing parenthesis: state ppid pgrp session ...
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 {
		return 0, 0, errors.New("malformed stat")
	}
	if ppid, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, err
	}
	sid, err = strconv.Atoi(f[3])
	return sid, ppid, err
}

// masterHungUpLocked reports whether the master sees a hang-up: every slave fd is closed.
// s.ptyMu must be held (so the master is open).
func (s *Session) masterHungUpLocked() bool {
	rc, err := s.ptmx.SyscallConn()
	if err != nil {
		return false
	}
	hup := false
	_ = rc.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(p, 0); err == nil && n == 1 {
			hup = p[0].Revents&unix.POLLHUP != 0
		}
	})
	return hup
}
