package main

import (
	"fmt"
	"strings"
)

// defaultDetachKeys is ssh's escape: Enter, then ~ and . detach.
const defaultDetachKeys = "enter,~,."

// detachKeys is a parsed --detach-keys: a comma-separated list of keys, each a character, `ctrl-X`
// (X one of a-z @ [ \ ] ^ _), `enter` (only first: the rest must start a line) or `comma`;
// `none` disables detaching by keys.
type detachKeys struct {
	lineStart bool   // the list began with enter
	keys      []byte // the bytes that detach, after the line start if any
}

func parseDetachKeys(s string) (detachKeys, error) {
	var d detachKeys
	s = strings.TrimSpace(s)
	if s == "none" || s == "" {
		return d, nil
	}
	for i, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		lk := strings.ToLower(k)
		switch {
		case lk == "enter":
			if i != 0 {
				return d, fmt.Errorf("detach keys %q: enter may only come first (it means: at the start of a line)", s)
			}
			d.lineStart = true
		case lk == "comma":
			d.keys = append(d.keys, ',')
		case strings.HasPrefix(lk, "ctrl-") && len(k) == 6:
			c := k[5]
			switch {
			case c >= 'a' && c <= 'z':
				d.keys = append(d.keys, c-'a'+1)
			case c >= 'A' && c <= 'Z':
				d.keys = append(d.keys, c-'A'+1)
			case strings.IndexByte("@[\\]^_", c) >= 0:
				d.keys = append(d.keys, c-'@')
			default:
				return d, fmt.Errorf("detach keys %q: %q is not a control key (ctrl-a … ctrl-z, ctrl-@, ctrl-[, ctrl-\\, ctrl-], ctrl-^, ctrl-_)", s, k)
			}
		case len(k) == 1 && k[0] > ' ' && k[0] < 0x7f:
			d.keys = append(d.keys, k[0])
		default:
			return d, fmt.Errorf("detach keys %q: unknown key %q (want a character, ctrl-X, enter (first only) or comma)", s, k)
		}
	}
	if len(d.keys) == 0 {
		return d, fmt.Errorf("detach keys %q: enter alone would detach on every Enter", s)
	}
	return d, nil
}

// detacher finds the detach keys in typed input. Bytes that may begin the sequence are held
// back until it is clear whether they do; the first key typed twice sends it once (ssh's ~~).
type detacher struct {
	d         detachKeys
	matched   int  // keys of d.keys held back so far
	atLineEnd bool // the last byte passed was Enter (or nothing was typed yet)
}

func newDetacher(d detachKeys) *detacher { return &detacher{d: d, atLineEnd: true} }

// feed returns the bytes to send on, and whether the sequence was completed (bytes after it
// are dropped).
func (t *detacher) feed(in []byte) (out []byte, detach bool) {
	keys := t.d.keys
	if len(keys) == 0 {
		return in, false
	}
	out = make([]byte, 0, len(in)+len(keys))
	for _, b := range in {
		if t.matched > 0 {
			if b == keys[t.matched] {
				t.matched++
				if t.matched == len(keys) {
					t.matched = 0
					return out, true
				}
				continue
			}
			if t.matched == 1 && b == keys[0] {
				out = append(out, b) // the first key twice: send it once
				t.matched, t.atLineEnd = 0, false
				continue
			}
			out = append(out, keys[:t.matched]...)
			t.matched, t.atLineEnd = 0, false
		}
		if b == keys[0] && (!t.d.lineStart || t.atLineEnd) {
			if len(keys) == 1 {
				return out, true
			}
			t.matched = 1
			continue
		}
		out = append(out, b)
		t.atLineEnd = b == '\r' || b == '\n'
	}
	return out, false
}
