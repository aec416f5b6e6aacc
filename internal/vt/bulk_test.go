package vt

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// plainText is n lines of printable ASCII from empty to over two rows long (they wrap), each
// ended by CR LF (a cooked terminal), LF alone (a raw one: the next line starts where this one
// ended), now and then a lone CR (the next line overwrites this one) or nothing.
func plainText(r *rand.Rand, n, cols int) []byte {
	var b []byte
	for range n {
		w := r.IntN(cols + 2)
		switch r.IntN(6) {
		case 0:
			w = cols // a full row: the pending wrap
		case 1:
			w = r.IntN(2*cols + 3)
		}
		for i := range w {
			b = append(b, byte(0x20+(i*7+w)%95))
		}
		b = append(b, [...]string{"\r\n", "\r\n", "\n", "\n", "\r", ""}[r.IntN(6)]...)
	}
	return b
}

// leads put the terminal where the fast path applies, or nearly: each resets the rendition and
// ends with a line feed at the bottom row, some leaving a state the fast path must refuse.
var leads = []string{
	"", "\x1b[m\r\n", "\x1b[m\n", "\x1b[m\x1b[99Bab\n", "\x1b[m\x1b[99B\x1b[4C\n",
	"\x1b[m\x1b[1;2r\x1b[99;1H\n", "\x1b[m\x1b[2;99r\x1b[99B\n", "\x1b[m\x1b[r\x1b[99B\n",
	"\x1b[m\x1b[4h\x1b[99B\n", "\x1b[m\x1b[4l\x1b[99B\n", "\x1b[m\x1b[?7l\x1b[99B\n", "\x1b[m\x1b[?7h\x1b[99B\n",
	"\x1b[m\x1b[20h\x1b[99B\n", "\x1b[m\x1b[20l\x1b[99B\n", "\x1b[m\x1b(0\x1b[99B\n", "\x1b[m\x1b(B\x1b[99B\n",
	"\x1b[m\x1b[?1049h\x1b[99B\n", "\x1b[m\x1b[?1049l\x1b[99B\n", "\x1b[44m\x1b[99B\n", "\x1b[m\x1b[99B\x1b[99Cx\n",
}

// TestScrollTextMatchesPrinting feeds the same output, cut at random points, to a terminal
// with the plain-text fast path and to one printing every character, and checks after each
// Write that they hold the same: rows, history, cursor, pending wrap, the character for REP,
// modes, and rows' extents within bounds. The output mixes runs of plain text longer and
// shorter than the screen with the tokens of the round-trip test (renditions, moves, scroll
// regions, the alternate screen, charsets, REP), so that the fast path meets every state it
// must refuse.
func TestScrollTextMatchesPrinting(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	fast := 0
	for i := range 1500 {
		cols, rows := 2+r.IntN(30), 1+r.IntN(12)
		sb := []int{0, 3, 1000}[r.IntN(3)]
		a := New(cols, rows, Options{ScrollbackLines: sb})
		b := New(cols, rows, Options{ScrollbackLines: sb})
		b.noBulk = true
		var in []byte
		for range 1 + r.IntN(8) {
			if r.IntN(2) == 0 {
				in = append(in, leads[r.IntN(len(leads))]...)
				in = append(in, plainText(r, r.IntN(3*rows+3), cols)...)
			} else {
				in = append(in, randomOutput(r, 1+r.IntN(20))...)
			}
			if r.IntN(3) == 0 {
				in = append(in, "x\r\n\x1b[3b"...) // REP after a line: nothing to repeat
			}
		}
		for len(in) > 0 {
			n := min(len(in), 1+r.IntN(4*cols*rows))
			a.Write(in[:n])
			b.Write(in[:n])
			if da, db := dump(a), dump(b); da != db {
				t.Fatalf("case %d (%dx%d, history %d): after %q\nfast path:\n%s\nline by line:\n%s", i, cols, rows, sb, in[:n], da, db)
			}
			// dump leaves out REP's character and a pending wrap over a blank cell.
			if a.lastRune != b.lastRune || a.wrapPending != b.wrapPending {
				t.Fatalf("case %d (%dx%d, history %d): after %q: fast path REP %q wrap %v, line by line REP %q wrap %v",
					i, cols, rows, sb, in[:n], a.lastRune, a.wrapPending, b.lastRune, b.wrapPending)
			}
			checkExtents(t, fmt.Sprintf("case %d", i), a)
			in = in[n:]
		}
		fast += a.bulkRuns
	}
	if fast < 500 {
		t.Fatalf("the fast path took %d runs in 1,500 cases, want at least 500", fast)
	}
	t.Logf("the fast path took %d runs", fast)
}

