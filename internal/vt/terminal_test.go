package vt

import (
	"strings"
	"testing"
)

// screenText returns the active screen's rows, trailing blanks trimmed, joined by '|'.
func screenText(t *Terminal) string {
	s := strings.TrimSuffix(string(t.AppendText(nil, SnapshotOptions{})), "\n")
	return strings.ReplaceAll(s, "\n", "|")
}

func TestSemantics(t *testing.T) {
	tests := []struct {
		name       string
		cols, rows int
		in         string
		text       string
		x, y       int
	}{
		{"print", 10, 3, "abc", "abc||", 3, 0},
		{"crlf", 10, 3, "ab\r\ncd", "ab|cd|", 2, 1},
		{"autowrap", 5, 3, "abcdefg", "abcde|fg|", 2, 1},
		{"pending wrap then CR", 5, 3, "abcde\rX", "Xbcde||", 1, 0},
		{"no wraparound", 5, 3, "\x1b[?7labcdefg", "abcdg||", 4, 0},
		{"scroll", 5, 3, "1\n\r2\n\r3\n\r4", "2|3|4", 1, 2},
		{"cup", 10, 3, "\x1b[2;3Hx", "|  x|", 3, 1},
		{"cup clamps", 10, 3, "\x1b[99;99Hx", "||         x", 9, 2},
		{"cursor moves", 10, 5, "\x1b[3;3H\x1b[A\x1b[2C\x1b[B\x1b[4Dx", "||x||", 1, 2},
		{"cha vpa", 10, 3, "\x1b[5G\x1b[2dx", "|    x|", 5, 1},
		{"el", 10, 2, "abcdef\x1b[3D\x1b[K", "abc|", 3, 0},
		{"el1", 10, 2, "abcdef\x1b[3D\x1b[1K", "    ef|", 3, 0},
		{"ed", 5, 3, "aaaaabbbbbccc\x1b[2;3H\x1b[J", "aaaaa|bb|", 2, 1},
		{"ed1", 5, 3, "aaaaabbbbbccc\x1b[2;3H\x1b[1J", "|   bb|ccc", 2, 1},
		{"ech", 10, 1, "abcdef\x1b[1G\x1b[2X", "  cdef", 0, 0},
		{"ich", 10, 1, "abcdef\x1b[2G\x1b[2@", "a  bcdef", 1, 0},
		{"dch", 10, 1, "abcdef\x1b[2G\x1b[2P", "adef", 1, 0},
		{"il in region", 5, 4, "1\r\n2\r\n3\r\n4\x1b[2;3r\x1b[2;1H\x1b[L", "1||2|4", 0, 1},
		{"dl in region", 5, 4, "1\r\n2\r\n3\r\n4\x1b[2;3r\x1b[2;1H\x1b[M", "1|3||4", 0, 1},
		{"il outside region", 5, 4, "1\r\n2\r\n3\r\n4\x1b[2;3r\x1b[4;1H\x1b[L", "1|2|3|4", 0, 3},
		{"region scroll", 5, 4, "1\r\n2\r\n3\r\n4\x1b[2;3r\x1b[3;1H\nx", "1|3|x|4", 1, 2},
		{"ri at top", 5, 3, "1\r\n2\x1b[H\x1bM", "|1|2", 0, 0},
		{"su sd", 5, 3, "1\r\n2\r\n3\x1b[S", "2|3|", 1, 2},
		{"sd", 5, 3, "1\r\n2\r\n3\x1b[T", "|1|2", 1, 2},
		{"tabs", 20, 1, "a\tb\tc", "a       b       c", 17, 0},
		{"tab set clear", 20, 1, "\x1b[3g\x1b[4G\x1bH\x1b[1G\tx", "   x", 4, 0},
		{"cht cbt", 20, 1, "\x1b[2Ix\x1b[2Zy", "        y       x", 9, 0},
		{"decsc decrc", 10, 3, "\x1b[2;3H\x1b7\x1b[H\x1b8x", "|  x|", 3, 1},
		{"csi s u", 10, 3, "\x1b[2;3H\x1b[s\x1b[H\x1b[ux", "|  x|", 3, 1},
		{"alt 1049", 10, 3, "main\x1b[?1049h\x1b[Halt", "alt||", 3, 0},
		{"alt 1049 restore", 10, 3, "main\x1b[?1049h\x1b[2;1Halt\x1b[?1049l", "main||", 4, 0},
		{"alt 47 keeps cursor", 10, 3, "main\x1b[?47h\x1b[2;1Halt\x1b[?47l", "main||", 3, 1},
		{"dec graphics", 10, 1, "\x1b(0lqk\x1b(Bq", "┌─┐q", 4, 0},
		{"so si", 10, 1, "\x1b)0\x0eq\x0fq", "─q", 2, 0},
		{"uk", 10, 1, "\x1b(A#", "£", 1, 0},
		{"wide", 10, 1, "中文", "中文", 4, 0},
		{"wide at margin wraps", 5, 2, "abcd中", "abcd|中", 2, 1},
		{"wide overwritten", 10, 1, "中\x1b[2Gx", " x", 2, 0},
		{"wide tail overwritten left", 10, 1, "中\x1b[1Gx", "x", 1, 0},
		{"emoji wide", 10, 1, "😀x", "😀x", 3, 0},
		{"combining dropped", 10, 1, "e\u0301x", "ex", 2, 0},
		{"decaln", 3, 2, "\x1b#8", "EEE|EEE", 0, 0},
		{"rep", 10, 1, "a\x1b[3b", "aaaa", 4, 0},
		{"lnm", 10, 2, "\x1b[20hab\ncd", "ab|cd", 2, 1},
		{"irm", 10, 1, "abc\x1b[1G\x1b[4hX", "Xabc", 1, 0},
		{"origin", 10, 5, "\x1b[2;4r\x1b[?6h\x1b[Hx\x1b[9;1Hy", "|x||y|", 1, 3},
		{"osc ignored", 10, 1, "\x1b]52;c;aGk=\aok", "ok", 2, 0},
		{"c1 csi", 10, 1, "a\u009b3Gb", "a b", 3, 0},
		{"invalid utf8", 10, 1, "a\xffb", "a\ufffdb", 3, 0},
		{"ris", 10, 2, "abc\x1b[?1h\x1bc", "|", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			term := New(tc.cols, tc.rows, Options{})
			term.Write([]byte(tc.in))
			if got := screenText(term); got != tc.text {
				t.Errorf("text: got %q, want %q", got, tc.text)
			}
			if term.x != tc.x || term.y != tc.y {
				t.Errorf("cursor: got %d,%d, want %d,%d", term.x, term.y, tc.x, tc.y)
			}
			checkRoundTrip(t, tc.name, term)
		})
	}
}

