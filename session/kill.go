package session

import (
	"context"
	"errors"
	"os"
	"slices"
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
	Status     string        // "killed", or "exited" when the process had already exited
	Reason     Reason        // why the session was closed
	Exit       ExitStatus    // valid when Reaped
	Reaped     bool          // the child was reaped before Kill returned
	Duration   time.Duration // from the kill point to the return
	Signals    []string      // signals sent to the terminal session's process groups, in order ("HUP", "TERM", "KILL")
	Escapees   int           // processes outside the session that held the PTY
	Signalled  int           // escapees and group stragglers that were signalled
	Survivors  int           // processes (child or PTY holders) still alive when Kill returned
	Groups     int           // process groups of the terminal session signalled (the shell's own included)
	Unverified int           // checks for survivors that could not be made: Survivors is then a lower bound
	Offset     int64         // the final output offset
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
		s.recordMarker("kill: " + string(reason))
	}
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

// teardown signals every process group of the child's terminal session (HUP, TERM, KILL,
// KillGrace apart, stopping once the child is reaped and no other process of its session is
// left), then the processes that still hold the PTY, and records the result. It never
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
		} else if res.Unverified > 0 {
			outcome = "unverified"
		}
		span.SetAttributes(attribute.String(otel.AttrOutcome, outcome),
			attribute.Int(otel.AttrEscapees, res.Escapees), attribute.Int(otel.AttrSurvivors, res.Survivors),
			attribute.Int("muxterm.kill.groups", res.Groups), attribute.Int("muxterm.kill.unverified", res.Unverified),
			attribute.Bool(otel.AttrReaderBlocked, res.ReaderBlocked))
		s.recordingAttrs(span)
		span.End()
		s.endRecording()
		s.opts.Instruments.KillDuration.Record(ctx, res.Duration.Seconds(),
			otelmetric.WithAttributes(attribute.String(otel.AttrOutcome, outcome)))
		s.opts.Instruments.Sessions.Add(ctx, -1)
	}()

	grace := s.opts.KillGrace
	signalled := map[int]bool{} // the process groups signalled
	if _, exited := s.Exit(); exited {
		res.Status = "exited"
	} else {
	escalate:
		for i, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGKILL} {
			// Every process group of the terminal session, not only the shell's: an
			// interactive shell runs each job in a group of its own.
			groups, err := sessionGroups(s.pid)
			if err != nil {
				s.opts.Logger.Warn("kill: list the terminal session's process groups", "session", s.id, "pid", s.pid, "err", err)
			}
			if !slices.Contains(groups, s.pid) {
				groups = append(groups, s.pid)
			}
			for _, pg := range groups {
				if err := syscall.Kill(-pg, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
					s.opts.Logger.Warn("kill: signal group", "session", s.id, "pgid", pg, "signal", sig, "err", err)
				}
				signalled[pg] = true
			}
			res.Signals = append(res.Signals, strings.TrimPrefix(unix.SignalName(sig), "SIG"))
			span.AddEvent(otel.EventSignalSent, trace.WithAttributes(
				attribute.String(otel.AttrSignal, res.Signals[len(res.Signals)-1]),
				attribute.Int("muxterm.kill.groups", len(groups))))
			wait := grace
			if i == 2 {
				wait = max(4*grace, time.Second)
			}
			empty, err := s.waitSessionEmpty(ctx, wait)
			if err != nil {
				// The child is reaped, and whether the rest of its session is gone cannot be
				// seen: say so rather than escalate blind.
				s.opts.Logger.Warn("kill: list the terminal session's processes", "session", s.id, "err", err)
				res.Unverified++
				break escalate
			}
			if empty {
				break escalate
			}
			if ctx.Err() != nil {
				break escalate
			}
		}
	}
	res.Groups = len(signalled)
	esc, sig, surv, unverified := s.killHolders(ctx)
	if s.cgroup != "" {
		// The kernel's word on what is left: whatever the signals above missed dies here, and
		// what the scans above could not see no longer matters.
		surv, res.Unverified = s.endCgroup(ctx, span, max(4*grace, time.Second))
	} else {
		res.Unverified += unverified
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
	s.endStdin() // a pipe session's: its input loop ends, and no descriptor outlives the session
	return res
}

