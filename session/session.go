package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/cgroup"
	"github.com/muxterm/muxterm/otel"
)

// Errors a caller can match with errors.Is.
var (
	ErrUnknownSession = errors.New("unknown session")
	ErrSessionClosed  = errors.New("session closed")
	ErrViewerClosed   = errors.New("viewer closed")
	ErrInputFull      = errors.New("input queue full")
	ErrBadOffset      = errors.New("offset beyond end of output")
	ErrBadSize        = errors.New("terminal size out of range")
	ErrShuttingDown   = errors.New("registry shutting down")
	ErrTooMany        = errors.New("too many sessions")
	ErrSpawn          = errors.New("spawn failed")
)

// ClosedError says a session is closing or gone, and why. It matches ErrSessionClosed.
type ClosedError struct {
	ID     string
	Reason Reason
}

func (e *ClosedError) Error() string {
	return fmt.Sprintf("session %s closed (%s)", e.ID, e.Reason)
}

// Is makes errors.Is(err, ErrSessionClosed) hold.
func (e *ClosedError) Is(target error) bool { return target == ErrSessionClosed }

// closedErr maps the errors of a master that the reader already closed (the process and every
// holder of the PTY are gone) to a ClosedError; other errors pass through.
func (s *Session) closedErr(err error) error {
	if errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EIO) {
		s.mu.Lock()
		reason := s.reason
		s.mu.Unlock()
		if reason == "" {
			reason = ReasonExited
		}
		return &ClosedError{ID: s.id, Reason: reason}
	}
	return err
}

// exitSettle is how long after the exit a viewer waits for output still in flight before it
// reports the exit, when a descendant keeps the PTY open (otherwise the end of output comes
// first and is what it waits for).
const exitSettle = 50 * time.Millisecond

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

// Limits on terminal sizes accepted by Resize and Spawn, checked before any 16-bit conversion.
const (
	MaxCols = 1000
	MaxRows = 1000
)

const (
	defaultScrollback = 1 << 20
	defaultKillGrace  = 250 * time.Millisecond
	readChunk         = 32 << 10
	maxInputQueue     = 64 << 10
)

// InputQueueBytes is the input a session queues for a program that is not reading it; a write
// beyond it is refused whole (ErrInputFull).
const InputQueueBytes = maxInputQueue

// Options configure sessions. The zero value is usable: every field documents its default.
type Options struct {
	// Shell runs when a Spec has no Argv. Default: $SHELL, else /bin/sh.
	Shell string
	// ScrollbackBytes bounds each session's ring. Default: 1 MiB.
	ScrollbackBytes int
	// KillGrace is the time Kill waits after HUP and after TERM before escalating.
	// Default: 250ms.
	KillGrace time.Duration
	// SpareEscapees turns off the escapee policy: when false (the default), Kill also signals
	// processes outside the session's process group that still hold its PTY.
	SpareEscapees bool
	// Cgroups, when set, gives each session a cgroup of its own under this gateway's directory:
	// the child is cloned into it, and a kill ends with cgroup.kill and an empty cgroup.procs
	// (so SpareEscapees spares nothing at the end). Nil: cgroups are off.
	Cgroups *cgroup.Tree
	// HighWaterBytes: when every attached read-write viewer (and every resume hold) is further
	// behind than this, the reader stops reading the PTY. Default: ScrollbackBytes/2.
	// LowWaterBytes: it resumes below this. Default: HighWaterBytes/2.
	HighWaterBytes, LowWaterBytes int
	// ResumeHold: for this long after a read-write viewer is lost (Viewer.CloseHolding: its
	// socket ended), backpressure also follows the offset its client acknowledged, as if it
	// were still attached and reading nothing. A client
	// that lost its socket and reattaches within ResumeHold from what it consumed misses no
	// byte, however fast the program prints; after it the ring overwrites as usual. A viewer
	// that is attached and reading still decides alone (backpressure follows the closest
	// viewer). 0 turns it off.
	ResumeHold time.Duration
	// WindowSize is how the PTY's size follows the read-write viewers' sizes (size.go).
	// Default: WindowLatest.
	WindowSize WindowSize
	// EnvDeny are names (FOO) and prefix patterns (FOO_*) of the gateway's environment
	// variables that the sessions do not inherit, besides the gateway's own (see childEnv).
	EnvDeny []string
	// Logger receives diagnostics. Default: slog.Default().
	Logger *slog.Logger
	// Observer, if set, is told of every session the registry adds (Event.Opened) and removes
	// (its close began), in that order for each id; the cluster publishes its directory from
	// it. It is called with Registry.mu held: it must not block or call into the registry.
	Observer func(Event)
	// Tracer receives the session.kill and session.reader spans. Default: a no-op tracer.
	Tracer trace.Tracer
	// Instruments receive the session metrics. Default: none.
	Instruments *otel.Instruments

	// testHookBeforeIngest is copied into each session before its reader starts (tests only;
	// nil in production).
	testHookBeforeIngest func([]byte)
}

