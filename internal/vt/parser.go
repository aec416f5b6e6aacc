package vt

import (
	"encoding/binary"
	"unicode/utf8"
)

// The parser is Paul Williams' DEC ANSI parser (vt100.net/emu/dec_ansi_parser) with
// xterm.js's transition table: it runs over code points, after UTF-8 decoding, so C1 controls
// are only the code points U+0080-U+009F (as in xterm.js); a raw byte 0x80-0xFF that is not
// part of valid UTF-8 becomes U+FFFD and prints.
const (
	stGround = iota
	stEscape
	stEscInter
	stCSIEntry
	stCSIParam
	stCSIInter
	stCSIIgnore
	stOSC
	stDCSEntry
	stDCSParam
	stDCSInter
	stDCSPass
	stDCSIgnore
	stSOS // SOS, PM, APC: ignored to ST
)

const (
	maxParams = 32        // parameters and sub-parameters of one sequence, as xterm.js
	maxParam  = 1<<31 - 1 // a parameter's value saturates here
	maxOSC    = 4096      // an OSC string longer than this is dropped
)

// maxPend bounds the bytes AppendPending keeps of an unfinished sequence: an OSC longer than
// maxOSC is dropped whatever follows, so its head stands for it.
const maxPend = maxOSC + 64

// Write feeds output bytes of the program to the terminal. It always returns len(p), nil.
func (t *Terminal) Write(p []byte) (int, error) {
	n := len(p)
	orig := p
	seq := -1 // where in orig the parser last left the ground state, if it did in this Write
	// scrollText is tried after a line feed with at most bulkFrom bytes left: past a run it
	// found too short, not again inside it.
	bulkFrom := len(p)
	if t.un > 0 {
		p = t.finishUTF8(p)
	}
	for len(p) > 0 {
		b := p[0]
		if t.state == stGround {
			if b >= 0x20 && b < 0x7f {
				i := printableRun(p)
				t.printASCII(p[:i])
				p = p[i:]
				continue
			}
			if b < 0x20 && b != 0x1b {
				t.execute(rune(b))
				p = p[1:]
				if b == '\n' && len(p) > 0 && len(p) <= bulkFrom {
					used, skip := t.scrollText(p)
					p = p[used:]
					bulkFrom = len(p) - skip
				}
				continue
			}
		}
		if b < 0x80 {
			if t.state == stGround {
				seq = n - len(p)
			}
			t.advance(rune(b))
			p = p[1:]
			continue
		}
		if !utf8.FullRune(p) {
			t.un = uint8(copy(t.ubuf[:], p))
			break
		}
		r, size := utf8.DecodeRune(p)
		if t.state == stGround && r >= 0xa0 {
			t.printRune(r)
		} else {
			if t.state == stGround {
				seq = n - len(p)
			}
			t.advance(r)
		}
		p = p[size:]
	}
	t.notePending(orig, seq)
	return n, nil
}

