package vt

// csiDispatch runs CSI [prefix] params [intermediates] final. Queries (DA, DSR, DECRQM,
// XTVERSION, window reports) are parsed and ignored: the model never answers.
func (t *Terminal) csiDispatch(f byte) {
	defer func() { t.lastRune = 0 }()
	if t.ninter > 1 {
		return
	}
	var in byte
	if t.ninter == 1 {
		in = t.inter[0]
	}
	switch {
	case t.prefix == 0 && in == 0:
		t.csi(f)
	case t.prefix == '?' && in == 0:
		switch f {
		case 'h', 'l':
			for i := range t.nParams() {
				t.setPrivateMode(int(t.params[i]), f == 'h')
			}
		case 'J':
			t.eraseDisplay(t.arg(0, 0))
		case 'K':
			t.eraseLine(t.arg(0, 0))
		}
	case t.prefix == 0 && in == ' ' && f == 'q': // DECSCUSR
		if n := t.arg(0, 0); n <= 6 {
			t.modes.CursorStyle = n
		}
	case t.prefix == 0 && in == '!' && f == 'p': // DECSTR
		t.softReset()
	}
}

func (t *Terminal) csi(f byte) {
	n1 := t.arg(0, 1)
	switch f {
	case '@': // ICH
		t.restrictCursor()
		insertCells(t.rowW(t.y), t.x, n1, t.pen.blank())
	case 'A': // CUU
		s := t.scr()
		if d := t.y - s.top; d >= 0 {
			n1 = min(n1, d)
		}
		t.moveCursor(0, -n1)
	case 'B': // CUD
		s := t.scr()
		if d := s.bot - t.y; d >= 0 {
			n1 = min(n1, d)
		}
		t.moveCursor(0, n1)
	case 'C', 'a': // CUF, HPR
		t.moveCursor(min(n1, t.cols), 0)
	case 'D': // CUB
		t.moveCursor(-min(n1, t.cols), 0)
	case 'E', 'F': // CNL, CPL
		if f == 'E' {
			t.csi('B')
		} else {
			t.csi('A')
		}
		t.x = 0
	case 'G', '`': // CHA, HPA
		t.x = min(n1, t.cols) - 1
		t.restrictCursor()
	case 'H', 'f': // CUP, HVP
		t.setCursor(min(t.arg(1, 1), t.cols)-1, min(n1, t.rows)-1)
	case 'I': // CHT
		if !t.wrapPending {
			for range min(n1, t.cols) {
				t.x = t.nextStop(t.x)
			}
		}
	case 'J':
		t.eraseDisplay(t.arg(0, 0))
	case 'K':
		t.eraseLine(t.arg(0, 0))
	case 'L':
		t.insertLines(min(n1, t.rows))
	case 'M':
		t.deleteLines(min(n1, t.rows))
	case 'P': // DCH
		t.restrictCursor()
		deleteCells(t.rowW(t.y), t.x, n1, t.pen.blank())
	case 'S': // SU
		s := t.scr()
		t.scrollUp(s.top, s.bot, min(n1, t.rows), false)
	case 'T': // SD (xterm.js blanks with the default rendition); with 5 parameters, mouse tracking
		if t.nParams() <= 1 {
			s := t.scr()
			t.scrollDown(s.top, s.bot, min(n1, t.rows), cell{})
		}
	case 'X': // ECH
		t.restrictCursor()
		eraseCells(t.rowW(t.y), t.x, t.x+min(n1, t.cols), t.pen.blank())
	case 'Z': // CBT
		if !t.wrapPending {
			for range min(n1, t.cols) {
				t.x = t.prevStop(t.x)
			}
		}
	case 'b': // REP
		t.repeat(n1)
	case 'd': // VPA
		t.setCursor(t.x, min(n1, t.rows)-1)
	case 'e': // VPR
		t.moveCursor(0, min(n1, t.rows))
	case 'g': // TBC
		switch t.arg(0, 0) {
		case 0:
			t.clearTab(t.x)
		case 3:
			t.clearTabs()
		}
	case 'h', 'l': // SM, RM
		for i := range t.nParams() {
			switch t.params[i] {
			case 4:
				t.modes.Insert = f == 'h'
			case 20:
				t.modes.NewLine = f == 'h'
			}
		}
	case 'm':
		t.sgr()
	case 'r': // DECSTBM
		top := n1
		bot := t.arg(1, 0)
		if t.nParams() < 2 || bot > t.rows || bot == 0 {
			bot = t.rows
		}
		if bot > top {
			s := t.scr()
			s.top, s.bot = top-1, bot-1
			t.setCursor(0, 0)
		}
	case 's': // SCOSC
		t.saveCursor()
	case 'u': // SCORC
		t.restoreCursor()
	}
}

// setPrivateMode is DECSET (on) or DECRST.
func (t *Terminal) setPrivateMode(m int, on bool) {
	switch m {
	case 1:
		t.modes.AppCursor = on
	case 2:
		if on {
			t.cs.g = [4]byte{}
		}
	case 5:
		t.modes.ReverseVideo = on
	case 6:
		t.modes.Origin = on
		t.setCursor(0, 0)
	case 7:
		t.modes.Wraparound = on
	case 12:
		t.modes.CursorBlink = on
	case 25:
		t.modes.CursorVisible = on
	case 66:
		t.modes.AppKeypad = on
	case 9, 1000, 1002, 1003:
		if on {
			t.modes.MouseTracking = m
		} else {
			t.modes.MouseTracking = 0
		}
	case 1004:
		t.modes.FocusReporting = on
	case 1005, 1006, 1015, 1016:
		if on {
			t.modes.MouseEncoding = m
		} else if t.modes.MouseEncoding == m {
			t.modes.MouseEncoding = 0
		}
	case 2004:
		t.modes.BracketedPaste = on
	case 1048:
		if on {
			t.saveCursor()
		} else {
			t.restoreCursor()
		}
	case 47, 1047, 1049:
		if m == 1049 && on {
			t.saveCursor()
		}
		t.setAlt(on)
		if m == 1049 && !on {
			t.restoreCursor()
		}
	}
}

// softReset is DECSTR, as xterm.js does it.
func (t *Terminal) softReset() {
	s := t.scr()
	t.modes.CursorVisible = true
	s.top, s.bot = 0, t.rows-1
	t.pen = pen{}
	t.modes.AppCursor, t.modes.AppKeypad, t.modes.BracketedPaste = false, false, false
	t.modes.Origin, t.modes.Wraparound, t.modes.Insert = false, true, false
	t.modes.FocusReporting = false
	t.cs = charsets{}
	s.saved = savedCursor{}
}
