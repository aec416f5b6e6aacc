package vt

import (
	"fmt"
	"strings"
	"testing"
)

// dump is a canonical description of everything the model holds that a snapshot carries: two
// terminals with the same dump are the same. (The character REP would repeat is left out: a
// snapshot cannot carry it.)
func dump(t *Terminal) string {
	var b strings.Builder
	// A pending wrap over a cell nothing was printed in is one thing a snapshot cannot carry.
	wrap := t.wrapPending
	if l := t.scr().row(t.y).l; l == nil || l[t.cols-1].r() == 0 {
		wrap = false
	}
	fmt.Fprintf(&b, "size %dx%d cursor %d,%d wrap %v alt %v\n", t.cols, t.rows, t.x, t.y, wrap, t.altOn)
	fmt.Fprintf(&b, "pen %+v cs %+v modes %+v title %q\n", t.pen, t.cs, t.modes, t.title)
	for i := range t.sb.len() {
		fmt.Fprintf(&b, "sb %q\n", t.sb.at(i))
	}
	for i, s := range []*screen{&t.main, &t.alt} {
		name := [...]string{"main", "alt"}[i]
		fmt.Fprintf(&b, "%s region %d-%d saved %+v tabs", name, s.top, s.bot, s.saved)
		for x := range t.cols {
			if s.isTab(x) {
				fmt.Fprintf(&b, " %d", x)
			}
		}
		b.WriteByte('\n')
		for y := range len(s.lines) {
			l := s.row(y).l
			if l == nil {
				l = make(line, t.cols)
			}
			fmt.Fprintf(&b, "%s %2d %v\n", name, y, []cell(l))
		}
	}
	return b.String()
}

// checkExtents checks every row's extent: within the row, and nothing but cell{} past it.
func checkExtents(t *testing.T, name string, term *Terminal) {
	t.Helper()
	for i, s := range []*screen{&term.main, &term.alt} {
		for y := range len(s.lines) {
			r := s.row(y)
			if r.ext < 0 || r.ext > len(r.l) {
				t.Errorf("%s: %s row %d: got extent %d, want it in [0, %d]", name, [...]string{"main", "alt"}[i], y, r.ext, len(r.l))
				continue
			}
			for x := r.ext; x < len(r.l); x++ {
				if r.l[x] != (cell{}) {
					t.Errorf("%s: %s row %d: got cell %+v at column %d, past the extent %d", name, [...]string{"main", "alt"}[i], y, r.l[x], x, r.ext)
					break
				}
			}
		}
	}
}