// batchSize is the most one read batch (Session.readBatch) takes: small enough that a batch read
// just under the high watermark still fits in the ring, since backpressure must pause the
// program before the ring drops unread bytes. o has its defaults.
func (o Options) batchSize() int {
	return max(min(readChunk, o.ScrollbackBytes-o.HighWaterBytes), min(4096, readChunk))
}

// KeptBehind is how far behind a paused reader's end the ring is sure to still hold bytes,
// beyond the closest viewer's (or resume hold's) offset: scrollback − high watermark − one read
// batch. A channel whose flow-control window is larger can lose bytes in flight when its socket
// drops, which the resume hold then cannot bring back.
func (o Options) KeptBehind() int {
	o = o.withDefaults()
	return max(o.ScrollbackBytes-o.HighWaterBytes-o.batchSize(), 0)
}

func (o Options) withDefaults() Options {
	if o.Shell == "" {
		o.Shell = os.Getenv("SHELL")
		if o.Shell == "" {
			o.Shell = "/bin/sh"
		}
	}
	if o.ScrollbackBytes <= 0 {
		o.ScrollbackBytes = defaultScrollback
	}
	if o.KillGrace <= 0 {
		o.KillGrace = defaultKillGrace
	}
	if o.HighWaterBytes <= 0 || o.HighWaterBytes > o.ScrollbackBytes {
		o.HighWaterBytes = o.ScrollbackBytes / 2
	}
	if o.LowWaterBytes <= 0 || o.LowWaterBytes >= o.HighWaterBytes {
		o.LowWaterBytes = o.HighWaterBytes / 2
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Tracer == nil {
		o.Tracer = otel.Noop().Tracer
	}
	if o.Instruments == nil {
		o.Instruments = otel.Noop().Instruments
	}
	return o
}

// Spec says what to run.
type Spec struct {
	Argv  []string // default: [Options.Shell]
	Dir   string   // default: $HOME, else /
	Env   []string // extra KEY=VALUE pairs, already validated by the caller
	Cols  int      // 1..MaxCols
	Rows  int      // 1..MaxRows
	Name  string
	Owner string // the principal that owns the session
	// Trace, when valid, is the parent of the session.reader span (the session.open span).
	Trace trace.SpanContext
}

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

// Session is one process on a PTY. All methods are safe for concurrent use.
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

	// exited is closed by reaped once the child is reaped. exit is written before that;
	// read exit only after <-exited.
	exited chan struct{}
	exit   ExitStatus
	// readerDone is closed once reading the master has ended and ptmx is closed.
	readerDone chan struct{}
	// readToken is the master's registration with readers; written by readers.add in spawn.
	readToken uint64

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
	holds    []*hold
	dropped  int64         // bytes read after the kill point and dropped
	killDone chan struct{} // closed when teardown finished; non-nil once closing began
	tearing  bool          // a Teardown call is running or ran
	killRes  *KillResult   // allocated with killDone; *killRes is valid after <-killDone

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
		State: s.state}
	s.mu.Unlock()
	if e, ok := s.Exit(); ok {
		in.Exit = &e
	}
	return in
}