func TestSplitWrites(t *testing.T) {
	in := "a\x1b[1;31mb中😀\x1b]2;tï\x07c\xe2\x94\x80"
	whole := New(20, 2, Options{})
	whole.Write([]byte(in))
	for i := range len(in) {
		split := New(20, 2, Options{})
		split.Write([]byte(in[:i]))
		split.Write([]byte(in[i:]))
		if got, want := dump(split), dump(whole); got != want {
			t.Fatalf("split at %d:\n%s", i, diffLines(got, want))
		}
	}
	if !whole.AtGround() {
		t.Errorf("AtGround: got false, want true")
	}
	for _, s := range []string{"\x1b", "\x1b[1", "\xe4", "\x1b]2;x"} {
		term := New(10, 1, Options{})
		term.Write([]byte(s))
		if term.AtGround() {
			t.Errorf("AtGround after %q: got true, want false", s)
		}
	}
}

func TestPen(t *testing.T) {
	tests := []struct {
		in   string
		want pen
	}{
		{"\x1b[1;3;4;7m", pen{a: attrBold | attrItalic | 1<<attrULShift | attrInverse}},
		{"\x1b[4:3m", pen{a: 3 << attrULShift}},
		{"\x1b[31;42m", pen{fg: cmP16 | 1, bg: cmP16 | 2}},
		{"\x1b[91;102m", pen{fg: cmP16 | 9, bg: cmP16 | 10}},
		{"\x1b[38;5;200;48;2;1;2;3m", pen{fg: cmP256 | 200, bg: cmRGB | 0x010203}},
		{"\x1b[38:2::1:2:3m", pen{fg: cmRGB | 0x010203}},
		{"\x1b[38:5:9m", pen{fg: cmP256 | 9}},
		{"\x1b[1;2m\x1b[22m", pen{}},
		{"\x1b[1;31m\x1b[m", pen{}},
		{"\x1b[31m\x1b[39m", pen{}},
	}
	for _, tc := range tests {
		term := New(10, 1, Options{})
		term.Write([]byte(tc.in))
		if term.pen != tc.want {
			t.Errorf("%q: got %+v, want %+v", tc.in, term.pen, tc.want)
		}
	}
}

