package vt

// A cell is one column of one row: 12 bytes.
//
// c holds the rune in bits 0-20 and the attribute flags in bits 21-31; fg and bg hold a colour
// each, laid out as xterm.js lays out its own: the colour mode in bits 24-25 (cmDefault,
// cmP16, cmP256, cmRGB) and the palette index or 0xRRGGBB in bits 0-23.
//
// A rune of 0 is a cell nothing was printed in (blank; erasing makes those, keeping only the
// background colour, as xterm does with BCE). runeWideTail marks the second column of a wide
// character; its head is the cell to its left, whose rune is two columns wide.
type cell struct {
	c  uint32
	fg uint32
	bg uint32
}

const (
	runeMask     = 1<<21 - 1
	runeWideTail = runeMask // above U+10FFFF, so never a real rune
)

// Attribute flags, in a cell's c (and a pen's a).
const (
	attrBold      uint32 = 1 << 21
	attrDim       uint32 = 1 << 22
	attrItalic    uint32 = 1 << 23
	attrULShift          = 24 // underline style: 0 none, 1 single, 2 double, 3 curly, 4 dotted, 5 dashed
	attrULMask    uint32 = 7 << attrULShift
	attrBlink     uint32 = 1 << 27
	attrInverse   uint32 = 1 << 28
	attrInvisible uint32 = 1 << 29
	attrStrike    uint32 = 1 << 30
	attrOverline  uint32 = 1 << 31
	attrMask      uint32 = ^uint32(runeMask)
)

// Colour modes, in bits 24-25 of fg and bg.
const (
	cmDefault uint32 = 0
	cmP16     uint32 = 1 << 24 // 30-37, 90-97 (index 0-15)
	cmP256    uint32 = 2 << 24 // 38;5;n
	cmRGB     uint32 = 3 << 24 // 38;2;r;g;b
	cmMask    uint32 = 3 << 24
	colorMask uint32 = 1<<26 - 1
)

func (c cell) r() rune      { return rune(c.c & runeMask) }
func (c cell) isTail() bool { return c.c&runeMask == runeWideTail }

// isWideHead reports whether the cell holds a character two columns wide.
func (c cell) isWideHead() bool {
	r := c.c & runeMask
	return r >= 0x1100 && r != runeWideTail && runeWidth(rune(r)) == 2
}

// pen is the current graphic rendition (SGR): attribute flags and colours.
type pen struct {
	a, fg, bg uint32
}

func (p pen) cell(r rune) cell { return cell{c: uint32(r) | p.a, fg: p.fg, bg: p.bg} }

// blank is the cell erasing makes under this pen: no rune, the background colour only.
func (p pen) blank() cell { return cell{bg: p.bg} }

// A line is one row's cells; nil is a row nothing has touched (all blank, default colours).
type line []cell

// A row is a line of a screen with its extent: ext bounds the columns that may hold anything,
// so every cell at or past it is cell{}. It is an upper bound, not the exact extent: writing
// a cell that is not cell{} raises it past that cell, erasing to the end with the default
// rendition lowers it, and operations that move cells right (ICH, insert mode) raise it by
// as many columns as they move them. Serializing a row (appendRow) and clearing it cost its
// extent, not its width, so a short line in a wide terminal costs what it holds.
type row struct {
	l   line
	ext int
}

// used returns the cells of r that may hold anything: l[:ext] (nil for an untouched row).
func (r *row) used() line { return r.l[:r.ext] }

// touch notes that the cells before x may now hold something.
func (r *row) touch(x int) {
	if x > r.ext {
		r.ext = x
	}
}

// lineRow returns a row of l, its extent measured.
func lineRow(l line) row {
	end := len(l)
	for end > 0 && l[end-1] == (cell{}) {
		end--
	}
	return row{l: l, ext: end}
}
