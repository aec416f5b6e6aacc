package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/child"
	"github.com/muxterm/muxterm/otel"
)

// children waits for every session's child with one goroutine instead of one per session
// (child.Waiter).
//
// This is the process-wide instance, every Registry's default (Options.children): one epoll
// instance and one goroutine per process. A test may give its Options a waiter of its own, to
// set its test hook or to see it go idle, without touching other tests' children.
var children child.Waiter

// spawn starts spec on a new PTY, or on pipes (Spec.Pipes). The child leads its own session and
// process group, with the PTY as its controlling terminal (a pipe session's has none). The
// session joins echo, its owner's echo-first group (echofirst.go); nil gives it a group of its
// own (a session spawned outside a registry).
func spawn(id string, spec Spec, opts *Options, echo *echoGroup, now func() time.Time) (*Session, error) {
	argv := spec.Argv
	if len(argv) == 0 {
		argv = []string{opts.Shell}
	}
	if spec.Pipes && spec.Cols == 0 && spec.Rows == 0 {
		spec.Cols, spec.Rows = 80, 24 // a nominal size: no terminal to apply it to
	}
	if err := checkSize(spec.Cols, spec.Rows); err != nil {
		return nil, err
	}
	if echo == nil {
		echo = new(echoGroup)
	}
	s := &Session{
		id: id, owner: spec.Owner, name: spec.Name, argv: append([]string(nil), argv...),
		created: now(), opts: opts, now: now,
		exited: make(chan struct{}), readerDone: make(chan struct{}),
		ring: newRing(opts.ScrollbackBytes), viewers: make(map[*Viewer]struct{}),
		cols: spec.Cols, rows: spec.Rows, testHookBeforeIngest: opts.testHookBeforeIngest,
		echo: echo,
	}
	s.unwatchedSince = s.created
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if spec.Pipes {
		s.ring = newTaggedRing(opts.ScrollbackBytes)
	} else {
		cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, 0
		if !opts.NoScreen {
			s.scr = newScreen(spec.Cols, spec.Rows, opts)
		}
	}
	cmd.Dir = spec.Dir
	if cmd.Dir == "" {
		cmd.Dir = homeDir()
	}
	if err := checkDir(cmd.Dir); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSpawn, err)
	}
	cmd.Env = childEnv(opts.Shell, opts.EnvDeny, spec.Env)
	cg, cgDir, err := newCgroup(opts, id, cmd.SysProcAttr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSpawn, err)
	}
	s.cgroup = cg
	// The recording starts before the child's terminal exists, so its first byte is recorded,
	// every earlier refusal leaves no file behind, and its file's creation (which may wait for
	// the disk) is outside the starts' lock; a later refusal discards it (discardRecording).
	if s.rec, err = startRecording(id, spec, argv, opts, s.created); err != nil {
		if cgDir != nil {
			cgDir.Close()
		}
		removeCgroup(cg)
		return nil, err
	}
	if s.rec != nil {
		opts.recordings.add(id, s.rec)
	}
	// The child's terminal or pipes are opened under the lock of every start of a child of
	// this process (child.StartWith), which returns once the child's exec closed its
	// inherited descriptors and ours of its ends are closed: no other session's child is
	// forked while they are open, so none ever holds them. closeOurs closes our own ends.
	var closeOurs func()
	err = child.StartWith(cmd, func() (closeChild func(), err error) {
		if spec.Pipes {
			p, ends, err := openPipes()
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrSpawn, err)
			}
			s.pipe = p
			// Before the child can exit: reaped wakes the readers through it (wakeReaderLocked).
			p.cond = sync.NewCond(&s.mu)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = ends[0], ends[1], ends[2]
			closeOurs = func() {
				p.stdin.Close()
				p.stdout.Close()
				p.stderr.Close()
			}
			return func() {
				for _, f := range ends {
					f.Close()
				}
			}, nil
		}
		master, tty, err := openPTY()
		if err != nil {
			return nil, fmt.Errorf("%w: open pty: %w", ErrSpawn, err)
		}
		s.ptmx, s.ptsName = master, tty.Name()
		if err := s.setSize(spec.Cols, spec.Rows); err != nil {
			master.Close()
			tty.Close()
			return nil, err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		closeOurs = func() { master.Close() }
		return func() { tty.Close() }, nil
	})
	if cgDir != nil {
		cgDir.Close()
	}
	if err != nil {
		removeCgroup(cg)
		s.discardRecording()
		if closeOurs == nil {
			return nil, err // the terminal or pipes were not opened
		}
		closeOurs()
		return nil, fmt.Errorf("%w: start %s: %w", ErrSpawn, argv[0], err)
	}
	s.pid = cmd.Process.Pid
	pidfd, err := unix.PidfdOpen(s.pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		// Without a pidfd we cannot wait without a thread; kill the child and give up.
		_ = syscall.Kill(-s.pid, syscall.SIGKILL)
		_ = cmd.Wait()
		child.Reaped(s.pid)
		closeOurs()
		removeCgroup(cg)
		s.discardRecording()
		return nil, fmt.Errorf("pidfd_open %d: %w", s.pid, err)
	}
	// session.reader lives until the reader ends, often after the kill; the kill links to it.
	_, s.readerSpan = opts.Tracer.Start(trace.ContextWithSpanContext(context.Background(), spec.Trace),
		otel.SpanSessionReader, trace.WithAttributes(attribute.String(otel.AttrSessionID, s.id),
			semconv.ProcessPID(s.pid)))
	opts.Instruments.Sessions.Add(context.Background(), 1)
	// We wait through our own pidfd; os.Process's is one more fd per session for nothing.
	_ = cmd.Process.Release()
	s.waitChild(pidfd)
	// Under s.mu: the child may already have exited, and reaped looks at readState.
	s.mu.Lock()
	if s.pipe != nil {
		s.startPipesLocked()
		s.mu.Unlock()
		return s, nil
	}
	s.readState = readArmed
	err = rawFD(s.ptmx, &s.masterFD)
	if err == nil {
		err = opts.readers.add(s)
	}
	if err != nil {
		s.readState = readNone
	}
	s.mu.Unlock()
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
		s.closePTY()
		s.readerSpan.End()
		opts.Instruments.Sessions.Add(context.Background(), -1)
		s.discardRecording()
		return nil, fmt.Errorf("%w: read master: %w", ErrSpawn, err)
	}
	return s, nil
}

// rawFD stores f's descriptor in fd without Fd(), which would make it blocking.
func rawFD(f *os.File, fd *int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(d uintptr) { *fd = int(d) })
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
	if s.pipe != nil {
		return nil // a nominal size: a pipe session has no terminal
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
