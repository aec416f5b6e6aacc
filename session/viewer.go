package session

import (
	"context"
	"fmt"
	"io"
)

// Viewer pulls a session's output in order from the ring, by offset. The session wakes it
// through its wake function (which must not block) whenever there is something new: output,
// the exit, the end of output, or closing. A Viewer is safe for concurrent use, but Read is
// meant for one goroutine.
type Viewer struct {
	s    *Session
	wake func() // called with s.mu held; must not block

	// passive viewers (read-only principals) do not hold the reader back: see minLagLocked.
	passive bool

	// guarded by s.mu:
	next int64 // offset of the next byte to deliver
	// start is where the viewer started (its attach's offset): a resume hold is never below it
	// (bytes a client had in flight may be a paint's, which have no offsets).
	start int64
	// paint is what is left to deliver of the screen painted at the attach (screen.go), ahead
	// of the ring's bytes from next; it has no offsets.
	paint  []byte
	closed bool
	// size is the viewer's own terminal size (zero: none declared), which the window-size
	// policy counts for a read-write viewer; used is s.sizeSeq when it last typed or declared
	// its size (WindowLatest picks the highest).
	size Size
	used uint64
}

// Session returns the viewed session.
func (v *Viewer) Session() *Session { return v.s }

// Read copies the next bytes into p. lost > 0 says the viewer fell behind the start of the
// ring and that many bytes were skipped before the ones returned. When there is nothing to
// read it returns n == 0: io.EOF once the output is final and fully read, else nil (wait for a
// wake). After Close it returns ErrViewerClosed.
func (v *Viewer) Read(p []byte) (n int, lost int64, err error) {
	n, lost, _, err = v.ReadStream(p)
	return n, lost, err
}

// ReadStream is Read that also says which stream the bytes are of: it returns bytes of one
// stream only (a pipe session's stdout or stderr; a PTY session's are all Stdout), so a read
// stops where the stream changes.
func (v *Viewer) ReadStream(p []byte) (n int, lost int64, stream Stream, err error) {
	s := v.s
	s.mu.Lock()
	if v.closed {
		s.mu.Unlock()
		return 0, 0, Stdout, ErrViewerClosed
	}
	if len(v.paint) > 0 {
		n = copy(p, v.paint)
		v.paint = v.paint[n:]
		if len(v.paint) == 0 {
			v.paint = nil
		}
		s.mu.Unlock()
		return n, 0, Stdout, nil
	}
	n, lost, v.next, stream = s.ring.readStream(p, v.next)
	if n == 0 && lost == 0 && s.outputFinal && v.next >= s.ring.end {
		s.mu.Unlock()
		return 0, 0, Stdout, io.EOF
	}
	s.maybeResumeLocked()
	s.mu.Unlock()
	if n > 0 {
		s.echoed() // a keystroke's echo is on its way: the held masters go on
	}
	return n, lost, stream, nil
}

// ViewerState is what a viewer still has to deliver, for its notifications.
type ViewerState struct {
	// Pending is the number of retained bytes not yet read.
	Pending int64
	// Exit is the process's exit once the output it printed before exiting is in the ring
	// (the reader reached the end of output, or the exit has settled) and the viewer has read
	// all of it; nil before.
	Exit *ExitStatus
	// Closing is the reason once a kill, reap or shutdown began, else "".
	Closing Reason
	// EOF says the output is final and the viewer has read all of it.
	EOF bool
}

// State reports what the viewer has left to deliver.
func (v *Viewer) State() ViewerState {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var st ViewerState
	st.Pending = s.ring.end - max(v.next, s.ring.start)
	if st.Pending < 0 {
		st.Pending = 0
	}
	st.Pending += int64(len(v.paint))
	st.EOF = s.outputFinal && st.Pending == 0 && v.next >= s.ring.start
	if s.state != StateRunning {
		st.Closing = s.reason
	}
	select {
	case <-s.exited:
		if st.Pending == 0 && (s.outputFinal || (s.exitSettled && !s.paused)) {
			e := s.exit
			st.Exit = &e
		}
	default:
	}
	return st
}

// Offset returns the offset of the next ring byte Read will return (after the rest of the
// paint, if any).
func (v *Viewer) Offset() int64 {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	return v.next
}

