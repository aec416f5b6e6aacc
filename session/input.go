package session

import (
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

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
	if len(p) <= maxKeystroke && s.pipe == nil {
		s.keystroke() // a pipe session's input is a script's, not a keystroke awaiting its echo
	}
	s.inMu.Lock()
	defer s.inMu.Unlock()
	if s.pipe != nil && s.pipe.stdinClosing {
		return 0, fmt.Errorf("write %s: %w", s.id, ErrStdinClosed)
	}
	if s.inDraining {
		if len(s.inQueue)+len(p) > maxInputQueue {
			return 0, fmt.Errorf("write %s: %w", s.id, ErrInputFull)
		}
		s.inQueue = append(s.inQueue, p...)
		s.recordInput(p)
		return len(p), nil
	}
	// Recorded before it is written: a program that exits on this input can end the recording
	// before the write returns.
	s.recordInput(p)
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
	rc, err := s.inputFile().SyscallConn()
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
			if s.pipe != nil && s.pipe.stdinClosing {
				s.closeStdinLocked() // CloseStdin came while input was queued
			}
			s.inMu.Unlock()
			return
		}
		s.inMu.Unlock()
		if _, err := s.inputFile().Write(chunk); err != nil {
			s.inMu.Lock()
			s.inQueue, s.inDraining = nil, false
			s.inMu.Unlock()
			return
		}
	}
}

var _ io.Writer = (*Session)(nil)