// spawn starts spec on a new PTY. The child leads its own session and process group, with the
// PTY as its controlling terminal.
func spawn(id string, spec Spec, opts *Options, now func() time.Time) (*Session, error) {
	argv := spec.Argv
	if len(argv) == 0 {
		argv = []string{opts.Shell}
	}
	if err := checkSize(spec.Cols, spec.Rows); err != nil {
		return nil, err
	}
	master, tty, err := openPTY()
	if err != nil {
		return nil, fmt.Errorf("%w: open pty: %w", ErrSpawn, err)
	}
	s := &Session{
		id: id, owner: spec.Owner, name: spec.Name, argv: append([]string(nil), argv...),
		created: now(), opts: opts, ptmx: master, ptsName: tty.Name(), now: now,
		exited: make(chan struct{}), readerDone: make(chan struct{}),
		ring: newRing(opts.ScrollbackBytes), viewers: make(map[*Viewer]struct{}),
		cols: spec.Cols, rows: spec.Rows, testHookBeforeIngest: opts.testHookBeforeIngest,
	}
	s.unwatchedSince = s.created
	if err := s.setSize(spec.Cols, spec.Rows); err != nil {
		master.Close()
		tty.Close()
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = spec.Dir
	if cmd.Dir == "" {
		cmd.Dir = homeDir()
	}
	if err := checkDir(cmd.Dir); err != nil {
		master.Close()
		tty.Close()
		return nil, fmt.Errorf("%w: %w", ErrSpawn, err)
	}
	cmd.Env = childEnv(opts.Shell, opts.EnvDeny, spec.Env)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	cg, cgDir, err := newCgroup(opts, id, cmd.SysProcAttr)
	if err != nil {
		master.Close()
		tty.Close()
		return nil, fmt.Errorf("%w: %w", ErrSpawn, err)
	}
	s.cgroup = cg
	err = orphans.start(cmd)
	if cgDir != nil {
		cgDir.Close()
	}
	if err != nil {
		master.Close()
		tty.Close()
		removeCgroup(cg)
		return nil, fmt.Errorf("%w: start %s: %w", ErrSpawn, argv[0], err)
	}
	// Our copy of the slave must go, or the master never sees the hang-up.
	tty.Close()
	s.pid = cmd.Process.Pid
	pidfd, err := unix.PidfdOpen(s.pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		// Without a pidfd we cannot wait without a thread; kill the child and give up.
		_ = syscall.Kill(-s.pid, syscall.SIGKILL)
		_ = cmd.Wait()
		orphans.reaped(s.pid)
		master.Close()
		removeCgroup(cg)
		return nil, fmt.Errorf("pidfd_open %d: %w", s.pid, err)
	}
	// session.reader lives until the reader ends, often after the kill; the kill links to it.
	_, s.readerSpan = opts.Tracer.Start(trace.ContextWithSpanContext(context.Background(), spec.Trace),
		otel.SpanSessionReader, trace.WithAttributes(attribute.String(otel.AttrSessionID, s.id),
			semconv.ProcessPID(s.pid)))
	opts.Instruments.Sessions.Add(context.Background(), 1)
	// We wait through our own pidfd; os.Process's is one more fd per session for nothing.
	_ = cmd.Process.Release()
	if err := children.add(s.pid, pidfd, s.reaped); err != nil {
		// Correct, if costlier: a goroutine holding a thread in a blocking wait.
		opts.Logger.Warn("child waiter", "session", s.id, "pid", s.pid, "err", err)
		unix.Close(pidfd)
		blockingWait(&waitEntry{pid: s.pid, reaped: s.reaped})
	}
	s.readState = readArmed
	err = rawFD(s.ptmx, &s.masterFD)
	if err == nil {
		err = readers.add(s)
	}
	if err != nil {
		// The child is the waiter's to reap; without a reader its output would go nowhere.
		_ = syscall.Kill(-s.pid, syscall.SIGKILL)
		if cg != "" {
			_ = cg.Kill()
			go func() {
				<-s.exited
				removeCgroup(cg)
			}()
		}
		s.readState = readNone
		s.closePTY()
		s.readerSpan.End()
		opts.Instruments.Sessions.Add(context.Background(), -1)
		return nil, fmt.Errorf("%w: read master: %w", ErrSpawn, err)
	}
	return s, nil
}

// openPTY opens a PTY pair and returns a master that is non-blocking: the readers read it until
// it would block, so a blocking master would hang one of the shared workers, and the input loop
// waits for it to take input through the runtime poller without holding an OS thread.
// creack/pty's Open hands back a blocking master (its ioctls call Fd), so the master is
// duplicated, made non-blocking, and wrapped anew.
func openPTY() (master, tty *os.File, err error) {
	p, t, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	rc, err := p.SyscallConn()
	if err != nil {
		p.Close()
		t.Close()
		return nil, nil, err
	}
	dup := -1
	var dupErr error
	if err := rc.Control(func(fd uintptr) {
		dup, dupErr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		dupErr = err
	}
	p.Close()
	if dupErr != nil {
		t.Close()
		return nil, nil, fmt.Errorf("dup master: %w", dupErr)
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		t.Close()
		return nil, nil, fmt.Errorf("set master non-blocking: %w", err)
	}
	return os.NewFile(uintptr(dup), "/dev/ptmx"), t, nil
}

// checkDir says which directory is wrong, before a start whose failed chdir would only say
// "fork/exec /bin/sh: no such file or directory".
func checkDir(dir string) error {
	st, err := os.Stat(dir)
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		return fmt.Errorf("cwd %s: %w", dir, pe.Err)
	case err != nil:
		return fmt.Errorf("cwd %s: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("cwd %s: not a directory", dir)
	}
	return nil
}

// homeDir is the default working directory: the gateway's $HOME (os.UserHomeDir) when it is a
// directory, else /.
func homeDir() string {
	if h, err := os.UserHomeDir(); err == nil {
		if st, err := os.Stat(h); err == nil && st.IsDir() {
			return h
		}
	}
	return "/"
}

// ownEnv are the variables of the gateway's environment that are the gateway's own, or describe
// the gateway's process or its terminal rather than the user's environment, so a session never
// inherits them: muxterm's configuration (the token among it), the telemetry exporters',
// systemd's notification and socket-activation hand-offs, and the outer terminal's size and
// identity (a program would trust COLUMNS/LINES over the PTY's size, and TMUX or TERM_PROGRAM
// over TERM). A trailing * matches a prefix.
var ownEnv = []string{"MUXTERM_*", "OTEL_*", "NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS",
	"LISTEN_FDNAMES", "COLUMNS", "LINES", "TERM", "COLORTERM", "TERM_PROGRAM",
	"TERM_PROGRAM_VERSION", "TMUX", "TMUX_PANE", "STY", "WINDOW", "WINDOWID", "VTE_VERSION", "SHELL"}

// envMatch reports whether the variable name matches pattern: a name, or a prefix ending in *.
func envMatch(pattern, name string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, prefix)
	}
	return pattern == name
}

