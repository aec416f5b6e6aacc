package vt

// printASCII prints a run of printable ASCII bytes: the fast path of Write.
func (t *Terminal) printASCII(s []byte) {
	if t.cs.g[t.cs.gl] != 0 || t.modes.Insert || !t.modes.Wraparound {
		for _, b := range s {
			t.printRune(rune(b))
		}
		return
	}
	t.lastRune = rune(s[len(s)-1])
	cols := t.cols
	for len(s) > 0 {
		if t.wrapPending {
			t.wrap()
		}
		rw := t.rowW(t.y)
		l := rw.l
		x := t.x
		n := min(cols-x, len(s))
		rw.touch(x + n) // before the loop below, which is faster with rw dead
		if l[x].isTail() && x > 0 {
			l[x-1] = t.pen.blank()
		}
		a, fg, bg := t.pen.a, t.pen.fg, t.pen.bg
		dst := l[x : x+n]
		for i, b := range s[:n] {
			dst[i] = cell{c: uint32(b) | a, fg: fg, bg: bg}
		}
		x += n
		s = s[n:]
		if x == cols {
			t.x, t.wrapPending = cols-1, true
		} else {
			t.x = x
			if l[x].isTail() {
				l[x] = t.pen.blank()
			}
		}
	}
}

// printRune prints one character (ASCII ones through the invoked charset).
func (t *Terminal) printRune(r rune) {
	if r < 0x7f {
		r = t.mapCharset(r)
	}
	t.put(r)
	t.lastRune = r
}

// put places r at the cursor as xterm.js's print does: wrapping first if the cursor is past
// the last column (pending wrap) or a wide character does not fit; inserting under IRM.
// Zero-width characters (combining marks, joiners, variation selectors) are dropped.
func (t *Terminal) put(r rune) {
	w := runeWidth(r)
	if w == 0 {
		return
	}
	cols := t.cols
	if t.wrapPending {
		if t.modes.Wraparound {
			t.wrap()
		} else {
			t.wrapPending = false
		}
	}
	if w == 2 && t.x == cols-1 {
		if !t.modes.Wraparound {
			return // a wide character that does not fit is dropped
		}
		b := t.pen.blank()
		rw := t.rowW(t.y)
		rw.l[cols-1] = b
		if b != (cell{}) {
			rw.touch(cols)
		}
		t.wrap()
	}
	rw := t.rowW(t.y)
	l := rw.l
	x := t.x
	if t.modes.Insert {
		insertCells(rw, x, w, t.pen.blank())
	}
	rw.touch(x + w)
	if x > 0 && l[x].isTail() {
		l[x-1] = t.pen.blank()
	}
	l[x] = t.pen.cell(r)
	if w == 2 {
		l[x+1] = t.pen.cell(runeWideTail)
	}
	x += w
	if x < cols && l[x].isTail() {
		l[x] = t.pen.blank()
	}
	if x >= cols {
		x = cols - 1
		t.wrapPending = t.modes.Wraparound
	}
	t.x = x
}

// wrap moves to the start of the next line, scrolling at the bottom margin.
func (t *Terminal) wrap() {
	t.wrapPending = false
	t.x = 0
	t.index()
}

// repeat is REP: the last printed character n more times (at most one screenful and a row:
// more would only scroll the same character through).
func (t *Terminal) repeat(n int) {
	r := t.lastRune
	if r == 0 {
		return
	}
	n = min(n, (t.rows+1)*t.cols)
	for range n {
		t.put(r)
	}
}

// insertCells shifts r's cells from x right by n, dropping what passes the end, and blanks
// the n at x.
func insertCells(r *row, x, n int, blank cell) {
	l := r.l
	cols := len(l)
	n = min(n, cols-x)
	r.ext = min(max(r.ext, x)+n, cols)
	if x > 0 && l[x].isTail() {
		l[x-1] = blank
		l[x] = blank
	}
	copy(l[x+n:], l[x:cols-n])
	for i := x; i < x+n; i++ {
		l[i] = blank
	}
	if l[cols-1].isWideHead() {
		l[cols-1] = blank
	}
}

// deleteCells shifts r's cells from x+n left by n, and blanks the n cells it frees at the end.
func deleteCells(r *row, x, n int, blank cell) {
	l := r.l
	cols := len(l)
	n = min(n, cols-x)
	if blank != (cell{}) {
		r.ext = cols
	} else if r.ext > x {
		r.ext = max(r.ext-n, x)
	}
	if x > 0 && l[x].isTail() {
		l[x-1] = blank
	}
	copy(l[x:], l[x+n:])
	for i := cols - n; i < cols; i++ {
		l[i] = blank
	}
	if l[x].isTail() {
		l[x] = blank
	}
}

// eraseCells blanks r's cells from:to, and the other half of a wide character it cuts.
func eraseCells(r *row, from, to int, blank cell) {
	l := r.l
	to = min(to, len(l))
	if from >= to {
		return
	}
	switch {
	case blank != (cell{}):
		r.touch(to)
	case to >= r.ext:
		r.ext = min(r.ext, from)
	}
	if from > 0 && l[from].isTail() {
		l[from-1] = blank
	}
	if to < len(l) && l[to].isTail() {
		l[to] = blank
	}
	for i := from; i < to; i++ {
		l[i] = blank
	}
}
