package vt

import (
	"strconv"
	"unicode/utf8"
)

// SnapshotOptions selects what AppendSnapshot and AppendText include.
type SnapshotOptions struct {
	// ScrollbackLines is how many of the newest history lines to include (at most what the
	// terminal holds). 0: none.
	ScrollbackLines int
}

// AppendSnapshot appends to dst an ANSI byte stream that, written into a fresh
// xterm-compatible terminal of the same size (xterm.js, tmux, xterm), reproduces the model:
// the newest o.ScrollbackLines history lines, both buffers' cells (the normal one behind the
// alternate one when that is active), each buffer's saved cursor (DECSC), scroll region and
// tab stops, the modes, the title, the charsets, the cursor (position, visibility, style, a
// pending wrap) and the current rendition. It contains nothing a terminal answers, and it is
// valid UTF-8.
//
// Two things it cannot carry: a pending wrap over a cell nothing was printed in, and the
// character REP would repeat.
func (t *Terminal) AppendSnapshot(dst []byte, o SnapshotOptions) []byte {
	// The history: printed from the top and scrolled off the screen.
	if n := min(max(o.ScrollbackLines, 0), t.sb.len()); n > 0 {
		for i := t.sb.len() - n; i < t.sb.len(); i++ {
			dst = append(dst, t.sb.at(i)...)
			dst = append(dst, '\r', '\n')
		}
		dst = appendCUP(dst, t.rows-1, 0)
		for range min(n, t.rows-1) {
			dst = append(dst, '\n')
		}
	}
	dst = t.appendScreen(dst, &t.main)
	if t.altOn || t.alt.saved != (savedCursor{}) {
		dst = append(dst, "\x1b[?1047h"...)
		dst = t.appendScreen(dst, &t.alt)
		if !t.altOn {
			dst = append(dst, "\x1b[?1047l"...)
		}
	}

	m := t.modes
	dst = appendMode(dst, m.AppCursor, "\x1b[?1h")
	dst = appendMode(dst, m.AppKeypad, "\x1b=")
	dst = appendMode(dst, m.BracketedPaste, "\x1b[?2004h")
	dst = appendMode(dst, m.FocusReporting, "\x1b[?1004h")
	if m.MouseTracking != 0 {
		dst = appendDECSET(dst, m.MouseTracking, 'h')
	}
	if m.MouseEncoding != 0 {
		dst = appendDECSET(dst, m.MouseEncoding, 'h')
	}
	dst = appendMode(dst, m.ReverseVideo, "\x1b[?5h")
	dst = appendMode(dst, m.CursorBlink, "\x1b[?12h")
	dst = appendMode(dst, !m.CursorVisible, "\x1b[?25l")
	if m.CursorStyle != 0 {
		dst = appendCSI(dst, m.CursorStyle, ' ')
		dst = append(dst, 'q')
	}
	dst = appendMode(dst, m.NewLine, "\x1b[20h")
	if t.title != "" {
		dst = append(dst, "\x1b]2;"...)
		dst = append(dst, t.title...)
		dst = append(dst, '\a')
	}

	// The cursor, last: DECOM makes its row relative to the region.
	y := t.y
	if m.Origin {
		dst = append(dst, "\x1b[?6h"...)
		y -= t.scr().top
	}
	if l := t.scr().row(t.y).l; t.wrapPending && l != nil && l[t.cols-1].r() != 0 {
		x := t.cols - 1
		if l[x].isTail() {
			x--
		}
		dst = appendCUP(dst, y, x)
		dst = appendSGR(dst, l[x])
		dst = utf8.AppendRune(dst, l[x].r())
	} else {
		dst = appendCUP(dst, y, t.x)
	}
	dst = appendMode(dst, !m.Wraparound, "\x1b[?7l")
	dst = appendMode(dst, m.Insert, "\x1b[4h")
	dst = appendCharsets(dst, t.cs)
	return appendSGR(dst, cell{c: t.pen.a, fg: t.pen.fg, bg: t.pen.bg})
}

// appendScreen paints buffer s, which the receiving terminal has active and blank, and sets
// its saved cursor, scroll region and tab stops. It leaves the rendition and charsets at
// their defaults.
func (t *Terminal) appendScreen(dst []byte, s *screen) []byte {
	for y := range len(s.lines) {
		r := s.row(y)
		if r.l == nil {
			continue
		}
		n := len(dst)
		dst = appendCUP(dst, y, 0)
		m := len(dst)
		if dst = appendRow(dst, r.used()); len(dst) == m {
			dst = dst[:n]
		}
	}
	if sv := s.saved; sv != (savedCursor{}) {
		dst = appendCUP(dst, sv.y, sv.x)
		dst = appendSGR(dst, cell{c: sv.pen.a, fg: sv.pen.fg, bg: sv.pen.bg})
		dst = appendCharsets(dst, sv.cs)
		dst = append(dst, "\x1b7\x1b[m"...)
		for i, g := range sv.cs.g {
			if g != 0 {
				dst = append(dst, 0x1b, "()*+"[i], 'B')
			}
		}
		if sv.cs.gl != 0 {
			dst = append(dst, 0x0f)
		}
	}
	if s.top != 0 || s.bot != t.rows-1 {
		dst = appendCSI(dst, s.top+1, ';')
		dst = strconv.AppendInt(dst, int64(s.bot+1), 10)
		dst = append(dst, 'r')
	}
	if s.tabs != nil {
		dflt := true
		for x := range t.cols {
			if s.isTab(x) != (x%8 == 0) {
				dflt = false
				break
			}
		}
		if !dflt {
			dst = append(dst, "\x1b[3g"...)
			for x := range t.cols {
				if s.isTab(x) {
					dst = appendCUP(dst, 0, x)
					dst = append(dst, "\x1bH"...)
				}
			}
		}
	}
	return dst
}

