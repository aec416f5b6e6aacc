package vt

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// checkRoundTrip writes the snapshot of a into a fresh terminal of the same size and options
// and checks the two are the same, and that the copy's snapshot is the same bytes.
func checkRoundTrip(t *testing.T, name string, a *Terminal) {
	t.Helper()
	checkExtents(t, name, a)
	so := SnapshotOptions{ScrollbackLines: a.sbMax}
	s1 := a.AppendSnapshot(nil, so)
	if !utf8.Valid(s1) {
		t.Errorf("%s: snapshot is not valid UTF-8", name)
	}
	b := New(a.cols, a.rows, Options{ScrollbackLines: a.sbMax})
	b.Write(s1)
	checkExtents(t, name+" (copy)", b)
	if got, want := dump(b), dump(a); got != want {
		t.Errorf("%s: the snapshot's terminal differs:\n%s\nsnapshot %q", name, diffLines(got, want), s1)
		return
	}
	if s2 := b.AppendSnapshot(nil, so); string(s2) != string(s1) {
		t.Errorf("%s: got snapshot %q, want %q", name, s2, s1)
	}
}

// diffLines shows the lines of got and want that differ.
func diffLines(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b strings.Builder
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			fmt.Fprintf(&b, "got  %s\nwant %s\n", gl, wl)
		}
	}
	return b.String()
}

// tokens are the pieces random terminal output is made of.
var tokens = []string{
	"a", "hello ", "x", "ab", " ", "中", "文字", "😀", "é", "e\u0301", "\u200d", "\t", "\r", "\n", "\b",
	"\x0e", "\x0f", "\x1b(0", "\x1b(B", "\x1b)0", "\x1b(A", "\x1b*0", "\x1bn", "lqk",
	"\x1b[m", "\x1b[1;31m", "\x1b[4:3m", "\x1b[38;5;200m", "\x1b[48;2;1;2;3m", "\x1b[38:2::9:8:7m", "\x1b[7;9;53m",
	"\x1b[44m", "\x1b[0;2;3;5;8m", "\x1b[22;23;24;25;27;28;29;39;49m", "\x1b[97;104m", "\x1b[21m",
	"\x1b[H", "\x1b[3;4H", "\x1b[10;100H", "\x1b[A", "\x1b[2B", "\x1b[5C", "\x1b[3D", "\x1b[E", "\x1b[F",
	"\x1b[7G", "\x1b[2I", "\x1b[Z", "\x1b[d", "\x1b[3e", "\x1b[4a", "\x1b[5`",
	"\x1b[J", "\x1b[1J", "\x1b[2J", "\x1b[3J", "\x1b[K", "\x1b[1K", "\x1b[2K", "\x1b[?2K",
	"\x1b[L", "\x1b[2M", "\x1b[3@", "\x1b[2P", "\x1b[4X", "\x1b[S", "\x1b[2T", "\x1b[3b",
	"\x1b[2;4r", "\x1b[r", "\x1b[3;3r", "\x1bD", "\x1bM", "\x1bE", "\x1b7", "\x1b8", "\x1b[s", "\x1b[u",
	"\x1bH", "\x1b[g", "\x1b[3g", "\x1b#8", "\x1b=", "\x1b>",
	"\x1b[?1h", "\x1b[?1l", "\x1b[?6h", "\x1b[?6l", "\x1b[?7l", "\x1b[?7h", "\x1b[4h", "\x1b[4l",
	"\x1b[20h", "\x1b[20l", "\x1b[?25l", "\x1b[?25h", "\x1b[?12h", "\x1b[?5h",
	"\x1b[?47h", "\x1b[?47l", "\x1b[?1047h", "\x1b[?1047l", "\x1b[?1049h", "\x1b[?1049l", "\x1b[?1048h", "\x1b[?1048l",
	"\x1b[?1000h", "\x1b[?1002h", "\x1b[?1003l", "\x1b[?1006h", "\x1b[?1005h", "\x1b[?1015l", "\x1b[?1004h",
	"\x1b[?2004h", "\x1b[?2004l", "\x1b[3 q", "\x1b[!p", "\x1bc", "\x1b]0;title\a", "\x1b]2;t\x1b\\",
	"\x1b]8;;http://x\x1b\\", "\x1bP1$r\x1b\\", "\x1b[c", "\x1b[6n", "\x1b[?1$p", "\x1b[>c", "\x1b[18t",
	"\xc2\x9b31m", "\xff", "\xe4\xb8", "\x1b[1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16;17;18;19;20;21;22;23;24;25;26;27;28;29;30;31;32;33;34m",
	"\x1b[99999999999999999C", "\x1b_apc\x1b\\", "\x18", "\x1b[?3h", "\x1b[?2h",
}

func randomOutput(r *rand.Rand, n int) []byte {
	var b []byte
	for range n {
		b = append(b, tokens[r.IntN(len(tokens))]...)
	}
	return b
}

func TestRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		cols, rows := 2+r.IntN(30), 1+r.IntN(12)
		a := New(cols, rows, Options{ScrollbackLines: r.IntN(3) * 5})
		in := randomOutput(r, 1+r.IntN(200))
		a.Write(in)
		if r.IntN(4) == 0 {
			a.Resize(2+r.IntN(30), 1+r.IntN(12))
			a.Write(randomOutput(r, r.IntN(30)))
		}
		checkRoundTrip(t, fmt.Sprintf("case %d %dx%d %q", i, cols, rows, in), a)
		if t.Failed() {
			return
		}
	}
}