// childEnv is the gateway's environment without its own variables (ownEnv) and those deny
// matches, then SHELL and the terminal type muxterm sets, then extra (the client's, which win).
func childEnv(shell string, deny, extra []string) []string {
	env := make([]string, 0, len(os.Environ())+3+len(extra))
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		denied := func(p string) bool { return envMatch(p, k) }
		if slices.ContainsFunc(ownEnv, denied) || slices.ContainsFunc(deny, denied) {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "SHELL="+shell, "TERM=xterm-256color", "COLORTERM=truecolor")
	return append(env, extra...)
}

// CheckEnvPattern validates one EnvDeny entry: a variable name, or a prefix of one followed
// by *.
func CheckEnvPattern(p string) error {
	name := strings.TrimSuffix(p, "*")
	if name == "" && p != "*" {
		return fmt.Errorf("env pattern %q: empty", p)
	}
	for i, r := range name {
		if !(r == '_' || 'A' <= r && r <= 'Z' || 'a' <= r && r <= 'z' || i > 0 && '0' <= r && r <= '9') {
			return fmt.Errorf("env pattern %q: want NAME or PREFIX* (letters, digits, _)", p)
		}
	}
	return nil
}

func checkSize(cols, rows int) error {
	if cols < 1 || cols > MaxCols || rows < 1 || rows > MaxRows {
		return fmt.Errorf("%w: %dx%d (1..%d x 1..%d)", ErrBadSize, cols, rows, MaxCols, MaxRows)
	}
	return nil
}