// endCgroup runs killCgroup and returns the survivors: the processes still in the session's
// cgroup, plus any process outside it that still holds the PTY (one that moved itself out of
// the cgroup, or was handed the terminal over a socket); and how many of those checks could not
// be made (the cgroup or /proc unreadable, even with the descriptor reserve).
func (s *Session) endCgroup(ctx context.Context, span trace.Span, wait time.Duration) (survivors, unverified int) {
	killed, left, err := s.killCgroup(ctx, wait)
	if err != nil {
		s.opts.Logger.Warn("kill: cgroup", "session", s.id, "cgroup", s.cgroup.Path(), "err", err)
		if left == nil {
			unverified++ // what is left in the cgroup is not known
		}
	}
	span.AddEvent(otel.EventCgroupKilled, trace.WithAttributes(attribute.Int(otel.AttrCgroupProcs, killed),
		attribute.Int(otel.AttrSurvivors, len(left))))
	survivors = len(left)
	outside, unv := s.outsideHolders(left)
	if len(outside) == 0 {
		return survivors, unverified + unv
	}
	// A holder the scan saw may be on its way out: a process that is exiting (killHolders'
	// KILL reached it, but its descriptors are not closed yet). Give them KillGrace to let go,
	// then count what a second scan finds: a survivor, or a process it handed the terminal to,
	// is still there.
	if s.opts.testHookOutsideHolders != nil {
		s.opts.testHookOutsideHolders(s, len(outside))
	}
	s.settle(ctx, outside)
	outside, unv = s.outsideHolders(left)
	return survivors + len(outside), unverified + unv
}

// outsideHolders scans /proc for the processes outside the cgroup's leftovers (left) that hold
// the PTY, and counts the checks it could not make. It finds none once the master is closed or hung up (no slave fd open anywhere).
// s.ptyMu is held while it looks, so a slave name a newer session reuses is never scanned.
func (s *Session) outsideHolders(left []int) (outside []holder, unverified int) {
	s.ptyMu.Lock()
	defer s.ptyMu.Unlock()
	if s.ptmxClosed || s.masterHungUpLocked() {
		return nil, 0
	}
	holders, unverified, err := ptyHolders(s.outputPaths())
	if err != nil {
		s.opts.Logger.Warn("kill: find the PTY's holders", "session", s.id, "err", err)
		unverified++
	}
	for _, h := range holders {
		if slices.Contains(left, h.pid) {
			continue
		}
		outside = append(outside, h)
	}
	return outside, unverified
}

// settle waits until none of hs holds the PTY any more, KillGrace passes or ctx ends. A
// holder whose fds cannot be read is waited for: the scan after the wait decides.
func (s *Session) settle(ctx context.Context, hs []holder) {
	t := time.NewTimer(s.opts.KillGrace)
	defer t.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		hs = slices.DeleteFunc(hs, func(h holder) bool {
			ok, err := h.still(s.outputPaths())
			return !ok && err == nil
		})
		if len(hs) == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// target is a PTY holder killHolders signals: through its pidfd, or by pid (fd < 0) when no
// descriptor was to be had, each time after re-reading that it still holds the PTY.
type target struct {
	holder
	fd int
}

// killHolders finds processes other than the reaped child that still hold the PTY slave: group
// stragglers (same session id) and escapees (a descendant that called setsid). Stragglers are
// always signalled; escapees too unless Options.SpareEscapees. Each is signalled through a
// pidfd that was opened before its fds were re-checked, so a recycled pid is never hit; when the
// descriptor table is full even with the reserve, by pid right after re-reading the fd links
// that showed it held the PTY (readlink needs no descriptor). It returns the escapees found,
// the processes signalled, those still alive at the end (spared escapees included: they still
// hold the PTY) and the checks it could not make.
func (s *Session) killHolders(ctx context.Context) (escapees, signalled, survivors, unverified int) {
	var targets []target
	spared := 0
	defer func() {
		for _, t := range targets {
			if t.fd >= 0 {
				unix.Close(t.fd)
			}
		}
	}()
	// ptyMu is held only while we look: once a holder's pidfd is open, a recycled pid can no
	// longer be hit, and the reader may close the master while we wait for the holders.
	s.ptyMu.Lock()
	if s.ptmxClosed || s.masterHungUpLocked() {
		// Closed: the slave name may belong to another session by now. Hung up: no process
		// holds the slave any more, so there is nothing to scan /proc for.
		s.ptyMu.Unlock()
		return 0, 0, 0, 0
	}
	holders, unverified, err := ptyHolders(s.outputPaths())
	if err != nil {
		s.opts.Logger.Warn("kill: find the PTY's holders", "session", s.id, "err", err)
		unverified++
	}
	for _, h := range holders {
		sid, err := unix.Getsid(h.pid)
		if err != nil {
			continue // gone
		}
		if sid != s.pid {
			escapees++
			if s.opts.SpareEscapees {
				spared++
				continue
			}
		}
		fd := -1
		_ = withFDs(func() error {
			var err error
			fd, err = unix.PidfdOpen(h.pid, 0)
			if err != nil {
				fd = -1
			}
			return err
		})
		if ok, err := h.still(s.outputPaths()); !ok {
			if fd >= 0 {
				unix.Close(fd)
			}
			if err != nil {
				unverified++
			}
			continue
		}
		targets = append(targets, target{h, fd})
	}
	s.ptyMu.Unlock()
	signalled = len(targets)
	if len(targets) == 0 {
		return escapees, 0, spared, unverified
	}
	for i, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGKILL} {
		for _, t := range targets {
			if t.fd >= 0 {
				_ = unix.PidfdSendSignal(t.fd, sig, nil, 0)
			} else if ok, _ := t.still(s.outputPaths()); ok {
				_ = unix.Kill(t.pid, sig)
			}
		}
		wait := s.opts.KillGrace
		if i == 2 {
			wait = max(4*s.opts.KillGrace, time.Second)
		}
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		targets = s.waitTargets(targets, wait)
		if len(targets) == 0 {
			return escapees, signalled, spared, unverified
		}
	}
	for _, t := range targets {
		if t.fd < 0 {
			if _, err := t.still(s.outputPaths()); err != nil {
				unverified++
				continue
			}
		}
		survivors++
	}
	return escapees, signalled, survivors + spared, unverified
}

