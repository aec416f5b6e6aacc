package vt

import "unsafe"

// Size bounds: New and Resize clamp to them. Two columns at least, as in xterm.js, so that a
// wide character always fits on a row.
const (
	MinCols = 2
	MaxCols = 1000
	MinRows = 1
	MaxRows = 500

	// MaxScrollbackLines bounds Options.ScrollbackLines.
	MaxScrollbackLines = 100000
)

// Options configures a Terminal.
type Options struct {
	// ScrollbackLines bounds the normal buffer's history above the screen: lines that scrolled
	// off its top. 0 (the default) keeps none; at most MaxScrollbackLines.
	ScrollbackLines int
}

// Modes is the state of the terminal's modes that a program sets and a viewer's terminal has
// to reproduce.
type Modes struct {
	AltScreen      bool // the alternate screen buffer is active (47, 1047, 1049)
	AppCursor      bool // DECCKM (?1)
	AppKeypad      bool // DECKPAM (ESC =, ?66)
	BracketedPaste bool // ?2004
	MouseTracking  int  // 0 none, 9 X10, 1000 normal, 1002 button-event, 1003 any-event
	MouseEncoding  int  // 0 default, 1005 UTF-8, 1006 SGR, 1015 urxvt, 1016 SGR pixels
	FocusReporting bool // ?1004
	Origin         bool // DECOM (?6)
	Wraparound     bool // DECAWM (?7), on by default
	Insert         bool // IRM (4)
	NewLine        bool // LNM (20): LF, VT and FF also return the carriage
	ReverseVideo   bool // DECSCNM (?5)
	CursorVisible  bool // DECTCEM (?25), on by default
	CursorBlink    bool // ?12
	CursorStyle    int  // DECSCUSR Ps, 0-6 (0 the terminal's default)
}

var defaultModes = Modes{Wraparound: true, CursorVisible: true}

// savedCursor is what DECSC saves and DECRC restores.
type savedCursor struct {
	x, y int
	pen  pen
	cs   charsets
}

// charsets are the G0-G3 designations (0 ASCII, '0' DEC special graphics, 'A' UK) and which
// of them is invoked into GL.
type charsets struct {
	g  [4]byte
	gl uint8
}

// screen is one buffer (normal or alternate): its rows, kept as a ring so that scrolling the
// whole screen moves no cells, its scroll region, tab stops and saved cursor (all per buffer,
// as in xterm.js).
type screen struct {
	lines    []row // the ring of rows; row y is lines[(head+y)%len(lines)]
	head     int
	top, bot int       // scroll region, inclusive
	tabs     *tabStops // nil: a stop every 8 columns
	saved    savedCursor
}

// Terminal is a terminal model. It is not safe for concurrent use: its owner serializes calls.
type Terminal struct {
	// immutable after New:
	sbMax int

	cols, rows int

	// parser state (parser.go)
	state uint8
	un    uint8   // bytes of a partial UTF-8 sequence in ubuf
	ubuf  [4]byte // a UTF-8 sequence cut by the end of a Write
	// pend holds the raw bytes of the sequence the parser is in (from the byte that left the
	// ground state), for AppendPending; empty in the ground state. Bounded by maxPend.
	pend   []byte
	np     uint8  // parameters collected
	sub    uint32 // bit i: parameter i followed a ':'
	prefix byte   // CSI private marker (< = > ?), 0 if none
	ninter uint8  // intermediates collected (more than 2 makes the sequence invalid)
	inter  [2]byte
	params [maxParams]int32
	osc    []byte // the OSC string (bounded by maxOSC)
	oscBig bool   // the OSC string passed maxOSC: drop it

	// the model
	main, alt   screen
	altOn       bool
	x, y        int
	wrapPending bool // a character was printed in the last column; the next one wraps first
	pen         pen
	cs          charsets
	lastRune    rune // the last printed character, for REP; 0 after anything else
	modes       Modes
	title       string
	sb          scrollback
	tmp         []row // scratch for scrolling

	// noBulk turns the plain-text fast path (scrollText) off, for the test that compares it
	// with printing line by line; bulkRuns counts the runs it took, for that test.
	noBulk   bool
	bulkRuns int
}

