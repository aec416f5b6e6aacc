package main

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/vt"
)

// localScreen is attach's model of what the local terminal shows of the session: every byte
// written to stdout is fed to it, so that a detach can undo the modes the session set (leave
// the alternate screen, mouse tracking, application keys, bracketed paste; show the cursor),
// and a size another viewer imposes can be drawn again at that size, with a status line.
// Safe for concurrent use: the pump writes, the loop restores.
type localScreen struct {
	// local is the local terminal's size (cols<<32 | rows; 0: unknown), set by the loop
	// without waiting for mu.
	local atomic.Uint64

	// mu guards the fields below, and is held across each write to the terminal, so that
	// output and redraws reach it whole and in the order the model saw them. The loop only
	// tries it (a stalled terminal must not make it deaf to stop signals and the detach keys).
	mu   sync.Mutex
	term *vt.Terminal
	note bool // a status line about the size is on the local terminal
	// ch and gen are the binding and its count of session.size notifications last drawn.
	ch  *client.Channel
	gen uint64
}

func newLocalScreen(cols, rows int) *localScreen {
	return &localScreen{term: vt.New(max(cols, 2), max(rows, 1), vt.Options{})}
}

// clearSeq resets what a paint assumes of a fresh terminal: the pen, the scroll region, the
// cursor home, the screen cleared.
const clearSeq = "\x1b[0m\x1b[r\x1b[H\x1b[2J"

// write writes output b to the terminal w and records it.
func (s *localScreen) write(w io.Writer, b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := w.Write(b)
	s.term.Write(b)
	return err
}

// follow draws the size ch last reported if it has not been drawn (a new binding starts from
// its result's size, drawn with its paint or replay; every session.size after it is drawn).
// The pump calls it after each read; the loop, which must never wait on the terminal, on a
// timer with try set (it does nothing while a write holds the lock), since a size can change
// while no output comes.
func (s *localScreen) follow(w io.Writer, ch *client.Channel, try bool) error {
	if ch == nil {
		return nil
	}
	if try {
		if !s.mu.TryLock() {
			return nil
		}
	} else {
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if ch != s.ch {
		s.ch, s.gen = ch, 0
	}
	cols, rows, gen := ch.SizeGen()
	if gen == s.gen {
		return nil
	}
	s.gen = gen
	return s.resizedLocked(w, cols, rows)
}

// repaintFor prepares the local terminal for a paint of a session of cols×rows: it undoes
// what the session set, clears the screen, and starts the model afresh.
func (s *localScreen) repaintFor(w io.Writer, cols, rows int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.term.AppendRestore(nil)
	b = append(b, clearSeq...)
	s.term = vt.New(max(cols, 2), max(rows, 1), vt.Options{})
	_, err := w.Write(b)
	return err
}

// setLocal records the local terminal's size.
func (s *localScreen) setLocal(cols, rows int) {
	s.local.Store(uint64(uint32(cols))<<32 | uint64(uint32(rows)))
}

// resizedLocked draws the session again at the size the gateway applied, cols×rows, when it is not
// the local terminal's (another viewer's size under --window-size), with a status line below it
// that says so; nothing when the size is the local one and no line was shown. s.mu must be
// held.
func (s *localScreen) resizedLocked(w io.Writer, cols, rows int) error {
	s.term.Resize(cols, rows)
	l := s.local.Load()
	lc, lr := int(l>>32), int(uint32(l))
	differs := lc > 0 && (lc != cols || lr != rows)
	if !differs && !s.note {
		return nil
	}
	// The paint below assumes a fresh terminal: undo the session's modes (charsets, origin,
	// insert, the alternate screen) first, then clear.
	b := s.term.AppendRestore(nil)
	b = append(b, clearSeq...)
	b = s.term.AppendSnapshot(b, vt.SnapshotOptions{})
	if differs && lr > rows {
		// Below the session's rows: save the cursor, write the line, put the cursor back.
		line := fmt.Sprintf(" muxterm: the session is %dx%d (another viewer's size); this terminal is %dx%d ", cols, rows, lc, lr)
		if len(line) > lc {
			line = line[:lc]
		}
		b = append(b, "\x1b7"...)
		b = fmt.Appendf(b, "\x1b[%d;1H\x1b[0;7m%s\x1b[0m\x1b[K", lr, line)
		b = append(b, "\x1b8"...)
	}
	b = s.term.AppendPending(b)
	s.note = differs
	_, err := w.Write(b)
	return err
}

// restore writes what undoes the session's modes on the local terminal, before muxterm leaves.
func (s *localScreen) restore(w io.Writer) {
	s.mu.Lock()
	b := s.term.AppendRestore(nil)
	s.mu.Unlock()
	_, _ = w.Write(b)
}
