package vt

import "bytes"

// Plain text scrolling through: the fast path for bulk output (a plain-text log, `seq`,
// `base64`, `yes`, on a cooked terminal or a raw one).
//
// Most of a flood's rows scroll off the screen within the Write that brings them. Printed one
// character run at a time, each row is written into cells, scrolled off, and serialized back
// into bytes for the history. scrollText does the same in one step for plain text: printable
// ASCII, line feeds, and a carriage return right before a line feed.
//
// It applies right after a line feed that left the cursor on a blank bottom row of a
// full-height scroll region, on the normal screen, in the default rendition and the ASCII
// charset, with autowrap on and insert and LNM off. The rows the text fills from the cursor,
// wrapping at the last column as printing does, are worked out from its bytes. The rows above
// scroll into the history as they would; the rows that would pass through the screen go to the
// history serialized straight from their bytes; only the rows left on the screen are written
// into cells. The result is the one printing gives (TestScrollTextMatchesPrinting): the same
// rows, history, cursor, pending wrap and character for REP.

// textRow is a row that plain text filled: blank up to column x0, then text.
type textRow struct {
	x0   int
	text []byte
}

// textRun is where plain text at the start of p leaves the terminal: rows completed (scrolled
// off the bottom row), the bytes taken, the cursor's column and pending wrap, and the
// character REP would repeat.
type textRun struct {
	rows     int
	used     int
	x        int
	pending  bool
	lastRune rune
}

// walkText runs plain text at p's start from column x of a blank bottom row, as printing would,
// up to the first byte it does not take. It calls row (unless nil) for each row completed, in
// order, then for the bottom row it leaves partly written. With valid, p's first upTo bytes
// are known to be plain text (an earlier walk took them) and the walk stops there, finding
// line feeds by bytes.IndexByte instead of checking every byte.
func (t *Terminal) walkText(p []byte, x int, valid bool, upTo int, row func(textRow)) textRun {
	cols := t.cols
	r := textRun{x: x}
	cur := textRow{x0: x}
	start := 0 // where cur's text begins in p
	i := 0
	if valid {
		p = p[:upTo]
	}
	for i < len(p) {
		// The text up to the next line end, or the end of what the walk takes.
		var e int
		if valid {
			e = bytes.IndexByte(p[i:], '\n')
			if e < 0 {
				e = len(p)
			} else {
				e += i
				if e > i && p[e-1] == '\r' {
					e--
				}
			}
		} else {
			e = i + printableRun(p[i:])
		}
		if e > i {
			r.lastRune = rune(p[e-1])
		}
		for i < e {
			if r.pending { // wrap: the row is complete, the next starts at column 0
				if row != nil {
					cur.text = p[start:i]
					row(cur)
				}
				r.rows++
				cur, start, r.x, r.pending = textRow{}, i, 0, false
			}
			k := min(cols-r.x, e-i)
			i, r.x = i+k, r.x+k
			if r.x == cols {
				r.x, r.pending = cols-1, true
			}
		}
		if i == len(p) {
			break
		}
		switch {
		case p[i] == '\r' && i+1 < len(p) && p[i+1] == '\n':
			r.x = 0
		case p[i] != '\n':
			// Not plain text: the walk ends here.
			if row != nil {
				cur.text = p[start:i]
				row(cur)
			}
			r.used = i
			return r
		}
		// A line feed: the row is complete; the next is blank, the cursor where it was (at
		// the carriage's return, column 0), no pending wrap.
		if row != nil {
			cur.text = p[start:i]
			row(cur)
		}
		r.rows++
		if p[i] == '\r' {
			i++
		}
		i++
		cur, start, r.pending, r.lastRune = textRow{x0: r.x}, i, false, 0
	}
	r.used = len(p)
	if row != nil {
		cur.text = p[start:]
		row(cur)
	}
	return r
}

// scrollText consumes the plain text at p's start if the terminal is where the fast path
// applies and the text scrolls at least as many rows as the screen holds. It returns how many
// bytes it consumed (0: none, the caller prints p as usual) and, when the text is too short,
// how far ahead the next possible run begins (skip), so that a caller asks again only past it:
// without that, a screen's worth of text before each odd byte would be walked once per line.
// Write calls it right after a line feed.
func (t *Terminal) scrollText(p []byte) (used, skip int) {
	s := &t.main
	if t.altOn || t.y != t.rows-1 || s.top != 0 || s.bot != t.rows-1 || t.pen != (pen{}) ||
		t.cs.g[t.cs.gl] != 0 || t.modes.Insert || !t.modes.Wraparound || t.modes.NewLine ||
		s.row(t.rows-1).ext != 0 || t.noBulk {
		return 0, 0
	}
	rows := t.rows
	run := t.walkText(p, t.x, false, 0, nil)
	if run.rows < rows {
		return 0, run.used + 1
	}
	// Printing it: the rows above the bottom one scroll into the history; of the rows the text
	// completes, the first run.rows-rows+1 pass through the screen into the history (only the
	// last sb.max of them stay there) and the rest are left on rows 0..rows-2; the row it
	// leaves partly written is the bottom one.
	t.scrollUp(0, rows-1, rows-1, true)
	through := run.rows - rows + 1
	first := max(0, through-t.sb.max)
	i := 0
	t.walkText(p, t.x, true, run.used, func(r textRow) {
		switch {
		case i >= through:
			rw := t.rowW(i - through)
			for x, b := range r.text {
				rw.l[r.x0+x] = cell{c: uint32(b)}
			}
			if len(r.text) > 0 {
				rw.ext = r.x0 + len(r.text)
			}
		case i >= first && t.sb.max > 0:
			t.sb.pushText(r.x0, r.text)
		}
		i++
	})
	t.x, t.wrapPending, t.lastRune = run.x, run.pending, run.lastRune
	t.bulkRuns++
	return run.used, 0
}