// setSize applies a window size through SyscallConn().Control. It never calls Fd(), which
// would turn the master blocking (see openPTY).
func (s *Session) setSize(cols, rows int) error {
	if err := checkSize(cols, rows); err != nil {
		return err
	}
	rc, err := s.ptmx.SyscallConn()
	if err != nil {
		return fmt.Errorf("resize: %w", err)
	}
	ws := &unix.Winsize{Col: uint16(cols), Row: uint16(rows)}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws)
	}); err != nil {
		return fmt.Errorf("resize: %w", err)
	}
	if ioErr != nil {
		return fmt.Errorf("resize: %w", ioErr)
	}
	return nil
}

// Resize sets the terminal size directly, whatever the viewers' sizes, and returns the size
// applied. The window-size policy applies again at the next change among the viewers (one
// declares a size, types under WindowLatest, or leaves); the protocol's resize is
// Viewer.Resize.
func (s *Session) Resize(cols, rows int) (int, int, error) {
	s.resizeMu.Lock()
	defer s.resizeMu.Unlock()
	size, err := s.setSizeLocked(Size{cols, rows})
	if err != nil {
		return 0, 0, err
	}
	return size.Cols, size.Rows, nil
}

// Signal sends sig to the PTY's foreground process group (as the terminal's keys would), or to
// the session's process group when the foreground group cannot be read.
func (s *Session) Signal(sig syscall.Signal) error {
	if _, done := s.Exit(); done {
		return fmt.Errorf("signal: %w", &ClosedError{ID: s.id, Reason: ReasonExited})
	}
	pgrp := s.pid
	if rc, err := s.ptmx.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			if g, err := unix.IoctlGetInt(int(fd), unix.TIOCGPGRP); err == nil && g > 0 {
				pgrp = g
			}
		})
	}
	if err := syscall.Kill(-pgrp, sig); err != nil {
		return fmt.Errorf("signal %s: %w", s.id, err)
	}
	return nil
}

// reaped publishes the child's exit once the waiter (waiter.go) has reaped it: it records the
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
	// Normally the reader reaches the end of output right after the exit and that is when
	// viewers report it; when a descendant keeps the PTY open, they report it once output in
	// flight at the exit has had exitSettle to arrive.
	s.armSettleLocked()
	s.mu.Unlock()
}

// readState is who has a session's master; see Session.readState.
type readState uint8

const (
	readNone   readState = iota // no reader (tests' sessions without a process)
	readArmed                   // registered and armed: the next readable event goes to a worker
	readBusy                    // a worker reads it (or ends its reading)
	readParked                  // disarmed while backpressure holds; wakeReaderLocked re-arms it
	readDone                    // reading ended, the master is closed
	readHanded                  // unregistered for an upgrade in place; the master stays open
)