// New returns a terminal of cols x rows (clamped to [MinCols, MaxCols] x [MinRows, MaxRows]),
// blank, with the cursor home and every mode at its default.
func New(cols, rows int, o Options) *Terminal {
	t := &Terminal{sbMax: min(max(o.ScrollbackLines, 0), MaxScrollbackLines)}
	t.cols, t.rows = clampSize(cols, rows)
	t.reset()
	return t
}

func clampSize(cols, rows int) (int, int) {
	return min(max(cols, MinCols), MaxCols), min(max(rows, MinRows), MaxRows)
}

// reset is RIS: everything but the size and the title back to how New leaves it.
func (t *Terminal) reset() {
	t.state, t.un, t.osc, t.oscBig = stGround, 0, nil, false
	t.pend = nil
	t.main = screen{lines: make([]row, t.rows), bot: t.rows - 1}
	t.alt = screen{bot: t.rows - 1}
	t.altOn = false
	t.x, t.y, t.wrapPending = 0, 0, false
	t.pen = pen{}
	t.cs = charsets{}
	t.lastRune = 0
	t.modes = defaultModes
	t.sb = scrollback{max: t.sbMax}
}

// Reset is RIS (ESC c): a hard reset that keeps the size (and the title, as xterm.js does).
func (t *Terminal) Reset() { t.reset() }

// Size returns the terminal's size in columns and rows.
func (t *Terminal) Size() (cols, rows int) { return t.cols, t.rows }

// AtGround reports whether the parser is in its ground state with no partial UTF-8 sequence
// pending, so that a byte stream cut here starts cleanly.
func (t *Terminal) AtGround() bool { return t.state == stGround && t.un == 0 }

// Modes returns the current modes.
func (t *Terminal) Modes() Modes {
	m := t.modes
	m.AltScreen = t.altOn
	return m
}

// Title returns the window title (OSC 0 or 2).
func (t *Terminal) Title() string { return t.title }

// MemBytes returns the approximate heap bytes the terminal holds: the struct, the rows' cells,
// the scrollback and the parser's buffers.
func (t *Terminal) MemBytes() int {
	n := int(unsafe.Sizeof(*t)) + cap(t.osc) + len(t.title) + cap(t.tmp)*int(unsafe.Sizeof(row{}))
	for _, s := range []*screen{&t.main, &t.alt} {
		n += cap(s.lines) * int(unsafe.Sizeof(row{}))
		for _, r := range s.lines {
			n += cap(r.l) * int(unsafe.Sizeof(cell{}))
		}
		if s.tabs != nil {
			n += int(unsafe.Sizeof(*s.tabs))
		}
	}
	return n + t.sb.memBytes()
}

// scr returns the active buffer.
func (t *Terminal) scr() *screen {
	if t.altOn {
		return &t.alt
	}
	return &t.main
}

// row returns a pointer to row y of s (whose line may be nil).
func (s *screen) row(y int) *row {
	i := s.head + y
	if i >= len(s.lines) {
		i -= len(s.lines)
	}
	return &s.lines[i]
}

// rowW returns row y of the active buffer, its line allocated for writing. A writer that
// leaves a cell other than cell{} raises the row's extent past it (row.touch).
func (t *Terminal) rowW(y int) *row {
	r := t.scr().row(y)
	if r.l == nil {
		r.l = make(line, t.cols)
	}
	return r
}

// linearize makes s's ring start at index 0.
func (s *screen) linearize() {
	if s.head == 0 {
		return
	}
	n := make([]row, len(s.lines))
	for y := range n {
		n[y] = *s.row(y)
	}
	s.lines, s.head = n, 0
}
