package vt

// restrictCursor clears a pending wrap and keeps the cursor on the screen (inside the scroll
// region under DECOM), as xterm.js's _restrictCursor does before most operations.
func (t *Terminal) restrictCursor() {
	t.wrapPending = false
	t.x = min(max(t.x, 0), t.cols-1)
	s := t.scr()
	if t.modes.Origin {
		t.y = min(max(t.y, s.top), s.bot)
	} else {
		t.y = min(max(t.y, 0), t.rows-1)
	}
}

// setCursor moves to column x, row y (relative to the scroll region's top under DECOM).
func (t *Terminal) setCursor(x, y int) {
	if t.modes.Origin {
		y += t.scr().top
	}
	t.x, t.y = x, y
	t.restrictCursor()
}

// moveCursor moves by dx, dy (xterm semantics: relative to the cursor, clamped).
func (t *Terminal) moveCursor(dx, dy int) {
	t.restrictCursor()
	t.x += dx
	t.y += dy
	t.restrictCursor()
}

// index moves down a row, scrolling the region up at its bottom margin (IND, LF).
func (t *Terminal) index() {
	t.wrapPending = false
	s := t.scr()
	if t.y == s.bot {
		t.scrollUp(s.top, s.bot, 1, true)
	} else if t.y < t.rows-1 {
		t.y++
	}
}

// reverseIndex moves up a row, scrolling the region down at its top margin (RI).
func (t *Terminal) reverseIndex() {
	t.restrictCursor()
	s := t.scr()
	if t.y == s.top {
		t.scrollDown(s.top, s.bot, 1, t.pen.blank())
	} else if t.y > 0 {
		t.y--
	}
}

// clearLine blanks a whole row with c, keeping its cells allocated (or none for a default
// blank on a row never written). A default blank clears only the row's extent.
func (t *Terminal) clearLine(p *row, c cell) {
	if p.l == nil {
		if c == (cell{}) {
			return
		}
		p.l = make(line, t.cols)
	}
	if c == (cell{}) {
		clear(p.used())
		p.ext = 0
		return
	}
	l := p.l
	for i := range l {
		l[i] = c
	}
	p.ext = len(l)
}

// scrollUp moves rows top+1..bot up by n, blanking n rows at the bottom. With toHistory and
// top at 0 on the normal buffer, the rows that leave go to the scrollback (as in xterm.js,
// whatever the bottom margin is).
func (t *Terminal) scrollUp(top, bot, n int, toHistory bool) {
	s := t.scr()
	n = min(n, bot-top+1)
	if n <= 0 {
		return
	}
	blank := t.pen.blank()
	keep := toHistory && top == 0 && !t.altOn && t.sb.max > 0
	if top == 0 && bot == t.rows-1 {
		// the whole screen: rotate the ring, nothing moves
		for range n {
			p := s.row(0)
			if keep {
				t.sb.push(p.used())
			}
			s.head++
			if s.head == len(s.lines) {
				s.head = 0
			}
			t.clearLine(p, blank)
		}
		return
	}
	if keep {
		for y := range n {
			t.sb.push(s.row(top + y).used())
		}
	}
	t.rotate(s, top, bot, n)
	for y := bot - n + 1; y <= bot; y++ {
		t.clearLine(s.row(y), blank)
	}
}

// scrollDown moves rows top..bot-1 down by n, blanking n rows at the top with c.
func (t *Terminal) scrollDown(top, bot, n int, c cell) {
	s := t.scr()
	n = min(n, bot-top+1)
	if n <= 0 {
		return
	}
	t.rotate(s, top, bot, bot-top+1-n)
	for y := top; y < top+n; y++ {
		t.clearLine(s.row(y), c)
	}
}

// rotate rotates rows top..bot up by n: row top+n becomes row top.
func (t *Terminal) rotate(s *screen, top, bot, n int) {
	h := bot - top + 1
	if n%h == 0 {
		return
	}
	t.tmp = t.tmp[:0]
	for y := top; y <= bot; y++ {
		t.tmp = append(t.tmp, *s.row(y))
	}
	for i := range h {
		*s.row(top + i) = t.tmp[(i+n)%h]
	}
	clear(t.tmp)
}

