package vt

import "testing"

// TestPendingFinishesInTheCopy cuts output inside a sequence (or a UTF-8 character), paints
// the model into a fresh terminal with the pending bytes after the snapshot, then feeds both
// the rest of the output: the two must end the same.
func TestPendingFinishesInTheCopy(t *testing.T) {
	for _, tc := range []struct{ name, head, tail, pending string }{
		{"between sequences", "abc", "\x1b[2Jdef", ""},
		{"inside CSI", "abc\x1b[1;", "5Hx", "\x1b[1;"},
		{"after ESC", "abc\x1b", "[31mred", "\x1b"},
		{"inside DECSET", "x\x1b[?10", "49hALT", "\x1b[?10"},
		{"inside OSC", "\x1b]0;ti", "tle\x07t", "\x1b]0;ti"},
		{"inside UTF-8", "a\xe2\x82", "\xacb", "\xe2\x82"},
		{"a long CSI", "a\x1b[38;2;1;2", ";3mX", "\x1b[38;2;1;2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(20, 5, Options{})
			for i := range len(tc.head) { // one byte a Write: every cut
				a.Write([]byte{tc.head[i]})
			}
			if got := string(a.AppendPending(nil)); got != tc.pending {
				t.Fatalf("pending: got %q, want %q", got, tc.pending)
			}
			b := New(20, 5, Options{})
			b.Write(a.AppendPending(a.AppendSnapshot(nil, SnapshotOptions{})))
			a.Write([]byte(tc.tail))
			b.Write([]byte(tc.tail))
			if got, want := dump(b), dump(a); got != want {
				t.Errorf("the copy differs after the tail:\n%s", diffLines(got, want))
			}
		})
	}
}
