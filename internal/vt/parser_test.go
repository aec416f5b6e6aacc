package vt

import (
	"bytes"
	"testing"
)

func TestPrintableRun(t *testing.T) {
	want := func(p []byte) int {
		for i, b := range p {
			if b < 0x20 || b >= 0x7f {
				return i
			}
		}
		return len(p)
	}
	// every byte at every position of the first two words and a tail, after and before
	// the edges of the range (whose borrows and carries the word test must not miss)
	for _, fill := range []byte{0x20, 'a', 0x7e} {
		for n := range 20 {
			for pos := range n {
				for b := range 256 {
					p := bytes.Repeat([]byte{fill}, n)
					p[pos] = byte(b)
					if pos+1 < n {
						p[pos+1] = 0x1f
					}
					if got, w := printableRun(p), want(p); got != w {
						t.Fatalf("printableRun(%q): got %d, want %d", p, got, w)
					}
				}
			}
		}
	}
}