// appendCharsets designates G0-G3 and invokes GL, leaving out what a fresh terminal has.
func appendCharsets(dst []byte, cs charsets) []byte {
	for i, g := range cs.g {
		if g != 0 {
			dst = append(dst, 0x1b, "()*+"[i], g)
		}
	}
	switch cs.gl {
	case 1:
		dst = append(dst, 0x0e)
	case 2:
		dst = append(dst, 0x1b, 'n')
	case 3:
		dst = append(dst, 0x1b, 'o')
	}
	return dst
}

func appendCUP(dst []byte, y, x int) []byte {
	dst = appendCSI(dst, y+1, ';')
	dst = strconv.AppendInt(dst, int64(x+1), 10)
	return append(dst, 'H')
}

func appendMode(dst []byte, on bool, seq string) []byte {
	if on {
		dst = append(dst, seq...)
	}
	return dst
}

func appendDECSET(dst []byte, m int, f byte) []byte {
	dst = append(dst, "\x1b[?"...)
	dst = strconv.AppendInt(dst, int64(m), 10)
	return append(dst, f)
}

// AppendText appends the active screen as plain text: one line per row, '\n' after each
// (every row, empty ones too), trailing blanks trimmed, a wide character once. With
// o.ScrollbackLines > 0, that many of the newest history lines come first (the normal
// buffer's, whichever buffer is active).
func (t *Terminal) AppendText(dst []byte, o SnapshotOptions) []byte {
	if n := min(max(o.ScrollbackLines, 0), t.sb.len()); n > 0 {
		for i := t.sb.len() - n; i < t.sb.len(); i++ {
			dst = appendText(dst, decodeRow(t.sb.at(i), MaxCols))
		}
	}
	s := t.scr()
	for y := range t.rows {
		dst = appendText(dst, s.row(y).used())
	}
	return dst
}

func appendText(dst []byte, l line) []byte {
	start := len(dst)
	end := start
	for _, c := range l {
		r := c.r()
		switch {
		case r == runeWideTail:
			continue
		case r == 0:
			dst = append(dst, ' ')
			continue
		case r < utf8.RuneSelf:
			dst = append(dst, byte(r))
		default:
			dst = utf8.AppendRune(dst, r)
		}
		if r != ' ' {
			end = len(dst)
		}
	}
	return append(dst[:end], '\n')
}

// AppendRestore appends what a real terminal that has been showing this session needs so that
// its user gets a sane terminal back on detach: out of the alternate screen, every mode the
// session turned on turned off (mouse tracking and encodings, focus reporting, bracketed
// paste, application cursor and keypad, origin, insert, newline, reverse video), wraparound
// back on, the scroll region, rendition and charsets reset, the cursor shown in its default
// style. The cursor stays where it is.
func (t *Terminal) AppendRestore(dst []byte) []byte {
	m := t.Modes()
	dst = appendMode(dst, m.AltScreen, "\x1b[?1049l")
	if m.MouseTracking != 0 {
		dst = appendDECSET(dst, m.MouseTracking, 'l')
	}
	if m.MouseEncoding != 0 {
		dst = appendDECSET(dst, m.MouseEncoding, 'l')
	}
	dst = appendMode(dst, m.FocusReporting, "\x1b[?1004l")
	dst = appendMode(dst, m.BracketedPaste, "\x1b[?2004l")
	dst = appendMode(dst, m.AppCursor, "\x1b[?1l")
	dst = appendMode(dst, m.AppKeypad, "\x1b>")
	dst = appendMode(dst, m.Origin, "\x1b[?6l")
	dst = appendMode(dst, m.Insert, "\x1b[4l")
	dst = appendMode(dst, m.NewLine, "\x1b[20l")
	dst = appendMode(dst, m.ReverseVideo, "\x1b[?5l")
	dst = appendMode(dst, !m.Wraparound, "\x1b[?7h")
	if s := &t.main; s.top != 0 || s.bot != t.rows-1 || t.altOn {
		dst = append(dst, "\x1b7\x1b[r\x1b8"...) // DECSTBM homes the cursor: keep it
	}
	dst = append(dst, "\x1b[m\x1b(B\x1b)B\x0f\x1b[?25h\x1b[0 q"...)
	return dst
}
