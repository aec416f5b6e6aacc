package record

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// The encoding of events into asciicast v2 lines: the drain's own work, off every caller's path.

// encode appends e as one line of the recording to the writer's buffer, carrying an unfinished
// UTF-8 sequence at the end of an output or input on to the next one.
func (r *Recorder) encode(e event) {
	var text string
	var raw []byte // output or input, written by appendJSONBytes without a string's copy
	switch e.code {
	case codeOutput, codeInput:
		i := 0
		if e.code == codeInput {
			i = 1
		}
		p := e.data
		if len(r.carry[i]) > 0 {
			p = append(r.carry[i], p...)
			r.carry[i] = nil
		}
		if k := incompleteTail(p); k > 0 {
			r.carry[i] = bytes.Clone(p[len(p)-k:])
			p = p[:len(p)-k]
		}
		if len(p) == 0 {
			return
		}
		raw = p
	case codeDrop:
		// An unfinished character before the gap never finishes: its bytes are among those
		// not recorded.
		if c := int64(len(r.carry[0]) + len(r.carry[1])); c > 0 {
			e.n += c
			r.mu.Lock()
			r.dropped += c
			if r.opts.OnDrop != nil {
				r.opts.OnDrop(c)
			}
			r.mu.Unlock()
			r.carry = [2][]byte{}
		}
		text = DropLabel(e.n)
	default:
		text = string(e.data)
	}
	code := e.code
	if code == codeDrop {
		code = codeMarker
	}
	r.enc.WriteByte('[')
	r.enc.WriteString(strconv.FormatFloat(e.at.Seconds(), 'f', 6, 64))
	r.enc.WriteString(`, "`)
	r.enc.WriteByte(code)
	r.enc.WriteString(`", `)
	if raw != nil {
		r.enc.Write(appendJSONBytes(r.enc.AvailableBuffer(), raw))
	} else {
		r.enc.Write(appendJSONBytes(r.enc.AvailableBuffer(), []byte(text)))
	}
	r.enc.WriteString("]\n")
}

const hexDigits = "0123456789abcdef"

// appendJSONBytes appends p as a JSON string: valid UTF-8 as it is, '"' and '\\' escaped, control
// characters as \n, \r, \t or \u00XX, and a run of invalid bytes as one U+FFFD. One pass, no copy of p
// into a string: the recorder's cost per byte of output stays a few comparisons.
func appendJSONBytes(dst, p []byte) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(p); {
		c := p[i]
		if c >= 0x20 && c < 0x80 && c != '"' && c != '\\' {
			j := i + 1
			for j < len(p) && p[j] >= 0x20 && p[j] < 0x80 && p[j] != '"' && p[j] != '\\' {
				j++
			}
			dst = append(dst, p[i:j]...)
			i = j
			continue
		}
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default: // c >= 0x80
			r, n := utf8.DecodeRune(p[i:])
			if r == utf8.RuneError && n <= 1 {
				// A run of invalid bytes is one U+FFFD, as strings.ToValidUTF8 writes it.
				dst = append(dst, "\uFFFD"...)
				for i++; i < len(p) && p[i] >= 0x80; i++ {
					if r, n := utf8.DecodeRune(p[i:]); r != utf8.RuneError || n > 1 {
						break
					}
				}
				continue
			}
			dst = append(dst, p[i:i+n]...)
			i += n
			continue
		}
		i++
	}
	return append(dst, '"')
}

// incompleteTail is the length of an unfinished UTF-8 sequence at the end of p (0 to 3).
func incompleteTail(p []byte) int {
	for k := 1; k <= 3 && k <= len(p); k++ {
		c := p[len(p)-k]
		if c < 0x80 {
			return 0
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(p[len(p)-k:]) {
				return 0
			}
			return k
		}
	}
	return 0
}

// finishCarry writes an unfinished character left at the end of the output or input as U+FFFD,
// once the writer is idle and nothing more can be queued (Close).
func (r *Recorder) finishCarry() {
	r.mu.Lock()
	at := r.nowLocked()
	r.mu.Unlock()
	var q []event
	for i, code := range []byte{codeOutput, codeInput} {
		if len(r.carry[i]) > 0 {
			q = append(q, event{at: at, code: code, data: []byte{0xff}}) // encodes as U+FFFD
		}
	}
	if len(q) > 0 {
		r.write(q)
	}
}
