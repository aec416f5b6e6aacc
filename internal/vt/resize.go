package vt

// Resize changes the size (clamped as in New) as xterm.js does without reflow: rows are cut or
// extended on the right; when the screen loses rows, the blank rows below the cursor go first,
// then rows from the top move into the scrollback; when it gains rows and the cursor is on the
// last one, rows come back from the scrollback, else blank rows are added at the bottom. The
// scroll regions are reset, the cursor kept on the screen.
func (t *Terminal) Resize(cols, rows int) {
	cols, rows = clampSize(cols, rows)
	if cols == t.cols && rows == t.rows {
		return
	}
	oldCols := t.cols
	if cols != oldCols {
		for _, s := range []*screen{&t.main, &t.alt} {
			s.linearize()
			for i, r := range s.lines {
				s.lines[i] = resizeRow(r, cols)
			}
			s.resizeTabs(cols)
		}
		if cols < oldCols {
			for i := range t.sb.len() {
				b := t.sb.at(i)
				l := decodeRow(b, cols)
				t.sb.buf[(t.sb.start+i)%len(t.sb.buf)] = appendRow(b[:0], l)
			}
		}
		if t.wrapPending && cols > oldCols {
			t.x = oldCols // xterm.js's cursor sat past the last column: now it is a column
		}
		t.wrapPending = false
		t.x = min(t.x, cols-1)
	}
	t.cols = cols

	y := t.y
	ny := t.resizeRows(&t.main, rows, y, true)
	if t.altOn {
		ny = t.resizeRows(&t.alt, rows, y, false)
	}
	t.y = ny
	t.rows = rows
	for _, s := range []*screen{&t.main, &t.alt} {
		s.top, s.bot = 0, rows-1
		s.saved.x = min(s.saved.x, cols-1)
		s.saved.y = min(s.saved.y, rows-1)
	}
	t.tmp = nil
}

// resizeRow returns r cut or extended to cols cells.
func resizeRow(r row, cols int) row {
	if r.l == nil {
		return row{}
	}
	n := make(line, cols)
	copy(n, r.used())
	if cols <= len(r.l) && n[cols-1].isWideHead() {
		n[cols-1] = cell{bg: n[cols-1].bg}
	}
	return row{l: n, ext: min(r.ext, cols)}
}

// resizeRows changes s to rows rows; cy is the cursor's row, and it returns where that row is
// now. history says whether rows leaving at the top go to the scrollback and rows come back
// from it.
func (t *Terminal) resizeRows(s *screen, rows, cy int, history bool) int {
	s.linearize()
	lines := s.lines
	if lines == nil {
		return min(cy, rows-1) // the alternate buffer, inactive
	}
	for len(lines) < rows {
		if history && t.sb.len() > 0 && cy == len(lines)-1 {
			l := decodeRow(t.sb.pop(), t.cols)
			lines = append([]row{lineRow(l)}, lines...)
			cy++
		} else {
			lines = append(lines, row{})
		}
	}
	for len(lines) > rows {
		if len(lines)-1 > cy {
			lines = lines[:len(lines)-1]
			continue
		}
		if history && t.sb.max > 0 {
			t.sb.push(lines[0].used())
		}
		lines = lines[1:]
		cy--
	}
	s.lines = append([]row(nil), lines...)
	s.head = 0
	return min(max(cy, 0), rows-1)
}
