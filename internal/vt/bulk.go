package vt

import "sync"

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
// charset, with autowrap on and insert and LNM off. One walk over the bytes checks that they
// are plain text and works out the rows they fill from the cursor, wrapping at the last column
// as printing does; it keeps only the last rows, those the history and the screen can hold
// (rowRing), and counts the rest, which would scroll out of the history within the same Write.
// The rows above scroll into the history as they would; the kept rows that would pass through
// the screen go to the history serialized straight from their bytes; only the rows left on the
// screen are written into cells. The result is the one printing gives
// (TestScrollTextMatchesPrinting): the same rows, history, cursor, pending wrap and character
// for REP.

// rowSpan is a row that plain text filled: blank up to column x0, then the text p[start:end].
type rowSpan struct{ x0, start, end int }

// rowRing keeps the last rows a walk filled, all a scroll can keep (the history's and the
// screen's); the rows before them scroll out of the history within the same Write, and are only
// counted. n counts every row pushed.
type rowRing struct {
	spans []rowSpan
	n     int
}

func (r *rowRing) push(x0, start, end int) {
	r.spans[r.n%len(r.spans)] = rowSpan{x0, start, end}
	r.n++
}

// rowRings recycles the rings: a terminal streaming plain text takes one for each Write it
// scrolls in bulk, and an idle one holds none.
var rowRings = sync.Pool{New: func() any { return new(rowRing) }}

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
// up to the first byte it does not take. It pushes to ring each row completed, in order, then
// the bottom row it leaves partly written.
func (t *Terminal) walkText(p []byte, x int, ring *rowRing) textRun {
	cols := t.cols
	r := textRun{x: x}
	x0 := x    // where the current row's text begins on it
	start := 0 // where the current row's text begins in p
	i := 0
	for i < len(p) {
		// The text up to the next byte that is not printable.
		e := i + printableRun(p[i:])
		if e > i {
			r.lastRune = rune(p[e-1])
		}
		for i < e {
			if r.pending { // wrap: the row is complete, the next starts at column 0
				ring.push(x0, start, i)
				r.rows++
				x0, start, r.x, r.pending = 0, i, 0, false
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
			ring.push(x0, start, i)
			r.used = i
			return r
		}
		// A line feed: the row is complete; the next is blank, the cursor where it was (at
		// the carriage's return, column 0), no pending wrap.
		ring.push(x0, start, i)
		r.rows++
		if p[i] == '\r' {
			i++
		}
		i++
		x0, start, r.pending, r.lastRune = r.x, i, false, 0
	}
	r.used = len(p)
	ring.push(x0, start, len(p))
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
	ring := rowRings.Get().(*rowRing)
	defer rowRings.Put(ring)
	// Room for every row the scroll can keep: the history's and the screen's, and no more than
	// p can fill (each row but the last takes a byte of it at least), so a short Write beside a
	// long history takes a short ring.
	if n := min(t.sb.max+rows, len(p)+1); cap(ring.spans) < n {
		ring.spans = make([]rowSpan, n)
	} else {
		ring.spans = ring.spans[:n]
	}
	ring.n = 0
	run := t.walkText(p, t.x, ring)
	if run.rows < rows {
		return 0, run.used + 1
	}
	// Printing it: the rows above the bottom one scroll into the history; of the rows the text
	// completes, the first run.rows-rows+1 pass through the screen into the history (only the
	// last sb.max of them stay there) and the rest are left on rows 0..rows-2; the row it
	// leaves partly written is the bottom one. The ring holds the rows from first on.
	t.scrollUp(0, rows-1, rows-1, true)
	through := run.rows - rows + 1
	first := max(0, through-t.sb.max)
	for i := first; i < ring.n; i++ {
		sp := ring.spans[i%len(ring.spans)]
		text := p[sp.start:sp.end]
		if i >= through {
			rw := t.rowW(i - through)
			for x, b := range text {
				rw.l[sp.x0+x] = cell{c: uint32(b)}
			}
			if len(text) > 0 {
				rw.ext = sp.x0 + len(text)
			}
		} else {
			t.sb.pushText(sp.x0, text)
		}
	}
	t.x, t.wrapPending, t.lastRune = run.x, run.pending, run.lastRune
	t.bulkRuns++
	return run.used, 0
}
