package session

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An upgrade in place (docs/operations.md, "How an upgrade in place works") hands every session to the
// next image of the gateway in the same process: Registry.Handover quiesces the sessions and
// describes them (HandoverState, its descriptors still open), the caller encodes that into a
// memfd and execs; the next image decodes it and calls Registry.Adopt (adopt.go).

// HandoverState is everything the registry hands to the next image. The descriptors it names
// (Master, Pidfd) are open in this process and stay open across the exec.
type HandoverState struct {
	Taken    time.Time // wall clock when the snapshot was taken
	Sessions []HandedSession
	Gone     []HandedTombstone // recently closed ids, so an attach to one still says why
	// Dying are the children of sessions whose teardown had begun and not finished: the next
	// image ends them (Registry.EndStrays), since this one cannot finish their kill.
	Dying []int
}

// HandedSession is one session as the next image adopts it.
type HandedSession struct {
	ID, Owner, Name string
	Argv            []string
	Pid             int
	Created         time.Time
	Cols, Rows      int
	PtsName         string
	// Master is the PTY master's descriptor, or -1 when reading had ended (every holder of the
	// slave is gone, so there is nothing left to read).
	Master int
	// Pidfd is the child's pidfd, or -1 when the exit is known or the child was waited for
	// without one (the next image then opens one, after checking the pid is still its child).
	Pidfd int
	// RingStart is the offset of Ring's first byte; the output end is RingStart+len(Ring).
	RingStart int64
	Ring      []byte
	// Exit is the status once the child was reaped.
	Exit           *ExitStatus
	OutputFinal    bool
	UnwatchedSince time.Time // zero while a viewer was attached
	LeaseUntil     time.Time
	Holds          []HandedHold
	// Cgroup is the session's cgroup directory, "" when it has none (a state from an image
	// without cgroups decodes to "").
	Cgroup string
	// Screen is the paint of the session's screen (screen.go) as of output offset
	// ScreenOffset, at ScreenCols×ScreenRows, with ScreenLost the bytes it never read; nil when
	// the image kept no screen (the next image then rebuilds one from the ring, which lacks
	// what the ring had dropped).
	Screen                 []byte
	ScreenOffset           int64
	ScreenCols, ScreenRows int
	ScreenLost             int64
	// Recording is the file of the session's recording, which the next image appends to ("" when
	// it is not recorded), RecordingAt the recording's time when it was handed (the next image's
	// events count on from it), RecordingUnwritten the bytes queued for it that were not written.
	Recording          string
	RecordingAt        time.Duration
	RecordingUnwritten int64
}

// HandedHold is one resume hold and the time it had left.
type HandedHold struct {
	From, UpTo int64
	Left       time.Duration
}

// HandedTombstone is a recently closed id.
type HandedTombstone struct {
	ID, Owner string
	Reason    Reason
}

// FDs returns every descriptor the state names, for the exec to keep open.
func (h *HandoverState) FDs() []int {
	var fds []int
	for _, s := range h.Sessions {
		if s.Master >= 0 {
			fds = append(fds, s.Master)
		}
		if s.Pidfd >= 0 {
			fds = append(fds, s.Pidfd)
		}
	}
	return fds
}

// reapSettle bounds how long Handover waits for the exit of a child the waiter reaped just
// before it was detached (its status is published by a goroutine of its own).
const reapSettle = 2 * time.Second

// Handover freezes the registry (Open refuses with ErrShuttingDown from now on) and quiesces
// every session: its reader stops at the end of its turn and its master leaves the readers'
// epoll instance, its child leaves the waiter, and then its state is read under its lock. No
// byte is read from a master after its ring was snapshotted: what the program prints from here
// on waits in the PTY for the next image. The caller must have stopped everything that kills
// or attaches (the reaper, the sockets) first. After Handover the sessions are inert until
// ResumeHandover or the exec. A Handover that fails (a reader that does not stop within ctx)
// undoes itself before it returns: the registry is open again and every session reads again
// (nothing had left the waiter yet).
func (r *Registry) Handover(ctx context.Context) (*HandoverState, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("handover: %w", ErrShuttingDown)
	}
	r.closed = true
	r.mu.Unlock()
	r.endPipeSessions(ctx)
	r.mu.Lock()
	ss := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		ss = append(ss, s)
	}
	st := &HandoverState{}
	for _, id := range r.goneFIFO {
		if t, ok := r.gone[id]; ok {
			st.Gone = append(st.Gone, HandedTombstone{ID: id, Owner: t.owner, Reason: t.reason})
			if t.done != nil && !isClosed(t.done) && t.pid > 0 {
				st.Dying = append(st.Dying, t.pid)
			}
		}
	}
	r.mu.Unlock()
	sortSessions(ss)
	// 1. Readers: each stops at the end of its turn (bytes it read are ingested first).
	for _, s := range ss {
		s.stopReading()
	}
	for _, s := range ss {
		// A reader that stopped passes whatever ctx is: a select on both would pick at random
		// once ctx has ended, and fail a quiesce nothing held up.
		select {
		case <-s.readStopped:
			continue
		default:
		}
		select {
		case <-s.readStopped:
		case <-ctx.Done():
			r.ResumeHandover(&HandoverState{})
			return nil, fmt.Errorf("handover: reader of %s did not stop: %w", s.id, ctx.Err())
		}
	}
	flushRecordings(ctx, ss)
	// 2. The waiter gives up the pidfds of these sessions' children (it keeps waiting for
	// those of sessions being torn down); a child it reaped just before publishes its status
	// on a goroutine, which we wait for.
	want := make(map[int]bool, len(ss))
	for _, s := range ss {
		want[s.pid] = true
	}
	pidfds := r.opts.children.Detach(want)
	st.Taken = r.now()
	for _, s := range ss {
		pidfd, waited := pidfds[s.pid]
		if !waited {
			pidfd = -1
			t := time.NewTimer(reapSettle)
			select {
			case <-s.exited:
			case <-t.C:
				// Waited for by a blocking wait4 of its own (a traced child): the next
				// image opens a pidfd for it if it is still our child.
				s.opts.Logger.Warn("handover: child not waited through a pidfd", "session", s.id, "pid", s.pid)
			case <-ctx.Done():
			}
			t.Stop()
		}
		// 3. The snapshot, under the session's lock, and its screen.
		h := s.handedLocked(pidfd, st.Taken)
		s.handScreen(&h)
		s.handRecording(&h)
		st.Sessions = append(st.Sessions, h)
	}
	return st, nil
}

