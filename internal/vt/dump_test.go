package vt

import (
	"fmt"
	"strings"
)

// dump is a canonical description of everything the model holds that a snapshot carries: two
// terminals with the same dump are the same. (The character REP would repeat is left out: a
// snapshot cannot carry it.)
func dump(t *Terminal) string {
	var b strings.Builder
	// A pending wrap over a cell nothing was printed in is one thing a snapshot cannot carry.
	wrap := t.wrapPending
	if l := *t.scr().row(t.y); l == nil || l[t.cols-1].r() == 0 {
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
			l := *s.row(y)
			if l == nil {
				l = make(line, t.cols)
			}
			fmt.Fprintf(&b, "%s %2d %v\n", name, y, []cell(l))
		}
	}
	return b.String()
}
