package vt

import (
	"slices"
	"strconv"
	"unicode/utf8"
)

// scrollback is the normal buffer's history: the rows that scrolled off the top, oldest first,
// each kept serialized (appendRow) in a ring of at most max. A serialized row is what the
// snapshot replays, so it costs no work there; it is a fraction of the row's cells in memory.
type scrollback struct {
	max   int
	buf   [][]byte // ring; while len(buf) < max, start is 0
	start int
	n     int
}

func (s *scrollback) len() int { return s.n }

// at returns row i, 0 the oldest.
func (s *scrollback) at(i int) []byte { return s.buf[(s.start+i)%len(s.buf)] }

// push appends a row, dropping the oldest if the ring is full. Once the ring is full, a row
// is serialized into the buffer of the row it drops, so pushing allocates nothing unless that
// buffer is too small, or far too big to keep for this row.
func (s *scrollback) push(l line) {
	slot := s.slot()
	s.keep(slot, appendRow((*slot)[:0], l))
}

// pushText appends a row that is blank up to column x0 and holds text (printable ASCII) in the
// default rendition from there: serialized as appendRow serializes it.
func (s *scrollback) pushText(x0 int, text []byte) {
	slot := s.slot()
	b := (*slot)[:0]
	if len(text) > 0 && x0 > 0 {
		b = appendCSI(b, x0, 'C')
	}
	s.keep(slot, append(b, text...))
}

// slot makes room for a row at the ring's end and returns where it goes.
func (s *scrollback) slot() *[]byte {
	switch {
	case s.n < len(s.buf):
		s.n++
		return &s.buf[(s.start+s.n-1)%len(s.buf)]
	case len(s.buf) < s.max:
		s.buf = append(s.buf, nil)
		s.n++
		return &s.buf[len(s.buf)-1]
	}
	slot := &s.buf[s.start]
	s.start++
	if s.start == len(s.buf) {
		s.start = 0
	}
	return slot
}

// keep stores row b, built in slot's buffer, copied out if that buffer is far too big for it.
func (s *scrollback) keep(slot *[]byte, b []byte) {
	if cap(b) > 2*len(b)+128 {
		b = append([]byte(nil), b...)
	}
	*slot = b
}

// pop removes and returns the newest row.
func (s *scrollback) pop() []byte {
	s.n--
	return s.at(s.n)
}

func (s *scrollback) clear() { *s = scrollback{max: s.max} }

func (s *scrollback) memBytes() int {
	n := cap(s.buf) * 24
	for _, b := range s.buf {
		n += cap(b)
	}
	return n
}

// appendRow appends row l serialized for a terminal whose rendition is the default and whose
// cursor is at the row's start on a blank row: SGR, text, CUF over untouched cells, ECH for
// erased ones with a background. It resets the rendition at the end if it changed it. Cells
// nothing was written in at the row's end are left out. Decoding it (decodeRow), or writing it
// into a terminal, gives back exactly l.
func appendRow(dst []byte, l line) []byte {
	end := len(l)
	for end > 0 && l[end-1] == (cell{}) {
		end--
	}
	var cur cell // the receiving terminal's rendition
	for i := 0; i < end; {
		c := l[i]
		r := c.c & runeMask
		if r != 0 && c.c&attrMask == cur.c && c.fg == cur.fg && c.bg == cur.bg {
			switch {
			case r < utf8.RuneSelf:
				// The common case, and all of a plain row.
				var n int
				dst, n = appendASCII(dst, l[i:end], cur)
				i += n
			case r != runeWideTail:
				dst = utf8.AppendRune(dst, rune(r))
				i++
			default:
				i++
			}
			continue
		}
		if r == runeWideTail {
			i++
			continue
		}
		if r == 0 {
			j := i + 1
			for j < end && l[j].c&runeMask == 0 && l[j].bg == c.bg {
				j++
			}
			if c.bg != 0 {
				if cur.c != 0 || cur.fg != 0 || cur.bg != c.bg {
					cur = cell{bg: c.bg}
					dst = appendSGR(dst, cur)
				}
				dst = appendCSI(dst, j-i, 'X')
			}
			if j < end {
				dst = appendCSI(dst, j-i, 'C')
			}
			i = j
			continue
		}
		cur = cell{c: c.c & attrMask, fg: c.fg, bg: c.bg}
		dst = appendSGR(dst, cur)
	}
	if cur != (cell{}) {
		dst = append(dst, "\x1b[m"...)
	}
	return dst
}