// readReady is a readers worker's turn at s's master, which was reported readable. It reads in
// batches (a PTY read returns at most about a page, so one ingest and one wake of each viewer's
// writer carry up to a batch), appending each batch to the ring, until the master would block,
// backpressure holds, or maxBatchesPerTurn batches were read; then it re-arms the master, or
// leaves it disarmed while backpressure holds. It never writes to a viewer. A read that fails
// (EIO once every slave fd is closed) or reaches the end ends the reading.
func (s *Session) readReady(buf []byte) {
	s.mu.Lock()
	if s.readState != readArmed {
		// Not armed: the report was taken just before failReading or a failed re-arm claimed
		// the master (busy), or before its reading ended (done). Not ours to read.
		s.mu.Unlock()
		return
	}
	s.readState = readBusy
	s.mu.Unlock()
	buf = buf[:s.opts.batchSize()]
	// A master that keeps filling gets a few batches per turn, one ingest each, before it goes
	// back to the instance (behind the other ready masters).
	for range maxBatchesPerTurn {
		n, err := s.readBatch(buf)
		if n > 0 {
			s.ingest(buf[:n])
		}
		if err != nil {
			s.endReading(err)
			return
		}
		if n < len(buf) {
			break // drained for now
		}
		s.mu.Lock()
		paused := s.paused && !s.dropOutput || s.handingOver
		s.mu.Unlock()
		if paused {
			break
		}
	}
	s.mu.Lock()
	if s.handingOver {
		s.stopReadingLocked() // handover.go: not re-armed; the next image reads on
		s.mu.Unlock()
		return
	}
	if s.paused && !s.dropOutput {
		s.readState = readParked
		s.mu.Unlock()
		return
	}
	s.readState = readArmed
	err := readers.rearm(s)
	if err != nil {
		s.readState = readBusy
	}
	s.mu.Unlock()
	if err != nil {
		s.endReading(err)
	}
}

// maxBatchesPerTurn bounds how much one master is read before the others ready with it: 4
// batches (at most 128 KiB) before the master goes back behind them. Against one batch per turn
// it made no measurable difference in CPU per GiB (docs/benchmarks.md); it keeps a streaming
// master from paying the round trip through the epoll instance every 32 KiB.
const maxBatchesPerTurn = 4

// readBatch reads the master until it would block or buf is full. A read that fails (EIO once
// every slave fd is closed) or reports the end returns an error, unless bytes were read before
// it: the error then comes back on the next turn.
func (s *Session) readBatch(buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := unix.Read(s.masterFD, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return n, nil
		}
		if err == nil && m <= 0 {
			err = io.EOF
		}
		if err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, fmt.Errorf("read master: %w", err)
		}
		n += m
	}
	return n, nil
}

// wakeReaderLocked re-arms a master parked by backpressure. s.mu must be held.
func (s *Session) wakeReaderLocked() {
	if s.readState != readParked {
		return // armed already, or a worker reads it and sees paused is over
	}
	s.readState = readArmed
	if err := readers.rearm(s); err != nil {
		s.readState = readBusy
		go s.endReading(err) // it takes s.mu
	}
}

// failReading ends s's reading after the readers' poller failed, unless a worker reads the
// master right now (its re-arm then fails, and it ends the reading itself).
func (s *Session) failReading(err error) {
	s.mu.Lock()
	mine := s.readState == readArmed || s.readState == readParked
	if mine {
		s.readState = readBusy
	}
	s.mu.Unlock()
	if mine {
		s.endReading(err)
	}
}

// endReading ends the reading of the master: it unregisters and closes it, ends the output and
// closes readerDone. Only the goroutine that set readBusy (or the one it hands off to) calls it,
// once.
func (s *Session) endReading(err error) {
	if !errors.Is(err, unix.EIO) && !errors.Is(err, io.EOF) {
		// Not the PTY hanging up: the session's output ends early, which an operator should see.
		s.opts.Logger.Warn("pty reading ended", "session", s.id, "err", err)
	}
	readers.remove(s)
	s.finishOutput()
	s.closePTY()
	s.readerSpan.AddEvent(otel.EventReaderEnded)
	s.readerSpan.End()
	s.mu.Lock()
	s.readState = readDone
	if s.handingOver {
		s.markReadStoppedLocked()
	}
	s.mu.Unlock()
	close(s.readerDone)
}

func (s *Session) closePTY() {
	s.ptyMu.Lock()
	defer s.ptyMu.Unlock()
	if !s.ptmxClosed {
		s.ptmxClosed = true
		s.ptmx.Close()
	}
}

