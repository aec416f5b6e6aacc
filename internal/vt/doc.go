// Package vt is a terminal model: an xterm-compatible emulator without a display, fed every
// output byte of a PTY session so that the gateway can repaint a fresh terminal from it
// (AppendSnapshot), read the screen as text (AppendText), and give a detaching user's terminal
// its modes back (AppendRestore).
//
// The model holds both screen buffers (normal and alternate) cell by cell — character, width
// (wide characters by the Unicode 11 table of xterm.js's unicode11 addon, which the frontend
// uses), rendition (bold, dim, italic, underline and its style, blink, inverse, invisible,
// strikethrough, overline, 16/256/true colours) — a bounded scrollback of the normal buffer,
// the cursor (position, pending wrap, visibility, style, DECSC slots), scroll regions, tab
// stops, G0-G3 charsets (ASCII, DEC special graphics, UK), the modes a viewer's terminal must
// share (Modes) and the window title. Its parser is Paul Williams' state machine with
// xterm.js's transitions, over UTF-8 (invalid bytes print U+FFFD); it bounds its parameters
// (32) and OSC strings (4 KiB; longer ones are dropped), so memory stays bounded whatever the
// input. It answers nothing: queries (DA, DSR, DECRQM, OSC colour queries) are parsed and
// ignored.
//
// It does not reflow lines on resize (rows are cut or extended, as xterm does), keep combining
// marks (zero-width characters are dropped; xterm.js joins them to the previous cell),
// hyperlink targets (OSC 8), underline colours (SGR 58), national charsets other than UK,
// protected cells, left/right margins, sixel or other DCS content.
//
// It exists for speed. A gateway feeds it everything a session prints, so the model must cost
// little per byte: rows are slices of 12-byte cells kept in a ring, so scrolling the whole
// screen rotates the ring and clears one row instead of copying cells; runs of printable ASCII
// are written without going through the state machine; history rows are kept serialized, a
// fraction of their cells' size and ready for the snapshot; plain text that scrolls a screen or
// more within one Write (a plain-text log, `seq`, `base64`, cooked or raw) goes to the history
// straight from its bytes, and only the rows left on the screen are written into cells
// (bulk.go). The general-purpose models (charmbracelet/x/vt copies cells for every scrolled
// line; hinshun/vt10x has no wide characters) are several times too slow or incomplete for this.
//
// A Terminal is not safe for concurrent use: its owner serializes calls.
package vt
