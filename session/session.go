package session

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/cgroup"
	"github.com/muxterm/muxterm/internal/poller"
	"github.com/muxterm/muxterm/internal/record"
)

// State is a session's lifecycle state. It only moves forward: running, closing, closed.
type State int

const (
	StateRunning State = iota // the session accepts viewers (its process may have exited)
	StateClosing              // a kill, reap or shutdown has begun; output is final
	StateClosed               // teardown finished
)

func (st State) String() string {
	switch st {
	case StateRunning:
		return "running"
	case StateClosing:
		return "closing"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int(st))
}

// Reason says why a session left the running state.
type Reason string

// Reasons, as the protocol's session.closed notification spells them.
const (
	ReasonKilled   Reason = "killed"
	ReasonExited   Reason = "exited"
	ReasonReaped   Reason = "reaped"
	ReasonShutdown Reason = "shutdown"
)

// ExitStatus is how a process ended.
type ExitStatus struct {
	Code   int            // exit code, or -1 when a signal ended it
	Signal syscall.Signal // 0 unless a signal ended it
}

// SignalName is the signal without its SIG prefix ("HUP"), or "" when none.
func (e ExitStatus) SignalName() string {
	if e.Signal == 0 {
		return ""
	}
	return strings.TrimPrefix(unix.SignalName(e.Signal), "SIG")
}

// Session is one process on a PTY, or on pipes (Spec.Pipes). All methods are safe for concurrent
// use.
type Session struct {
	// immutable after spawn:
	id      string
	owner   string
	name    string
	argv    []string
	pid     int
	created time.Time
	opts    *Options
	ptmx    *os.File // non-blocking master, read through readers; closed when reading ends
	// masterFD is ptmx's descriptor, for the reads and epoll_ctl calls of readers, which use it
	// only while the master is registered (endReading unregisters before it closes ptmx).
	masterFD int
	ptsName  string // the slave's path, to find processes that still hold it
	now      func() time.Time
	// cgroup holds the child and everything it forks; "" when cgroups are off. Removed by the
	// kill (killCgroup).
	cgroup cgroup.Group
	// scr is the session's screen (screen.go), nil when Options.NoScreen or for a pipe session.
	scr *screen
	// rec is the session's recording (record.go), nil when it is not recorded; set before its
	// reader starts, then never changed. recEnded: endRecording ran.
	rec      *record.Recorder
	recEnded atomic.Bool
	// pipe is a pipe session's stdin, stdout and stderr (pipe.go); nil for a PTY session, whose
	// ptmx, masterFD and ptsName are then unset (ptmx nil).
	pipe *pipeIO

	// exited is closed by reaped once the child is reaped. exit is written before that;
	// read exit only after <-exited.
	exited chan struct{}
	exit   ExitStatus
	// readerDone is closed once reading the master has ended and ptmx is closed.
	readerDone chan struct{}
	// reg is the master's registration with the readers' poller; written by readers.add (in
	// spawn, and again when a handover is resumed or adopted) under mu.
	reg *poller.Registration
	// echo is the echo-first group of the owner's sessions (echofirst.go); set by spawn or
	// adoptOne before the master is read, never changed.
	echo *echoGroup
	// awaitingEcho: a keystroke was written and no output has been read since (echofirst.go).
	awaitingEcho atomic.Bool
	// readEnded: endReading has begun; a keystroke that comes after it ends its own wait for
	// an echo, which no read will end (echofirst.go).
	readEnded atomic.Bool
	// released: its master was released from a hold for another session's echo and has not
	// read a batch since; it is not held again before it has (echofirst.go).
	released atomic.Bool
	// inTurn: a readers worker has claimed its master for a turn that the fair share has not
	// counted yet (readReady sets it; fairShare.settle clears it before the re-arm, dropShare
	// when the master is parked for an echo); the fair share never takes a master in a turn
	// for idle (fair.go). It stays set after a turn that ends the reading or stops it for a
	// handover, which is harmless: the master then has no share.
	inTurn atomic.Bool

	// mu guards the fields below. Registry.mu is taken before mu, never after.
	mu             sync.Mutex
	state          State
	reason         Reason
	dropOutput     bool   // the kill point passed: ingest keeps nothing from now on
	outputFinal    bool   // ring.end will not grow again (reader ended or kill point passed)
	exitSettled    bool   // exitSettle passed since the exit: viewers may report it
	settleGen      uint64 // numbers settle timers: only the latest armed sets exitSettled
	ring           ring
	viewers        map[*Viewer]struct{}
	unwatchedSince time.Time // zero while a viewer is attached
	leaseUntil     time.Time
	cols, rows     int    // the size applied to the PTY (see size.go)
	sizeSeq        uint64 // counts viewers' uses (typing, declaring a size): Viewer.used
	paused         bool   // backpressure: the master is not read
	pausedAt       time.Time
	// readState says who has the master: armed with readers, read by a worker, parked by
	// backpressure (disarmed until wakeReaderLocked), or done. The zero value: no reader (a
	// test's session without a process).
	readState readState
	// handingOver: an upgrade in place is taking this session over (handover.go); the reader
	// stops at the end of its turn instead of re-arming, and readStopped is closed once no
	// worker reads the master any more.
	handingOver bool
	readStopped chan struct{}
	// holds: the offsets of read-write viewers lost with their socket, which backpressure
	// follows as if they were attached, each until its own timer (ResumeHold) removes it.
	holds []*hold
	// screenSizes are the sizes applied to the PTY that the screen has not read up to yet, and
	// screenQueued says the session waits for the screen feeder (screen.go).
	screenSizes  []sizeAt
	screenQueued bool
	dropped      int64         // bytes read after the kill point and dropped
	killDone     chan struct{} // closed when teardown finished; non-nil once closing began
	tearing      bool          // a Teardown call is running or ran
	killRes      *KillResult   // allocated with killDone; *killRes is valid after <-killDone

	// ptyMu guards ptmxClosed. The reader holds it to close ptmx; Kill holds it while it looks for
	// processes holding the slave, so a slave name reused by a newer session is never scanned.
	ptyMu      sync.Mutex
	ptmxClosed bool

	// resizeMu serialises computing and applying the window size (size.go), so the size
	// stored is the size applied and the last computation wins. Taken before mu, never under it.
	resizeMu sync.Mutex
	// sizeGen grows by one whenever the applied size changes; written under resizeMu and mu,
	// read without a lock by the sockets' writers.
	sizeGen atomic.Uint64

	// inMu guards inQueue and inDraining: input the PTY could not take yet, and whether an
	// inputLoop goroutine is writing it.
	inMu       sync.Mutex
	inQueue    []byte
	inDraining bool

	// wg counts inputLoop goroutines (the reader and the exit are waited on through their
	// channels). Production code deliberately does not wait on it: an inputLoop ends when its
	// queue is empty or the master is closed (the reader closes it when the PTY hangs up), so
	// it never outlives the session's PTY; tests wait on it to prove that.
	wg sync.WaitGroup

	// readerSpan is the session.reader span: started by spawn, ended when reading ends.
	readerSpan trace.Span

	// testHookBeforeIngest, when set, runs in the reader with each chunk read, before it is added.
	testHookBeforeIngest func([]byte)
}