// ingest adds a chunk to the ring, unless the kill point has passed. The check and the append
// are under the same lock as the kill's snapshot of the final offset, so a chunk read before the
// kill but ingested after it is dropped.
func (s *Session) ingest(p []byte) {
	if h := s.testHookBeforeIngest; h != nil {
		h(p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropOutput {
		s.dropped += int64(len(p))
		return
	}
	s.ring.append(p)
	s.opts.Instruments.BytesOut.Add(context.Background(), int64(len(p)))
	s.wakeViewersLocked()
	if !s.paused && s.minLagLocked() > int64(s.opts.HighWaterBytes) {
		s.paused = true
		s.pausedAt = s.now()
	}
}

func (s *Session) finishOutput() {
	s.mu.Lock()
	s.outputFinal = true
	s.wakeViewersLocked()
	s.mu.Unlock()
}

// minLagLocked is how far the closest viewer that counts for backpressure is behind the end.
// s.mu must be held. Passive (read-only) viewers do not count: they fall behind and get a gap
// instead of holding the program back. Each resume hold counts as a viewer at its offset while
// the ring still has that offset (one that another viewer let the ring overwrite holds nothing
// any more). It returns -1 when nothing counts.
func (s *Session) minLagLocked() int64 {
	lag := int64(-1)
	for _, h := range s.holds {
		if l := s.ring.end - h.from; h.from >= s.ring.start && (lag < 0 || l < lag) {
			lag = l
		}
	}
	for v := range s.viewers {
		if v.passive {
			continue
		}
		if l := s.ring.end - v.next; lag < 0 || l < lag {
			lag = l
		}
	}
	return lag
}

// maxHolds bounds a session's resume holds (one per read-write channel lost with its socket).
const maxHolds = 64

// hold is one resume hold: backpressure follows offset from until timer removes it. The lost
// viewer had been handed bytes up to upTo; its client resumes somewhere in [from, upTo].
type hold struct {
	from, upTo int64
	until      time.Time // when timer fires, for a handover (handover.go)
	timer      *time.Timer
}

// holdLocked keeps backpressure on offset from (the oldest offset a lost read-write viewer's
// client may resume from; it was handed bytes up to upTo) for ResumeHold. s.mu must be held.
func (s *Session) holdLocked(from, upTo int64) {
	d := s.opts.ResumeHold
	if d <= 0 || s.state != StateRunning {
		return
	}
	s.dropHoldsLocked(func(h *hold) bool { return h.from < s.ring.start }) // dead: overwritten
	if len(s.holds) >= maxHolds {
		// A client dropping sockets in a loop: keep the newest holds, each minLagLocked's
		// walk short.
		oldest := s.holds[0]
		s.dropHoldsLocked(func(h *hold) bool { return h == oldest })
	}
	h := &hold{from: from, upTo: upTo, until: s.now().Add(d)}
	s.holds = append(s.holds, h)
	h.timer = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.holds = slices.DeleteFunc(s.holds, func(x *hold) bool { return x == h })
		s.maybeResumeLocked()
	})
}

// takeOverHoldLocked lets a read-write viewer starting at offset take over the resume hold it
// most likely comes back for: the narrowest one whose range [from, upTo] (what the lost client
// acknowledged, what it had been sent) contains offset. Other holds stay: they may be another
// lost client's. s.mu must be held.
func (s *Session) takeOverHoldLocked(offset int64) {
	var best *hold
	for _, h := range s.holds {
		if h.from <= offset && offset <= h.upTo && (best == nil || h.upTo-h.from < best.upTo-best.from) {
			best = h
		}
	}
	if best != nil {
		s.dropHoldsLocked(func(h *hold) bool { return h == best })
	}
}

// dropHoldsLocked ends the resume holds that match (all of them with nil). s.mu must be held.
func (s *Session) dropHoldsLocked(match func(*hold) bool) {
	s.holds = slices.DeleteFunc(s.holds, func(h *hold) bool {
		if match != nil && !match(h) {
			return false
		}
		h.timer.Stop()
		return true
	})
}