// printableRun returns the length of the run of printable ASCII (0x20-0x7e) at p's start:
// its first 8 bytes one at a time (short runs, like yes's or seq's lines, end there), then 8
// bytes at a time while it can.
func printableRun(p []byte) int {
	const (
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	i := 0
	for n := min(len(p), 8); i < n; i++ {
		if p[i] < 0x20 || p[i] >= 0x7f {
			return i
		}
	}
	for ; i+8 <= len(p); i += 8 {
		// The lowest byte of v outside 0x20-0x7e sets its high bit in one of these (a byte
		// below 0x20 in v-0x20…, 0x7f in v+1…, the rest in v); the bytes below it are in
		// range, so no borrow or carry reaches it. Bytes past it may be wrong: the loop
		// below finds where the run ends.
		v := binary.LittleEndian.Uint64(p[i:])
		if ((v-0x20*ones)|(v+ones)|v)&high != 0 {
			break
		}
	}
	for i < len(p) && p[i] >= 0x20 && p[i] < 0x7f {
		i++
	}
	return i
}

// notePending keeps the raw bytes of the sequence left unfinished at the end of orig, the
// bytes of a Write; seq is where in orig the parser last left the ground state (-1: it did
// not in this Write, so the sequence, if any, began in an earlier one).
func (t *Terminal) notePending(orig []byte, seq int) {
	switch {
	case t.state == stGround:
		t.pend = t.pend[:0]
		return
	case seq >= 0:
		t.pend = append(t.pend[:0], orig[seq:min(len(orig), seq+maxPend)]...)
	case len(t.pend) < maxPend:
		t.pend = append(t.pend, orig[:min(len(orig), maxPend-len(t.pend))]...)
	}
}

// AppendPending appends the raw bytes of a sequence the output began and has not finished
// (an escape sequence, or a UTF-8 character, cut by the end of the last Write), and nothing
// between sequences. A terminal that is sent a snapshot and then these bytes parses what
// follows as this terminal will: as the rest of that sequence. An unfinished OSC longer than
// maxPend bytes is kept as its first maxPend bytes, which is dropped whatever its end.
func (t *Terminal) AppendPending(dst []byte) []byte {
	if t.state == stGround {
		return append(dst, t.ubuf[:t.un]...)
	}
	return append(dst, t.pend...)
}

// finishUTF8 completes the sequence in ubuf with the first bytes of p and returns the rest.
func (t *Terminal) finishUTF8(p []byte) []byte {
	for t.un > 0 {
		var buf [utf8.UTFMax]byte
		k := copy(buf[:], t.ubuf[:t.un])
		k += copy(buf[k:], p)
		if !utf8.FullRune(buf[:k]) {
			n := copy(t.ubuf[t.un:], p) // still short: p is all used
			t.un += uint8(n)
			return nil
		}
		r, size := utf8.DecodeRune(buf[:k])
		if size <= int(t.un) { // invalid: one byte of ubuf becomes U+FFFD
			copy(t.ubuf[:], t.ubuf[1:t.un])
			t.un--
			t.code(utf8.RuneError)
			continue
		}
		p = p[size-int(t.un):]
		t.un = 0
		t.code(r)
	}
	return p
}

// code handles one decoded code point in any state.
func (t *Terminal) code(r rune) {
	if t.state == stGround && r >= 0xa0 {
		t.printRune(r)
		return
	}
	if t.state == stGround && r >= 0x20 && r < 0x7f {
		t.printRune(r)
		return
	}
	t.advance(r)
}

// advance runs the state machine for one code point that is not a printable character in
// the ground state (those take printASCII and printRune).
func (t *Terminal) advance(r rune) {
	// transitions from anywhere
	switch {
	case r == 0x18 || r == 0x1a: // CAN, SUB
		if t.state == stOSC {
			t.osc, t.oscBig = t.osc[:0], false // cancelled: not dispatched
		}
		t.state = stGround
		return
	case r == 0x1b:
		t.endString(true)
		t.clearSeq()
		t.state = stEscape
		return
	case r >= 0x80 && r < 0xa0:
		t.endString(r == 0x9c)
		t.lastRune = 0
		switch r {
		case 0x9c: // ST
			t.state = stGround
		case 0x9d:
			t.startOSC()
		case 0x98, 0x9e, 0x9f:
			t.state = stSOS
		case 0x9b:
			t.clearSeq()
			t.state = stCSIEntry
		case 0x90:
			t.clearSeq()
			t.state = stDCSEntry
		default:
			t.state = stGround
			t.executeC1(r)
		}
		return
	}
	switch t.state {
	case stGround:
		switch {
		case r < 0x20:
			t.execute(r)
		case r == 0x7f:
		default:
			t.printRune(r)
		}
	case stEscape:
		switch {
		case r < 0x20:
			t.execute(r)
		case r == 0x7f:
		case r < 0x30:
			t.collect(byte(r))
			t.state = stEscInter
		case r == 'P':
			t.state = stDCSEntry
		case r == '[':
			t.state = stCSIEntry
		case r == ']':
			t.startOSC()
		case r == 'X' || r == '^' || r == '_':
			t.state = stSOS
		case r < 0x7f:
			t.state = stGround
			t.escDispatch(byte(r))
		default:
			t.state = stGround
		}
	case stEscInter:
		switch {
		case r < 0x20:
			t.execute(r)
		case r == 0x7f:
		case r < 0x30:
			t.collect(byte(r))
		case r < 0x7f:
			t.state = stGround
			t.escDispatch(byte(r))
		default:
			t.state = stGround
		}
	case stCSIEntry, stCSIParam:
		switch {
		case r < 0x20:
			t.execute(r)
		case r == 0x7f:
		case r < 0x30:
			t.collect(byte(r))
			t.state = stCSIInter
		case r < 0x3c:
			t.param(byte(r))
			t.state = stCSIParam
		case r < 0x40:
			if t.state == stCSIEntry {
				t.prefix = byte(r)
				t.state = stCSIParam
			} else {
				t.state = stCSIIgnore
			}
		case r < 0x7f:
			t.state = stGround
			t.csiDispatch(byte(r))
		default:
			t.state = stGround
		}
	case stCSIInter:
		switch {
		case r < 0x20:
			t.execute(r)
		case r == 0x7f:
		case r < 0x30:
			t.collect(byte(r))
		case r < 0x40:
			t.state = stCSIIgnore
		case r < 0x7f:
			t.state = stGround
			t.csiDispatch(byte(r))
		default:
			t.state = stGround
		}
	case stCSIIgnore:
		switch {
		case r < 0x20:
			t.execute(r)
		case r >= 0x40 && r < 0x7f:
			t.state = stGround
		}
	case stOSC:
		switch {
		case r == 0x07:
			t.endString(true)
			t.state = stGround
		case r < 0x20:
		default:
			t.oscPut(r)
		}
	case stDCSEntry, stDCSParam, stDCSInter:
		switch {
		case r < 0x20 || r == 0x7f:
		case r < 0x30:
			t.state = stDCSInter
		case r < 0x3c:
			if t.state == stDCSInter {
				t.state = stDCSIgnore
			} else {
				t.state = stDCSParam
			}
		case r < 0x40:
			if t.state == stDCSEntry {
				t.state = stDCSParam
			} else {
				t.state = stDCSIgnore
			}
		case r < 0x7f:
			t.state = stDCSPass // DCS strings (DECRQSS, sixel, tmux passthrough) are dropped
		default:
			t.state = stGround
		}
	case stDCSPass, stDCSIgnore, stSOS:
		// ignored up to ST (ESC \ or 0x9c), handled above
	}
}

// endString ends an OSC string in progress: dispatched if ok.
func (t *Terminal) endString(ok bool) {
	if t.state != stOSC {
		return
	}
	if ok && !t.oscBig {
		t.oscDispatch()
	}
	t.osc, t.oscBig = t.osc[:0], false
	if cap(t.osc) > 256 {
		t.osc = nil // a long title does not keep its buffer
	}
}

func (t *Terminal) startOSC() {
	t.state = stOSC
	t.osc, t.oscBig = t.osc[:0], false
}

func (t *Terminal) oscPut(r rune) {
	if t.oscBig {
		return
	}
	if len(t.osc)+utf8.UTFMax > maxOSC {
		t.oscBig = true
		return
	}
	t.osc = utf8.AppendRune(t.osc, r)
}

// oscDispatch handles OSC 0 and 2 (the title); every other OSC is ignored: 1 (icon name), 4
// and 10-12 (colours, and their queries), 7, 8 (hyperlinks: the text stays, the target is
// dropped), 52 (clipboard).
func (t *Terminal) oscDispatch() {
	s := t.osc
	id := 0
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' && id < 10000 {
		id = id*10 + int(s[i]-'0')
		i++
	}
	if i == 0 || i >= len(s) || s[i] != ';' {
		return
	}
	if id == 0 || id == 2 {
		t.title = string(s[i+1:])
	}
}