// sortSessions orders ss oldest first, so the next image lists them in the same order.
func sortSessions(ss []*Session) {
	for i := 1; i < len(ss); i++ {
		for j := i; j > 0 && ss[j].created.Before(ss[j-1].created); j-- {
			ss[j], ss[j-1] = ss[j-1], ss[j]
		}
	}
}

// stopReading sets handingOver and takes the master away from the readers unless a worker
// reads it now (the worker then stops at the end of its turn). readStopped is closed once no
// worker reads the master.
func (s *Session) stopReading() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handingOver = true
	s.readStopped = make(chan struct{})
	switch s.readState {
	case readArmed, readParked:
		s.stopReadingLocked()
	case readBusy:
		// The worker calls stopReadingLocked at the end of its turn, or endReading.
	default:
		s.markReadStoppedLocked()
	}
}

// stopReadingLocked unregisters the master (it stays open) and marks the reading stopped.
// s.mu is held (lock order: Session.mu before fairShare.mu and Poller.mu).
func (s *Session) stopReadingLocked() {
	s.readState = readHanded
	s.opts.readers.remove(s)
	s.markReadStoppedLocked()
}

// markReadStoppedLocked closes readStopped once. s.mu is held.
func (s *Session) markReadStoppedLocked() {
	if s.readStopped != nil && !isClosed(s.readStopped) {
		close(s.readStopped)
	}
}

// handedLocked describes s for the next image; it takes s.mu.
func (s *Session) handedLocked(pidfd int, now time.Time) HandedSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := HandedSession{ID: s.id, Owner: s.owner, Name: s.name, Argv: s.argv, Pid: s.pid,
		Created: s.created, Cols: s.cols, Rows: s.rows, PtsName: s.ptsName, Master: -1,
		Pidfd: pidfd, RingStart: s.ring.start, OutputFinal: s.outputFinal,
		UnwatchedSince: s.unwatchedSince, LeaseUntil: s.leaseUntil, Cgroup: s.cgroup.Path()}
	if s.readState == readHanded {
		h.Master = s.masterFD
	}
	if n := s.ring.size(); n > 0 {
		h.Ring = make([]byte, n)
		s.ring.copyOut(h.Ring, s.ring.start)
	}
	if isClosed(s.exited) {
		e := s.exit
		h.Exit = &e
	}
	for _, hd := range s.holds {
		if left := hd.until.Sub(now); left > 0 {
			h.Holds = append(h.Holds, HandedHold{From: hd.from, UpTo: hd.upTo, Left: left})
		}
	}
	return h
}

// ResumeHandover undoes Handover in this image (the exec failed): every session's child goes
// back to the waiter and its master back to the readers, and the registry opens again. A
// reader still in its turn re-arms at its end as usual.
func (r *Registry) ResumeHandover(st *HandoverState) {
	byID := make(map[string]HandedSession, len(st.Sessions))
	for _, h := range st.Sessions {
		byID[h.ID] = h
	}
	r.mu.Lock()
	r.closed = false
	ss := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		ss = append(ss, s)
	}
	r.mu.Unlock()
	for _, s := range ss {
		h, ok := byID[s.id]
		if ok && h.Pidfd >= 0 {
			s.waitChild(h.Pidfd)
		}
		s.mu.Lock()
		s.handingOver = false
		handed := s.readState == readHanded
		s.mu.Unlock()
		if handed {
			s.startReading()
		}
	}
}