// maybeResumeLocked lifts backpressure when nothing counts for it any more (no read-write
// viewer, no resume hold) or the closest one caught up below the low watermark. s.mu must be
// held.
func (s *Session) maybeResumeLocked() {
	if !s.paused {
		return
	}
	if s.dropOutput || s.minLagLocked() < int64(s.opts.LowWaterBytes) {
		s.paused = false
		s.opts.Instruments.PauseDuration.Add(context.Background(), s.now().Sub(s.pausedAt).Seconds())
		s.wakeReaderLocked()
		if isClosed(s.exited) {
			// The tail the program printed before exiting may still be in the PTY: give the
			// resumed reader exitSettle to take it in before viewers report the exit.
			s.armSettleLocked()
		}
	}
}

func (s *Session) wakeViewersLocked() {
	for v := range s.viewers {
		v.wake()
	}
}

// Write queues input for the PTY without blocking the caller. What the PTY cannot take at once
// is written by an inputLoop goroutine; beyond maxInputQueue bytes waiting, Write refuses the
// whole of p with ErrInputFull. A p longer than maxInputQueue is always refused: it could not
// be queued whole if the PTY took none of it.
func (s *Session) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(p) > maxInputQueue {
		return 0, fmt.Errorf("write %s: %w (%d bytes)", s.id, ErrInputFull, len(p))
	}
	s.mu.Lock()
	closing, reason := s.state != StateRunning, s.reason
	s.mu.Unlock()
	if closing {
		return 0, fmt.Errorf("write: %w", &ClosedError{ID: s.id, Reason: reason})
	}
	s.inMu.Lock()
	defer s.inMu.Unlock()
	if s.inDraining {
		if len(s.inQueue)+len(p) > maxInputQueue {
			return 0, fmt.Errorf("write %s: %w", s.id, ErrInputFull)
		}
		s.inQueue = append(s.inQueue, p...)
		return len(p), nil
	}
	n, err := s.writeNow(p)
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", s.id, s.closedErr(err))
	}
	if n < len(p) {
		s.inQueue = append(s.inQueue[:0], p[n:]...)
		s.inDraining = true
		s.wg.Add(1)
		go s.inputLoop()
	}
	return len(p), nil
}

// writeNow writes what the PTY takes without waiting.
func (s *Session) writeNow(p []byte) (int, error) {
	rc, err := s.ptmx.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			m, err := unix.Write(int(fd), p[n:])
			if m > 0 {
				n += m
			}
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				if err != unix.EAGAIN {
					werr = err
				}
				break
			}
		}
		return true
	}); err != nil {
		return n, err
	}
	return n, werr
}

// inputLoop writes queued input as the PTY accepts it and ends when the queue is empty or the
// PTY is closed. At most one runs per session (inDraining).
func (s *Session) inputLoop() {
	defer s.wg.Done()
	for {
		s.inMu.Lock()
		chunk := s.inQueue
		s.inQueue = nil
		if len(chunk) == 0 {
			s.inDraining = false
			s.inMu.Unlock()
			return
		}
		s.inMu.Unlock()
		if _, err := s.ptmx.Write(chunk); err != nil {
			s.inMu.Lock()
			s.inQueue, s.inDraining = nil, false
			s.inMu.Unlock()
			return
		}
	}
}

var _ io.Writer = (*Session)(nil)

// armSettleLocked (re)starts the settle: exitSettle from now, viewers may report the exit. A
// timer armed before is superseded. s.mu must be held.
func (s *Session) armSettleLocked() {
	s.exitSettled = false
	s.settleGen++
	gen := s.settleGen
	time.AfterFunc(exitSettle, func() { s.settleExit(gen) })
}

// settleExit runs exitSettle after armSettleLocked armed timer gen and, unless a later timer
// superseded it, lets viewers report the exit.
func (s *Session) settleExit(gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.settleGen {
		return
	}
	s.exitSettled = true
	s.wakeViewersLocked()
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
