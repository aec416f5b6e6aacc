package vt

// execute runs a C0 control. BEL and the rest are ignored.
func (t *Terminal) execute(r rune) {
	t.lastRune = 0
	switch r {
	case 0x08: // BS
		t.restrictCursor()
		if t.x > 0 {
			t.x--
		}
	case 0x09: // HT
		if t.wrapPending {
			return // xterm.js: a tab at the pending wrap does nothing
		}
		t.x = t.nextStop(t.x)
	case 0x0a, 0x0b, 0x0c: // LF, VT, FF
		if t.modes.NewLine {
			t.x = 0
		}
		t.index()
	case 0x0d: // CR
		t.x, t.wrapPending = 0, false
	case 0x0e: // SO
		t.cs.gl = 1
	case 0x0f: // SI
		t.cs.gl = 0
	}
}

// executeC1 runs the C1 controls xterm.js runs: IND, NEL, HTS.
func (t *Terminal) executeC1(r rune) {
	switch r {
	case 0x84:
		t.index()
	case 0x85:
		t.x, t.wrapPending = 0, false
		t.index()
	case 0x88:
		t.setTab(t.x)
	}
}

// escDispatch runs ESC [intermediates] final.
func (t *Terminal) escDispatch(f byte) {
	t.lastRune = 0
	if t.ninter > 1 {
		return
	}
	if t.ninter == 1 {
		switch t.inter[0] {
		case '(', ')', '*', '+', '-', '.', '/':
			g := gIndex(t.inter[0])
			switch f {
			case '0':
				t.cs.g[g] = '0'
			case 'A':
				t.cs.g[g] = 'A'
			default:
				t.cs.g[g] = 0 // ASCII, and the national sets this model does not map
			}
		case '#':
			if f == '8' {
				t.decaln()
			}
		}
		return
	}
	switch f {
	case '7':
		t.saveCursor()
	case '8':
		t.restoreCursor()
	case 'D':
		t.index()
	case 'E':
		t.x, t.wrapPending = 0, false
		t.index()
	case 'H':
		t.setTab(t.x)
	case 'M':
		t.reverseIndex()
	case '=':
		t.modes.AppKeypad = true
	case '>':
		t.modes.AppKeypad = false
	case 'c':
		t.reset()
	case 'n':
		t.cs.gl = 2
	case 'o':
		t.cs.gl = 3
	}
}

// gIndex returns which of G0-G3 a designation's intermediate names.
func gIndex(b byte) int {
	switch b {
	case ')', '-':
		return 1
	case '*', '.':
		return 2
	case '+', '/':
		return 3
	}
	return 0
}

// decGraphics maps 0x5f-0x7e in the DEC special graphics set (xterm.js's table).
var decGraphics = [...]rune{
	'`': '\u25c6', 'a': '\u2592', 'b': '\u2409', 'c': '\u240c', 'd': '\u240d', 'e': '\u240a',
	'f': '\u00b0', 'g': '\u00b1', 'h': '\u2424', 'i': '\u240b', 'j': '\u2518', 'k': '\u2510',
	'l': '\u250c', 'm': '\u2514', 'n': '\u253c', 'o': '\u23ba', 'p': '\u23bb', 'q': '\u2500',
	'r': '\u23bc', 's': '\u23bd', 't': '\u251c', 'u': '\u2524', 'v': '\u2534', 'w': '\u252c',
	'x': '\u2502', 'y': '\u2264', 'z': '\u2265', '{': '\u03c0', '|': '\u2260', '}': '\u00a3',
	'~': '\u00b7',
}

// mapCharset maps an ASCII character through the charset invoked into GL.
func (t *Terminal) mapCharset(r rune) rune {
	switch t.cs.g[t.cs.gl] {
	case '0':
		if r >= '`' && r <= '~' {
			return decGraphics[r]
		}
	case 'A':
		if r == '#' {
			return '\u00a3'
		}
	}
	return r
}

// tabStops is a set of columns, for up to MaxCols columns.
type tabStops [(MaxCols + 63) / 64]uint64

func (s *screen) isTab(x int) bool {
	if s.tabs == nil {
		return x%8 == 0
	}
	return s.tabs[x/64]&(1<<(x%64)) != 0
}

func (s *screen) ownTabs() *tabStops {
	if s.tabs == nil {
		s.tabs = new(tabStops)
		for x := 0; x < MaxCols; x += 8 {
			s.tabs[x/64] |= 1 << (x % 64)
		}
	}
	return s.tabs
}

func (t *Terminal) setTab(x int) {
	x = min(x, t.cols-1)
	s := t.scr()
	if !s.isTab(x) {
		s.ownTabs()[x/64] |= 1 << (x % 64)
	}
}

func (t *Terminal) clearTab(x int) {
	x = min(x, t.cols-1)
	s := t.scr()
	if s.isTab(x) {
		s.ownTabs()[x/64] &^= 1 << (x % 64)
	}
}

func (t *Terminal) clearTabs() { t.scr().tabs = new(tabStops) }

// nextStop returns the next tab stop right of x, or the last column.
func (t *Terminal) nextStop(x int) int {
	s := t.scr()
	for x++; x < t.cols; x++ {
		if s.isTab(x) {
			return x
		}
	}
	return t.cols - 1
}

// prevStop returns the previous tab stop left of x, or 0.
func (t *Terminal) prevStop(x int) int {
	s := t.scr()
	for x--; x > 0; x-- {
		if s.isTab(x) {
			return x
		}
	}
	return 0
}

// resizeTabs is xterm.js's setupTabStops(cols) after a resize: from the last stop before the
// new width, a stop every 8 columns up to it.
func (s *screen) resizeTabs(cols int) {
	if s.tabs == nil {
		return
	}
	x := cols - 1
	for x > 0 && !s.isTab(x) {
		x--
	}
	for ; x < cols; x += 8 {
		s.tabs[x/64] |= 1 << (x % 64)
	}
}