func (t *Terminal) clearSeq() {
	t.np, t.sub, t.prefix, t.ninter = 0, 0, 0, 0
	t.params[0] = 0
}

func (t *Terminal) collect(b byte) {
	if t.ninter < 2 {
		t.inter[t.ninter] = b
	}
	if t.ninter < 3 {
		t.ninter++
	}
}

// param takes a digit, ';' or ':'.
func (t *Terminal) param(b byte) {
	if t.np == 0 {
		t.np = 1
		t.params[0] = 0
	}
	switch b {
	case ';', ':':
		if t.np < maxParams {
			t.params[t.np] = 0
			if b == ':' {
				t.sub |= 1 << t.np
			}
			t.np++
		} else {
			t.np = maxParams + 1 // further parameters are dropped
		}
	default:
		if t.np > maxParams {
			return
		}
		p := &t.params[t.np-1]
		if *p < (maxParam-9)/10 {
			*p = *p*10 + int32(b-'0')
		} else {
			*p = maxParam
		}
	}
}

// nParams returns how many parameters were collected (sub-parameters included).
func (t *Terminal) nParams() int { return min(int(t.np), maxParams) }

// arg returns parameter i, or def if it is absent or 0.
func (t *Terminal) arg(i, def int) int {
	if i >= t.nParams() || t.params[i] == 0 {
		return def
	}
	return int(t.params[i])
}
