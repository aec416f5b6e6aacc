package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// Stream names the output stream a byte of a session came from. A PTY session has one
// (Stdout); a pipe session (Spec.Pipes) has two, interleaved in one ring and one offset space.
type Stream uint8

// The output streams.
const (
	Stdout Stream = 0
	Stderr Stream = 1
)

// Errors of a pipe session's stdin.
var (
	ErrStdinClosed = errors.New("stdin closed")
	ErrNoPipes     = errors.New("the session has a terminal, not pipes")
	// ErrNoPipesScreen: a pipe session has no screen to capture (no terminal draws its output).
	ErrNoPipesScreen = errors.New("a pipe session has no terminal, so no screen")
)

// pipeIO is a pipe session's standard descriptors: the read ends of the child's stdout and
// stderr and the write end of its stdin, all non-blocking and served by the runtime poller (a
// blocked read or write holds no OS thread, and Close interrupts it).
type pipeIO struct {
	stdout, stderr *os.File // read ends; closed by closePTY once both readers ended
	// stdin is the write end of the child's stdin; closed by CloseStdin (once the queued input
	// is written) or the teardown. Guarded by Session.inMu together with stdinClosing and
	// stdinClosed.
	stdin        *os.File
	stdinClosing bool // CloseStdin was called: no more Writes; close once the queue is written
	stdinClosed  bool // stdin is closed
	// paths are the /proc/PID/fd link targets of stdout and stderr ("pipe:[inode]"), by which
	// a kill finds the processes that still hold them (escapees).
	paths []string
	// cond (on Session.mu, made with the session) wakes readers that backpressure parked; open
	// counts the readers still reading (guarded by Session.mu).
	cond *sync.Cond
	open int
}

// openPipes makes the three pipes of a pipe session. It returns our ends and the child's
// (stdin's read end, stdout's and stderr's write ends), which the caller closes after the
// start. The child's ends become blocking when exec hands them over (os.File.Fd).
func openPipes() (p *pipeIO, child [3]*os.File, err error) {
	var ours [3]*os.File
	closeAll := func() {
		for _, f := range append(ours[:], child[:]...) {
			if f != nil {
				f.Close()
			}
		}
	}
	if child[0], ours[0], err = os.Pipe(); err != nil {
		closeAll()
		return nil, child, fmt.Errorf("stdin pipe: %w", err)
	}
	for i := 1; i < 3; i++ {
		if ours[i], child[i], err = os.Pipe(); err != nil {
			closeAll()
			return nil, [3]*os.File{}, fmt.Errorf("output pipe: %w", err)
		}
	}
	p = &pipeIO{stdin: ours[0], stdout: ours[1], stderr: ours[2]}
	for _, f := range []*os.File{p.stdout, p.stderr} {
		st, err := f.Stat()
		if err != nil {
			closeAll()
			return nil, [3]*os.File{}, fmt.Errorf("stat pipe: %w", err)
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			p.paths = append(p.paths, "pipe:["+strconv.FormatUint(sys.Ino, 10)+"]")
		}
	}
	return p, child, nil
}

// startPipes starts the two readers of a pipe session. s.mu must be held.
func (s *Session) startPipesLocked() {
	s.pipe.open = 2
	s.readState = readBusy
	go s.readPipe(s.pipe.stdout, Stdout)
	go s.readPipe(s.pipe.stderr, Stderr)
}

// readPipe reads one output pipe of a pipe session into the ring until it reaches its end (every
// writer closed it) or is closed. Backpressure parks it on pipe.cond, as it leaves a PTY's master
// disarmed; after the kill point it reads on and drops what it reads (ingest).
func (s *Session) readPipe(f *os.File, tag Stream) {
	// Half a batch each: the two readers may each ingest one read after the high-water mark is
	// passed, and together they must stay within the one batch the ring keeps behind a paused
	// reader (Options.KeptBehind), or a viewer at the mark would lose bytes.
	buf := make([]byte, max(s.opts.batchSize()/2, 1))
	for {
		n, err := f.Read(buf)
		if n > 0 {
			s.ingestStream(buf[:n], tag)
		}
		if err != nil {
			break
		}
		s.mu.Lock()
		for s.paused && !s.dropOutput {
			s.pipe.cond.Wait()
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.pipe.open--
	last := s.pipe.open == 0
	s.mu.Unlock()
	if last {
		// The master's end, less what a pipe session never had (a registration with the
		// readers, a handover in progress): output final, pipes closed, readerDone.
		s.endReading(io.EOF)
	}
}

// Pipes reports whether s runs on pipes (Spec.Pipes) rather than a PTY.
func (s *Session) Pipes() bool { return s.pipe != nil }

// CloseStdin closes a pipe session's stdin once the input queued before it is written, so the
// program reads the end of its input. Writes after it fail with ErrStdinClosed; a second call
// does nothing. A PTY session has no stdin to close (ErrNoPipes): its program reads the
// terminal's end-of-file character instead.
func (s *Session) CloseStdin() error {
	if s.pipe == nil {
		return fmt.Errorf("close stdin of %s: %w", s.id, ErrNoPipes)
	}
	s.mu.Lock()
	closing, reason := s.state != StateRunning, s.reason
	s.mu.Unlock()
	if closing {
		return fmt.Errorf("close stdin: %w", &ClosedError{ID: s.id, Reason: reason})
	}
	s.inMu.Lock()
	defer s.inMu.Unlock()
	s.pipe.stdinClosing = true
	if !s.inDraining {
		s.closeStdinLocked()
	}
	return nil
}

// closeStdinLocked closes the stdin pipe once. s.inMu must be held.
func (s *Session) closeStdinLocked() {
	if !s.pipe.stdinClosed {
		s.pipe.stdinClosed = true
		s.pipe.stdin.Close()
	}
}

// endStdin closes a pipe session's stdin at its teardown, whatever is queued.
func (s *Session) endStdin() {
	if s.pipe == nil {
		return
	}
	s.inMu.Lock()
	s.pipe.stdinClosing = true
	s.closeStdinLocked()
	s.inMu.Unlock()
}

// inputFile is where input goes: the PTY's master, or a pipe session's stdin.
func (s *Session) inputFile() *os.File {
	if s.pipe != nil {
		return s.pipe.stdin
	}
	return s.ptmx
}

// outputPaths are the fd link targets of the session's output, by which a kill finds the
// processes that hold it: the PTY slave's path, or a pipe session's two pipes.
func (s *Session) outputPaths() []string {
	if s.pipe != nil {
		return s.pipe.paths
	}
	return []string{s.ptsName}
}