// Close unsubscribes the viewer, which is leaving on purpose: no resume hold. It can be called
// more than once; only the first call counts.
func (v *Viewer) Close() {
	s := v.s
	s.mu.Lock()
	resize := s.unsubscribeLocked(v, false, 0)
	s.mu.Unlock()
	if resize {
		_, _ = s.applySize() // fails only when the session is closing: nothing to size then
	}
}

// CloseHolding unsubscribes a viewer whose client was lost (its socket dropped) and may come
// back: for Options.ResumeHold backpressure still follows the offset the client consumed, the
// viewer's offset less unconfirmed, the bytes it handed on that were not confirmed consumed (a
// channel's bytes in flight). Only the first Close or CloseHolding counts.
func (v *Viewer) CloseHolding(unconfirmed int64) {
	s := v.s
	s.mu.Lock()
	resize := s.unsubscribeLocked(v, true, max(unconfirmed, 0))
	s.mu.Unlock()
	if resize {
		_, _ = s.applySize()
	}
}

// Subscribe attaches a viewer that starts at offset from (clamped to the oldest retained byte
// when older; a negative from means the oldest retained byte). wake may be nil; it is called
// with the session lock held and must not block.
func (s *Session) Subscribe(from int64, wake func()) (*Viewer, AttachInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subscribeLocked(from, wake, false)
}

// AttachInfo describes where a new viewer starts.
type AttachInfo struct {
	Offset int64 // the first offset the viewer will read
	Lost   int64 // requested bytes the ring no longer holds
	// End is the live offset: the ring's end read in the critical section that subscribes the
	// viewer (bytes below it were ingested before the attach, bytes from it on after); for a
	// painted attach, the paint's offset, which is at least that end (Registry.AttachWith).
	End int64
	// Screen is the length of the paint the viewer reads before the byte at Offset (0: no
	// paint), and ScreenLost the output bytes its screen never read (screen.go).
	Screen     int
	ScreenLost int64
	// ScreenCols×ScreenRows is the size the paint is drawn for (a fresh terminal of it).
	ScreenCols, ScreenRows int
}

// subscribeLocked adds a viewer. s.mu must be held.
func (s *Session) subscribeLocked(from int64, wake func(), passive bool) (*Viewer, AttachInfo, error) {
	if s.state != StateRunning {
		return nil, AttachInfo{}, fmt.Errorf("attach: %w", &ClosedError{ID: s.id, Reason: s.reason})
	}
	if from > s.ring.end {
		return nil, AttachInfo{}, fmt.Errorf("attach %s from %d: %w %d", s.id, from, ErrBadOffset, s.ring.end)
	}
	info := AttachInfo{Offset: from, End: s.ring.end}
	if from < s.ring.start {
		if from >= 0 {
			info.Lost = s.ring.start - from
		}
		info.Offset = s.ring.start
	}
	if wake == nil {
		wake = func() {}
	}
	v := &Viewer{s: s, wake: wake, next: info.Offset, start: info.Offset, passive: passive}
	s.viewers[v] = struct{}{}
	if passive {
		s.recordMarker("attach read-only")
	} else {
		s.recordMarker("attach")
	}
	s.opts.Instruments.Viewers.Add(context.Background(), 1)
	s.unwatchedSince = timeZero
	if !passive {
		s.takeOverHoldLocked(info.Offset)
	}
	// A viewer that starts near the end means not every viewer is far behind any more: lift
	// backpressure now, since a paused reader produces no output to wake this viewer with.
	s.maybeResumeLocked()
	return v, info, nil
}

// unsubscribeLocked removes v. s.mu must be held. It reports whether v counted for the
// window size, so the caller applies the size afresh once it has let go of s.mu.
func (s *Session) unsubscribeLocked(v *Viewer, hold bool, unconfirmed int64) (resize bool) {
	if v.closed {
		return false
	}
	v.closed = true
	delete(s.viewers, v)
	if hold {
		s.recordMarker("detach: connection lost")
	} else {
		s.recordMarker("detach")
	}
	if hold && !v.passive {
		s.holdLocked(max(v.next-unconfirmed, v.start, 0), v.next)
	}
	s.opts.Instruments.Viewers.Add(context.Background(), -1)
	if len(s.viewers) == 0 {
		s.unwatchedSince = s.now()
	}
	s.maybeResumeLocked()
	return !v.passive && v.size != (Size{}) && s.state == StateRunning
}