// ID returns the session's id.
func (s *Session) ID() string { return s.id }

// Owner returns the principal that opened the session.
func (s *Session) Owner() string { return s.owner }

// Pid returns the child's pid.
func (s *Session) Pid() int { return s.pid }

// Exited is closed once the child has been reaped.
func (s *Session) Exited() <-chan struct{} { return s.exited }

// ReaderDone is closed once the reader has ended and closed the PTY master.
func (s *Session) ReaderDone() <-chan struct{} { return s.readerDone }

// Exit returns how the process ended, and false while it runs.
func (s *Session) Exit() (ExitStatus, bool) {
	select {
	case <-s.exited:
		return s.exit, true
	default:
		return ExitStatus{}, false
	}
}

// Closing reports the reason once a kill, reap or shutdown has begun.
func (s *Session) Closing() (Reason, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason, s.state != StateRunning
}

// State returns the lifecycle state.
func (s *Session) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// UnwatchedSince returns when the last viewer left (or the session was born), and the zero
// time while a viewer is attached.
func (s *Session) UnwatchedSince() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unwatchedSince
}

// Info is a snapshot of a session for listings.
type Info struct {
	ID      string
	Name    string
	Pid     int
	Argv    []string
	Created time.Time
	Cols    int
	Rows    int
	Viewers int
	Start   int64 // oldest retained offset
	End     int64 // output end offset
	Exit    *ExitStatus
	State   State
	Pipes   bool // the program runs on pipes, without a terminal (Spec.Pipes)
}

// Event is a session added to or removed from a Registry (Options.Observer).
type Event struct {
	ID, Owner, Name string
	Created         time.Time
	Opened          bool // false: removed
}

// Info returns a snapshot.
func (s *Session) Info() Info {
	s.mu.Lock()
	in := Info{ID: s.id, Name: s.name, Pid: s.pid, Argv: s.argv, Created: s.created,
		Cols: s.cols, Rows: s.rows, Viewers: len(s.viewers), Start: s.ring.start, End: s.ring.end,
		State: s.state, Pipes: s.pipe != nil}
	s.mu.Unlock()
	if e, ok := s.Exit(); ok {
		in.Exit = &e
	}
	return in
}

// reaped publishes the child's exit once the waiter (internal/child) has reaped it: it records the
// status, closes exited and wakes the viewers.
func (s *Session) reaped(ws unix.WaitStatus, err error) {
	switch {
	case err != nil:
		// Nothing to report: the status is unknown.
		s.opts.Logger.Warn("wait for child", "session", s.id, "pid", s.pid, "err", err)
		s.exit = ExitStatus{Code: -1}
	case ws.Signaled():
		s.exit = ExitStatus{Code: -1, Signal: ws.Signal()}
	default:
		s.exit = ExitStatus{Code: ws.ExitStatus()}
	}
	s.mu.Lock()
	close(s.exited)
	s.wakeViewersLocked()
	// A master held for an echo or by the fair share is read on: the program's tail must be
	// read before its exit is reported (no hold applies once exited is closed).
	if !s.paused || s.dropOutput {
		s.wakeReaderLocked()
	}
	// Normally the reader reaches the end of output right after the exit and that is when
	// viewers report it; when a descendant keeps the PTY open, they report it once output in
	// flight at the exit has had exitSettle to arrive.
	s.armSettleLocked()
	s.mu.Unlock()
	s.endRecordingIfDone()
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