// insertLines is IL: inside the scroll region, n blank rows at the cursor's.
func (t *Terminal) insertLines(n int) {
	t.restrictCursor()
	s := t.scr()
	if t.y < s.top || t.y > s.bot {
		return
	}
	t.scrollDown(t.y, s.bot, n, t.pen.blank())
	t.x = 0
}

// deleteLines is DL: inside the scroll region, n rows from the cursor's.
func (t *Terminal) deleteLines(n int) {
	t.restrictCursor()
	s := t.scr()
	if t.y < s.top || t.y > s.bot {
		return
	}
	t.scrollUp(t.y, s.bot, n, false)
	t.x = 0
}

// eraseX returns the column the erase operations start at: past the last one at a pending
// wrap (xterm.js keeps its cursor there and erases nothing of the row).
func (t *Terminal) eraseX() int {
	if t.wrapPending {
		return t.cols
	}
	return t.x
}

// eraseDisplay is ED (and DECSED: there are no protected cells here).
func (t *Terminal) eraseDisplay(mode int) {
	blank := t.pen.blank()
	s := t.scr()
	switch mode {
	case 0:
		x := t.eraseX()
		t.restrictCursor()
		eraseCells(t.rowW(t.y), x, t.cols, blank)
		for y := t.y + 1; y < t.rows; y++ {
			t.clearLine(s.row(y), blank)
		}
	case 1:
		x := t.eraseX()
		t.restrictCursor()
		eraseCells(t.rowW(t.y), 0, x+1, blank)
		for y := 0; y < t.y; y++ {
			t.clearLine(s.row(y), blank)
		}
	case 2:
		for y := 0; y < t.rows; y++ {
			t.clearLine(s.row(y), blank)
		}
	case 3:
		if !t.altOn {
			t.sb.clear()
		}
	}
}

// eraseLine is EL (and DECSEL).
func (t *Terminal) eraseLine(mode int) {
	x := t.eraseX()
	t.restrictCursor()
	r := t.rowW(t.y)
	switch mode {
	case 0:
		eraseCells(r, x, t.cols, t.pen.blank())
	case 1:
		eraseCells(r, 0, x+1, t.pen.blank())
	case 2:
		eraseCells(r, 0, t.cols, t.pen.blank())
	}
}

// decaln is DECALN (ESC # 8): the screen full of E in the current rendition, cursor home.
func (t *Terminal) decaln() {
	c := t.pen.cell('E')
	for y := 0; y < t.rows; y++ {
		r := t.rowW(y)
		for i := range r.l {
			r.l[i] = c
		}
		r.ext = len(r.l)
	}
	t.setCursor(0, 0)
}

// saveCursor is DECSC, into the active buffer's slot.
func (t *Terminal) saveCursor() {
	t.scr().saved = savedCursor{x: t.x, y: t.y, pen: t.pen, cs: t.cs}
}

// restoreCursor is DECRC, from the active buffer's slot.
func (t *Terminal) restoreCursor() {
	sv := t.scr().saved
	t.x, t.y, t.pen, t.cs = sv.x, sv.y, sv.pen, sv.cs
	t.restrictCursor()
}

// setAlt switches buffers as xterm.js does: entering clears the alternate buffer (with the
// current background), leaving drops it; the cursor carries over both ways.
func (t *Terminal) setAlt(on bool) {
	if on == t.altOn {
		return
	}
	if on {
		t.alt.lines = make([]row, t.rows)
		t.alt.head = 0
		t.altOn = true
		if b := t.pen.blank(); b != (cell{}) {
			for y := range t.alt.lines {
				t.clearLine(&t.alt.lines[y], b)
			}
		}
		return
	}
	t.altOn = false
	t.alt.lines, t.alt.head = nil, 0
	t.alt.top, t.alt.bot, t.alt.tabs = 0, t.rows-1, nil
}