// appendASCII appends the characters of the cells at l's start that hold an ASCII character
// in rendition cur, a byte each, and returns how many cells it took. It makes room for all of
// l at once, so that its loop (a function of its own to keep it in registers) only loads,
// compares and stores.
func appendASCII(dst []byte, l line, cur cell) ([]byte, int) {
	dst = slices.Grow(dst, len(l))
	k := len(dst)
	run := dst[k : k+len(l)]
	for n, c := range l {
		r := c.c ^ cur.c // the rune if c has cur's attributes, else above runeMask
		if r-1 >= utf8.RuneSelf-1 || (c.fg^cur.fg)|(c.bg^cur.bg) != 0 {
			return dst[:k+n], n
		}
		run[n] = byte(r)
	}
	return dst[:k+len(l)], len(l)
}

// appendCSI appends CSI n f.
func appendCSI(dst []byte, n int, f byte) []byte {
	dst = append(dst, "\x1b["...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, f)
}

// appendSGR appends the SGR sequence that sets exactly c's rendition.
func appendSGR(dst []byte, c cell) []byte {
	dst = append(dst, "\x1b[0"...)
	a := c.c & attrMask
	for _, f := range [...]struct {
		bit uint32
		s   string
	}{{attrBold, ";1"}, {attrDim, ";2"}, {attrItalic, ";3"}, {attrBlink, ";5"}, {attrInverse, ";7"},
		{attrInvisible, ";8"}, {attrStrike, ";9"}, {attrOverline, ";53"}} {
		if a&f.bit != 0 {
			dst = append(dst, f.s...)
		}
	}
	switch ul := (a & attrULMask) >> attrULShift; ul {
	case 0:
	case 1:
		dst = append(dst, ";4"...)
	default:
		dst = append(dst, ";4:"...)
		dst = append(dst, byte('0'+ul))
	}
	dst = appendColor(dst, c.fg, 30, 90, "38")
	dst = appendColor(dst, c.bg, 40, 100, "48")
	return append(dst, 'm')
}

func appendColor(dst []byte, c uint32, base, bright int, ext string) []byte {
	v := c & 0xffffff
	switch c & cmMask {
	case cmP16:
		dst = append(dst, ';')
		if v < 8 {
			return strconv.AppendInt(dst, int64(base)+int64(v), 10)
		}
		return strconv.AppendInt(dst, int64(bright)+int64(v&7), 10)
	case cmP256:
		dst = append(dst, ';')
		dst = append(dst, ext...)
		dst = append(dst, ";5;"...)
		return strconv.AppendInt(dst, int64(v), 10)
	case cmRGB:
		dst = append(dst, ';')
		dst = append(dst, ext...)
		dst = append(dst, ";2;"...)
		dst = strconv.AppendInt(dst, int64(v>>16), 10)
		dst = append(dst, ';')
		dst = strconv.AppendInt(dst, int64(v>>8&0xff), 10)
		dst = append(dst, ';')
		return strconv.AppendInt(dst, int64(v&0xff), 10)
	}
	return dst
}

// decodeRow decodes a row appendRow made into a line of cols cells. Cells past cols are
// dropped, and a wide character cut in half by the edge with them.
func decodeRow(src []byte, cols int) line {
	l := make(line, cols)
	var p pen
	x := 0
	for len(src) > 0 {
		if src[0] == 0x1b && len(src) > 1 && src[1] == '[' {
			var ps [maxParams]int32
			var sub uint32
			np := 1
			i := 2
			for ; i < len(src) && (src[i] >= '0' && src[i] <= '9' || src[i] == ';' || src[i] == ':'); i++ {
				switch b := src[i]; b {
				case ';', ':':
					if np < maxParams {
						if b == ':' {
							sub |= 1 << np
						}
						np++
					}
				default:
					ps[np-1] = ps[np-1]*10 + int32(b-'0')
				}
			}
			if i >= len(src) {
				break
			}
			n := max(int(ps[0]), 1)
			switch src[i] {
			case 'm':
				if i == 2 {
					p = pen{}
				} else {
					p = applySGR(p, ps[:np], sub)
				}
			case 'C':
				x += n
			case 'X':
				for k := x; k < min(x+n, cols); k++ {
					l[k] = p.blank()
				}
			}
			src = src[i+1:]
			continue
		}
		r, size := utf8.DecodeRune(src)
		src = src[size:]
		w := runeWidth(r)
		if w == 0 {
			continue
		}
		if x+w <= cols {
			l[x] = p.cell(r)
			if w == 2 {
				l[x+1] = p.cell(runeWideTail)
			}
		}
		x += w
	}
	return l
}
