package main

import (
	"fmt"
	"os"
	"strings"
	"time"
	"unicode/utf8"
)

// createdText is a session's creation time (RFC 3339) as ls shows it: how long ago in whole
// seconds, minutes or hours within a day, else the local date and time to the second. A time it
// cannot read is shown as it came.
func createdText(created string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, created)
	if err != nil {
		return created
	}
	switch d := now.Sub(t); {
	case d < 0:
		return t.Local().Format(time.DateTime)
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return t.Local().Format(time.DateTime)
}

// fitTable lays rows (the header first) out in columns two spaces apart. With width > 0 it
// fits them in width: while the table is wider it leaves out the columns of drop, in that
// order, and then cuts each line that is still wider, ending it with "…".
func fitTable(rows [][]string, width int, drop []int) string {
	keep := make([]bool, len(rows[0]))
	for i := range keep {
		keep[i] = true
	}
	render := func() []string {
		widths := make([]int, len(keep))
		for _, r := range rows {
			for i, cell := range r {
				widths[i] = max(widths[i], utf8.RuneCountInString(cell))
			}
		}
		last := lastKept(keep) // the last column is not padded
		var lines []string
		for _, r := range rows {
			var b strings.Builder
			for i, cell := range r {
				if !keep[i] {
					continue
				}
				if b.Len() > 0 {
					b.WriteString("  ")
				}
				b.WriteString(cell)
				if i < last {
					b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell)))
				}
			}
			lines = append(lines, b.String())
		}
		return lines
	}
	widest := func(lines []string) int {
		w := 0
		for _, l := range lines {
			w = max(w, utf8.RuneCountInString(l))
		}
		return w
	}
	lines := render()
	for _, col := range drop {
		if width <= 0 || widest(lines) <= width {
			break
		}
		keep[col] = false
		lines = render()
	}
	var b strings.Builder
	for _, l := range lines {
		if width > 0 && utf8.RuneCountInString(l) > width {
			l = string([]rune(l)[:max(width-1, 0)]) + "…"
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// lastKept is the index of the last column kept.
func lastKept(keep []bool) int {
	for i := len(keep) - 1; i >= 0; i-- {
		if keep[i] {
			return i
		}
	}
	return -1
}

// stdoutWidth is the width of the terminal on stdout, or 0 when stdout is no terminal (a pipe
// or a file gets every column, whole).
func (a *app) stdoutWidth() int {
	f, ok := a.stdout.(*os.File)
	if !ok || !isTerminal(f) {
		return 0
	}
	w, _, err := termSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return w
}