// waitChild hands pidfd to the waiter (or a blocking wait when it will not take it).
func (s *Session) waitChild(pidfd int) {
	if err := s.opts.children.Watch(s.pid, pidfd, s.reaped); err != nil {
		s.opts.Logger.Warn("child waiter", "session", s.id, "pid", s.pid, "err", err)
	}
}

// startReading registers the master with the readers, armed, or parked while backpressure
// holds; a failure ends the reading.
func (s *Session) startReading() {
	s.mu.Lock()
	s.readState = readArmed
	err := s.opts.readers.add(s)
	if err == nil && s.paused && !s.dropOutput {
		// Registered armed: a report that comes now finds it parked and is dropped;
		// wakeReaderLocked re-arms it.
		s.readState = readParked
	}
	if err != nil {
		s.readState = readBusy
	}
	s.mu.Unlock()
	if err != nil {
		s.endReading(err)
	}
}

// KillOrphans is the teardown for a state the next image cannot read at all: it kills the
// process group of every child of this process (HUP, TERM, KILL, grace apart) and reaps them,
// and closes every descriptor above 2 that is not close-on-exec (what the exec carried over).
// Each failure is logged. It returns how many children it ended.
func KillOrphans(log interface {
	Info(string, ...any)
	Warn(string, ...any)
}, grace time.Duration) int {
	closeInherited(log)
	kids := ownChildren()
	found := len(kids)
	left := killChildren(log, kids, grace)
	log.Info("handover teardown: children ended", "found", found, "survivors", left)
	return found - left
}

// killChildren ends the children pids (each its process group's leader, as a session's child
// is): HUP, TERM, KILL, grace apart, reaping each as it exits. It returns how many survived.
func killChildren(log interface {
	Info(string, ...any)
	Warn(string, ...any)
}, kids []int, grace time.Duration) int {
	for i, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGKILL} {
		left := kids[:0]
		for _, pid := range kids {
			if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				log.Warn("handover teardown: signal group", "pid", pid, "signal", sig, "err", err)
			}
			if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				log.Warn("handover teardown: signal", "pid", pid, "signal", sig, "err", err)
			}
			left = append(left, pid)
		}
		kids = reapSome(left, grace*time.Duration(i+1))
		if len(kids) == 0 {
			break
		}
	}
	for _, pid := range kids {
		log.Warn("handover teardown: child survived KILL", "pid", pid)
	}
	return len(kids)
}

// EndStrays ends the children of sessions whose teardown the previous image had begun but not
// finished when it exec'd (HandoverState.Dying: they had left the registry, so they were not
// handed over): each that is still our child gets HUP, TERM, KILL and is reaped, on a goroutine.
// Other children of ours (a descendant re-parented to a subreaper) are not touched. It returns
// how many it found.
func (r *Registry) EndStrays(dying []int) int {
	self := os.Getpid()
	var strays []int
	for _, pid := range dying {
		if ppid, err := parentOf(pid); err == nil && ppid == self {
			strays = append(strays, pid)
		}
	}
	if len(strays) > 0 {
		log := r.opts.Logger
		log.Warn("handover: ending the children of sessions whose kill had not finished", "pids", strays)
		go func() {
			left := killChildren(log, strays, r.opts.KillGrace)
			log.Info("handover: those children ended", "found", len(strays), "survivors", left)
		}()
	}
	return len(strays)
}

// reapSome reaps the pids that exit within d and returns the others.
func reapSome(pids []int, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		left := pids[:0]
		for _, pid := range pids {
			var ws unix.WaitStatus
			wpid, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			if wpid == pid || errors.Is(err, unix.ECHILD) {
				continue
			}
			left = append(left, pid)
		}
		pids = left
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(10 * time.Millisecond) // polling a process table we cannot wait on as a set
	}
}

// ownChildren lists this process's children (every thread's).
func ownChildren() []int {
	var out []int
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		sc.Split(bufio.ScanWords)
		for sc.Scan() {
			if pid, err := strconv.Atoi(sc.Text()); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// closeInherited closes every descriptor above 2 that is not close-on-exec.
func closeInherited(log interface{ Warn(string, ...any) }) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		log.Warn("handover teardown: list fds", "err", err)
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		if err := unix.Close(fd); err != nil {
			log.Warn("handover teardown: close fd", "fd", fd, "err", err)
		}
	}
}

// endPipeSessions ends the pipe sessions (Spec.Pipes) before a handover, with reason shutdown:
// their pipes and readers are not handed to the next image. r.closed must be set (no new
// session). It waits for their teardowns, or ctx.
func (r *Registry) endPipeSessions(ctx context.Context) {
	r.mu.Lock()
	var pipes []*Session
	for _, s := range r.sessions {
		if s.pipe == nil {
			continue
		}
		s.mu.Lock()
		if s.beginCloseLocked(ReasonShutdown) {
			pipes = append(pipes, s)
		}
		s.mu.Unlock()
		r.removeLocked(s, ReasonShutdown)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range pipes {
		wg.Go(func() { s.teardown(ctx) })
	}
	wg.Wait()
}