// waitTargets waits up to d for the targets to exit and returns those still alive; it closes
// the pidfds of the others. Targets without a pidfd are re-read every 10 ms.
func (s *Session) waitTargets(targets []target, d time.Duration) []target {
	deadline := time.Now().Add(d)
	var fds []int
	var byPid []target
	for _, t := range targets {
		if t.fd >= 0 {
			fds = append(fds, t.fd)
		} else {
			byPid = append(byPid, t)
		}
	}
	for {
		step := time.Until(deadline)
		if len(byPid) > 0 {
			step = min(step, 10*time.Millisecond)
		}
		fds = waitPidfds(fds, step)
		alive := byPid[:0]
		for _, t := range byPid {
			if ok, err := t.still(s.outputPaths()); ok || err != nil {
				alive = append(alive, t)
			}
		}
		byPid = alive
		if (len(fds) == 0 && len(byPid) == 0) || !time.Now().Before(deadline) {
			break
		}
	}
	out := targets[:0]
	for _, t := range targets {
		if (t.fd >= 0 && slices.Contains(fds, t.fd)) || (t.fd < 0 && slices.ContainsFunc(byPid, func(b target) bool { return b.pid == t.pid })) {
			out = append(out, t)
		}
	}
	return out
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

// waitSessionEmpty waits up to d for the child to be reaped and every other process of its
// terminal session to exit, or ctx to end. It reports whether the session emptied, or, once the
// child is reaped, the error that kept it from listing the session's processes.
func (s *Session) waitSessionEmpty(ctx context.Context, d time.Duration) (bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.exited:
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, nil
	}
	// Jobs of an interactive shell (and background jobs) are not our children: their end is
	// seen in /proc.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		groups, err := sessionGroups(s.pid)
		if err != nil {
			return false, err
		}
		if len(groups) == 0 {
			return true, nil
		}
		select {
		case <-tick.C:
		case <-t.C:
			return false, nil
		case <-ctx.Done():
			return false, nil
		}
	}
}

// masterHungUpLocked reports whether the master sees a hang-up: every slave fd is closed (for a
// pipe session: every write end of both output pipes). s.ptyMu must be held (so the master, or
// the pipes, are open).
func (s *Session) masterHungUpLocked() bool {
	if s.pipe != nil {
		return hungUp(s.pipe.stdout) && hungUp(s.pipe.stderr)
	}
	return hungUp(s.ptmx)
}

// hungUp reports whether f, a PTY master or a pipe's read end, polls POLLHUP.
func hungUp(f *os.File) bool {
	rc, err := f.SyscallConn()
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
