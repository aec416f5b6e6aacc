package session

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/muxterm/muxterm/internal/cgroup"
	"github.com/muxterm/muxterm/internal/child"
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
	ErrNoScreen       = errors.New("screens are off")
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
	// EchoHold: after a keystroke (input of at most 64 bytes) the readers hold the output of
	// the other sessions of the same owner until the keystroke's echo is read by a viewer, for
	// at most this long (echofirst.go). Default: DefaultEchoHold (2 ms); negative: never.
	EchoHold time.Duration
	// EnvDeny are names (FOO) and prefix patterns (FOO_*) of the gateway's environment
	// variables that the sessions do not inherit, besides the gateway's own (see childEnv).
	EnvDeny []string
	// NoScreen turns the sessions' screens off (screen.go): no terminal model, attaches replay
	// raw bytes only, Capture fails with ErrNoScreen. Default: every session has a screen.
	NoScreen bool
	// ScreenScrollback is how many lines a screen keeps above its rows, and paints above them
	// on an attach. Default: none (0).
	ScreenScrollback int
	// Record says which sessions are recorded, and where (record.go). Default: none.
	Record RecordOptions
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

	// readers reads the sessions' masters and children waits for their children. Default: the
	// process-wide ones (readers.go, spawn.go), shared by every registry. Tests set their own
	// to own their hooks and their counts (ownPollers).
	readers  *readers
	children *child.Waiter
	// feeder catches lagging screens up. Default: the process-wide one (screen.go).
	feeder *screenFeeder
	// recordings are the recordings still being written, and their ends under way
	// (endRecording), which Registry.Shutdown waits for. Default: one per registry
	// (withDefaults).
	recordings *recordings

	// testHookBeforeIngest is copied into each session before its reader starts (tests only;
	// nil in production).
	testHookBeforeIngest func([]byte)
	// testRecordWriter, when set, is where every recording writes instead of a file of
	// Record.Dir (a pipe nobody reads stands in for a stalled disk; tests only).
	testRecordWriter io.Writer
	// testHookAfterTurn runs in the reader at the end of each turn that did not end the
	// reading, with the bytes it read and whether it read all maxBatchesPerTurn batches (tests
	// only; nil in production).
	testHookAfterTurn func(s *Session, read int, full bool)
	// testHookBeforePaint runs in Registry.AttachWith between the subscription and the paint,
	// holding only the screen's lock (tests only; nil in production).
	testHookBeforePaint func(s *Session)
	// testHookOutsideHolders runs in a cgroup kill's end with how many processes outside the
	// emptied cgroup the scan found holding the PTY, before they are checked again (tests only;
	// nil in production).
	testHookOutsideHolders func(s *Session, n int)
	// testHookRecordingEnd runs on a recording's end goroutine before it writes what is queued
	// (the exit marker last) and closes the file (tests only; nil in production).
	testHookRecordingEnd func(s *Session)
	// testHookRecordingSized runs in a listing or a read of recording id once its file's size
	// is read (tests only; nil in production).
	testHookRecordingSized func(id string)
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
	if o.EchoHold == 0 {
		o.EchoHold = DefaultEchoHold
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
	if o.readers == nil {
		o.readers = defaultReaders
	}
	if o.children == nil {
		o.children = &children
	}
	if o.feeder == nil {
		o.feeder = &feeder
	}
	if o.recordings == nil {
		o.recordings = new(recordings)
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
	// Record asks for a recording of the session (Options.Record.Dir must be set).
	Record bool
	// Pipes runs the program without a terminal: its stdin, stdout and stderr are pipes
	// (pipe.go), stderr is a stream of its own (Stderr), and the session has no screen. Cols and
	// Rows may then be 0 (a nominal 80×24).
	Pipes bool
}
