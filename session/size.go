package session

import (
	"fmt"
)

// WindowSize is how a session's terminal size follows its read-write viewers, as tmux's
// window-size option does. Each read-write viewer has its own size (the one it opened the
// session with, attached with, or last resized to); read-only (passive) viewers have none.
type WindowSize uint8

const (
	// WindowLatest: the size of the read-write viewer that last typed or declared a size
	// (open, attach with a size, resize). The default.
	WindowLatest WindowSize = iota
	// WindowSmallest: per dimension, the smallest size among the read-write viewers that
	// declared one.
	WindowSmallest
	// WindowLargest: per dimension, the largest.
	WindowLargest
)

// WindowSizes are the policies' names, as --window-size spells them.
var WindowSizes = []string{"latest", "smallest", "largest"}

func (w WindowSize) String() string {
	if int(w) < len(WindowSizes) {
		return WindowSizes[w]
	}
	return fmt.Sprintf("WindowSize(%d)", int(w))
}

// ParseWindowSize parses "latest", "smallest" or "largest".
func ParseWindowSize(name string) (WindowSize, error) {
	for i, n := range WindowSizes {
		if n == name {
			return WindowSize(i), nil
		}
	}
	return 0, fmt.Errorf("window size %q: want latest, smallest or largest", name)
}

// Size is a terminal size.
type Size struct {
	Cols, Rows int
}

// Size returns the size applied to the PTY and its generation, which grows by one each time
// the applied size changes.
func (s *Session) Size() (Size, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Size{s.cols, s.rows}, s.sizeGen.Load()
}

// SizeGen returns the generation of the applied size without taking the session lock: a
// writer compares it with the generation it last reported to learn of a change cheaply.
func (s *Session) SizeGen() uint64 { return s.sizeGen.Load() }

// Resize declares v's own size and applies the session's size under the window-size policy.
// It returns the size applied, which may differ from the one asked (another viewer is smaller
// under smallest, say). A passive viewer never sizes the session: its Resize changes nothing
// and returns the current size.
func (v *Viewer) Resize(cols, rows int) (Size, error) {
	s := v.s
	if err := checkSize(cols, rows); err != nil {
		return Size{}, fmt.Errorf("resize %s: %w", s.id, err)
	}
	s.mu.Lock()
	if v.closed {
		s.mu.Unlock()
		return Size{}, ErrViewerClosed
	}
	if v.passive {
		cur := Size{s.cols, s.rows}
		s.mu.Unlock()
		return cur, nil
	}
	v.size = Size{cols, rows}
	s.useLocked(v)
	s.mu.Unlock()
	return s.applySize()
}

// Write is Session.Write on behalf of v: under WindowLatest a read-write viewer that types
// becomes the latest, and the session takes its size (before its input is written) if it had
// another.
func (v *Viewer) Write(p []byte) (int, error) {
	s := v.s
	if s.opts.WindowSize == WindowLatest && !v.passive && len(p) > 0 {
		s.mu.Lock()
		resize := !v.closed && v.size != (Size{}) && v.used != s.sizeSeq
		if resize {
			s.useLocked(v)
		}
		s.mu.Unlock()
		if resize {
			// A failure here is the session closing, which the write reports.
			_, _ = s.applySize()
		}
	}
	return s.Write(p)
}

// useLocked makes v the most recently used viewer. s.mu must be held.
func (s *Session) useLocked(v *Viewer) {
	s.sizeSeq++
	v.used = s.sizeSeq
}

// wantSizeLocked is the size the policy gives over the read-write viewers that have a size;
// ok is false when none has. s.mu must be held.
func (s *Session) wantSizeLocked() (want Size, ok bool) {
	var latest uint64
	for v := range s.viewers {
		if v.passive || v.size == (Size{}) {
			continue
		}
		switch {
		case !ok:
			want, latest = v.size, v.used
		case s.opts.WindowSize == WindowSmallest:
			want = Size{min(want.Cols, v.size.Cols), min(want.Rows, v.size.Rows)}
		case s.opts.WindowSize == WindowLargest:
			want = Size{max(want.Cols, v.size.Cols), max(want.Rows, v.size.Rows)}
		case v.used > latest:
			want, latest = v.size, v.used
		}
		ok = true
	}
	return want, ok
}

// applySize sets the PTY to the size the policy gives over the viewers, unless no read-write
// viewer has a size (the session keeps its last one), and returns the size applied. Each call
// computes the size afresh under resizeMu, so after concurrent changes the last call applies
// the size of the final state. The ioctl runs under resizeMu alone, never under s.mu. A change
// bumps the size generation and wakes every viewer, so each socket's writer reports it. Call
// with no lock held but, for a painted attach's declared size (Registry.AttachWith), its
// session's screen.mu.
func (s *Session) applySize() (Size, error) {
	s.resizeMu.Lock()
	defer s.resizeMu.Unlock()
	s.mu.Lock()
	want, ok := s.wantSizeLocked()
	cur := Size{s.cols, s.rows}
	state, reason := s.state, s.reason
	s.mu.Unlock()
	if state != StateRunning {
		return Size{}, fmt.Errorf("resize: %w", &ClosedError{ID: s.id, Reason: reason})
	}
	if !ok || want == cur {
		return cur, nil
	}
	return s.setSizeLocked(want)
}

// setSizeLocked applies size to the PTY and publishes it. s.resizeMu must be held, s.mu not.
func (s *Session) setSizeLocked(size Size) (Size, error) {
	if err := s.setSize(size.Cols, size.Rows); err != nil {
		return Size{}, fmt.Errorf("resize %s: %w", s.id, s.closedErr(err))
	}
	s.mu.Lock()
	if size != (Size{s.cols, s.rows}) {
		s.cols, s.rows = size.Cols, size.Rows
		s.noteSizeLocked(size.Cols, size.Rows)
		if s.rec != nil {
			s.rec.Resize(size.Cols, size.Rows)
		}
		s.sizeGen.Add(1)
		s.wakeViewersLocked()
	}
	s.mu.Unlock()
	return size, nil
}