// TestScrollTextLongFloodMatchesPrinting: floods of thousands of rows in one Write, more than
// the history and the screen hold, so the rows the fast path keeps wrap around its ring, give
// what printing gives, with a history of 1, 50 and 1,000 lines.
func TestScrollTextLongFloodMatchesPrinting(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for i := range 12 {
		cols, rows := 20+r.IntN(100), 2+r.IntN(40)
		sb := []int{1, 50, 1000}[i%3]
		a := New(cols, rows, Options{ScrollbackLines: sb})
		b := New(cols, rows, Options{ScrollbackLines: sb})
		b.noBulk = true
		lead := []byte("\r\n")
		var flood []byte // plain text the fast path takes whole: no lone CR
		for range 2000 + r.IntN(4000) {
			w := r.IntN(2*cols + 3)
			for j := range w {
				flood = append(flood, byte(0x20+(j*7+w)%95))
			}
			flood = append(flood, [...]string{"\r\n", "\n"}[r.IntN(2)]...)
		}
		for _, term := range []*Terminal{a, b} {
			term.Write(lead)
			term.Write(flood)
		}
		if a.bulkRuns == 0 {
			t.Fatalf("case %d: the fast path did not take the flood", i)
		}
		if da, db := dump(a), dump(b); da != db || a.lastRune != b.lastRune || a.wrapPending != b.wrapPending {
			t.Fatalf("case %d (%dx%d, history %d, %d bytes): fast path:\n%s\nline by line:\n%s", i, cols, rows, sb, len(flood), da, db)
		}
		checkExtents(t, fmt.Sprintf("case %d", i), a)
	}
}

// TestScrollTextTakesAFlood checks that the fast path takes a flood of plain text (so the
// test above compares it, not two slow paths), on a cooked terminal and on a raw one: the rows
// it leaves on the screen and in the history, and the cursor.
func TestScrollTextTakesAFlood(t *testing.T) {
	for _, tc := range []struct {
		name, eol, history, screen string
		x                          int
	}{
		{"CR LF", "\r\n", "line 2|line 3", "line 4\nline 5\n\n", 0},
		// LF alone: each line starts where the one before ended; "line 3" wraps at column 10.
		{"LF", "\n", "\x1b[18Cli|ne 3", "    line 4\n          line 5\n\n", 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			term := New(20, 3, Options{ScrollbackLines: 2})
			term.Write([]byte("\r\n\r\n")) // the cursor to the bottom row
			var flood []byte
			for i := range 6 {
				flood = fmt.Appendf(flood, "line %d%s", i, tc.eol)
			}
			// scrollText runs after a line feed; the Write above ended on one.
			used, skip := term.scrollText(flood)
			if used != len(flood) || skip != 0 {
				t.Fatalf("scrollText took %d bytes (skip %d) of %d, want all", used, skip, len(flood))
			}
			var hist []string
			for i := range term.sb.len() {
				hist = append(hist, string(term.sb.at(i)))
			}
			if got := strings.Join(hist, "|"); got != tc.history {
				t.Errorf("history: got %q, want %q", got, tc.history)
			}
			if got := string(term.AppendText(nil, SnapshotOptions{})); got != tc.screen {
				t.Errorf("screen: got %q, want %q", got, tc.screen)
			}
			if term.x != tc.x || term.y != 2 {
				t.Errorf("cursor: got %d,%d, want %d,2", term.x, term.y, tc.x)
			}
		})
	}
}