func TestModes(t *testing.T) {
	term := New(80, 24, Options{})
	term.Write([]byte("\x1b[?1h\x1b=\x1b[?2004h\x1b[?1002h\x1b[?1006h\x1b[?1004h\x1b[?6h\x1b[?7l\x1b[4h\x1b[?25l\x1b[5 q\x1b[?1049h\x1b]0;hi\x07"))
	want := Modes{AltScreen: true, AppCursor: true, AppKeypad: true, BracketedPaste: true, MouseTracking: 1002,
		MouseEncoding: 1006, FocusReporting: true, Origin: true, Insert: true, CursorStyle: 5}
	if got := term.Modes(); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := term.Title(); got != "hi" {
		t.Errorf("title: got %q, want %q", got, "hi")
	}
	checkRoundTrip(t, "modes", term)
	restore := New(80, 24, Options{})
	restore.Write([]byte("\x1b[?1049h"))
	restore.Write(term.AppendRestore(nil))
	if got := restore.Modes(); got != defaultModes {
		t.Errorf("after AppendRestore: got %+v, want %+v", got, defaultModes)
	}
}

func TestScrollback(t *testing.T) {
	term := New(10, 3, Options{ScrollbackLines: 4})
	for _, s := range []string{"1", "2", "3", "4", "5", "6", "7"} {
		term.Write([]byte(s + "\r\n"))
	}
	if got, want := string(term.AppendText(nil, SnapshotOptions{ScrollbackLines: 10})), "2\n3\n4\n5\n6\n7\n\n"; got != want {
		t.Errorf("text: got %q, want %q", got, want)
	}
	checkRoundTrip(t, "scrollback", term)
	term.Write([]byte("\x1b[3J"))
	if got := term.sb.len(); got != 0 {
		t.Errorf("after ED 3: got %d history lines, want 0", got)
	}
}

func TestResize(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		cols, rows int
		text       string
		sb         string
		x, y       int
	}{
		{"shrink rows, cursor at bottom", "1\r\n2\r\n3\r\n4", 5, 2, "3|4", "1\n2\n", 1, 1},
		{"shrink rows, cursor at top", "1\r\n2\r\n3\r\n4\x1b[H", 5, 2, "1|2", "", 0, 0},
		{"grow rows pulls history", "1\r\n2\r\n3\r\n4\r\n5\r\n6", 5, 6, "1|2|3|4|5|6", "", 1, 5},
		{"grow rows, cursor not at bottom", "1\r\n2\r\n3\r\n4\r\n5\r\n6\x1b[H", 5, 6, "3|4|5|6||", "1\n2\n", 0, 0},
		{"shrink cols cuts", "abcdefgh", 4, 4, "abcd|||", "", 3, 0},
		{"shrink cols cuts wide", "ab中", 3, 4, "ab|||", "", 2, 0},
		{"grow cols after pending wrap", "abcdefgh\x1b[H12345678", 10, 4, "12345678|||", "", 8, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			term := New(8, 4, Options{ScrollbackLines: 10})
			term.Write([]byte(tc.in))
			term.Resize(tc.cols, tc.rows)
			if got := screenText(term); got != tc.text {
				t.Errorf("text: got %q, want %q", got, tc.text)
			}
			all := string(term.AppendText(nil, SnapshotOptions{ScrollbackLines: 100}))
			screen := string(term.AppendText(nil, SnapshotOptions{}))
			if got := strings.TrimSuffix(all, screen); got != tc.sb {
				t.Errorf("history: got %q, want %q", got, tc.sb)
			}
			if term.x != tc.x || term.y != tc.y {
				t.Errorf("cursor: got %d,%d, want %d,%d", term.x, term.y, tc.x, tc.y)
			}
			checkRoundTrip(t, tc.name, term)
		})
	}
	term := New(80, 24, Options{})
	for _, sz := range [][2]int{{0, 0}, {1, 1}, {100000, 100000}, {-5, 3}} {
		term.Resize(sz[0], sz[1])
		c, r := term.Size()
		if c < MinCols || c > MaxCols || r < MinRows || r > MaxRows {
			t.Errorf("Resize(%d, %d): got %dx%d", sz[0], sz[1], c, r)
		}
	}
}
