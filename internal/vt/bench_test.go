package vt

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"
	"testing"
	"time"
)

// logStream is an `ls -l --color`-like scrolling log: n lines, some SGR colour.
func logStream(n int) []byte {
	var b []byte
	for i := range n {
		b = fmt.Appendf(b, "-rwxr-xr-x 1 root root %8d Jan %2d 12:%02d \x1b[01;32mprogram-%d\x1b[0m\r\n", i*37%100000, i%28+1, i%60, i)
	}
	return b
}

// repaintStream is a top-like full-screen repaint of a cols x rows screen, frames times.
func repaintStream(cols, rows, frames int) []byte {
	var b []byte
	for f := range frames {
		b = append(b, "\x1b[H"...)
		for y := range rows {
			b = fmt.Appendf(b, "\x1b[%d;1H", y+1)
			if y == 6 {
				b = append(b, "\x1b[7m"...)
			}
			line := fmt.Sprintf("%5d user  20   0  %7d %6d %5d S  %4.1f  %3.1f  %d:%02d.%02d command-%d", 1000+y, f*13+y, y*7, y*3, float64(y%10), float64(f%10)/10, y, f%60, y%100, y)
			for len(line) < cols {
				line += " "
			}
			b = append(b, line[:cols]...)
			if y == 6 {
				b = append(b, "\x1b[m"...)
			}
		}
	}
	return b
}

// cjkStream is CJK and emoji text with some colour, wrapping and scrolling.
func cjkStream(n int) []byte {
	var b []byte
	for i := range n {
		b = fmt.Appendf(b, "\x1b[3%dm漢字かなカナ한국어 テスト 😀🎉🚀 行%d 中文字符显示测试\x1b[m 終わり\r\n", i%8, i)
	}
	return b
}

func benchWrite(b *testing.B, data []byte, o Options) {
	term := New(120, 40, o)
	term.noBulk = true // character run by character run: the plain-text path is BenchmarkFlood's
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		term.Write(data)
	}
}

func BenchmarkWriteLog(b *testing.B) { benchWrite(b, logStream(10000), Options{}) }
func BenchmarkWriteLogScrollback(b *testing.B) {
	benchWrite(b, logStream(10000), Options{ScrollbackLines: 1000})
}
func BenchmarkWriteRepaint(b *testing.B)  { benchWrite(b, repaintStream(120, 40, 50), Options{}) }
func BenchmarkWriteCJKEmoji(b *testing.B) { benchWrite(b, cjkStream(5000), Options{}) }
func BenchmarkWriteCJKEmojiScroll(b *testing.B) {
	benchWrite(b, cjkStream(5000), Options{ScrollbackLines: 1000})
}

// colourScreen fills a cols x rows terminal with coloured text, a new colour every few cells.
func colourScreen(cols, rows int) *Terminal {
	term := New(cols, rows, Options{ScrollbackLines: 1000})
	var in []byte
	for y := range rows {
		in = fmt.Appendf(in, "\x1b[%d;1H", y+1)
		for x := 0; x < cols; x += 8 {
			in = fmt.Appendf(in, "\x1b[38;5;%d;48;2;%d;%d;%dm%-8.8s", (x+y)%256, x, y, 40, fmt.Sprint("c", x, "/", y))
		}
	}
	term.Write(in)
	return term
}

func BenchmarkSnapshot200x50(b *testing.B) {
	term := colourScreen(200, 50)
	buf := term.AppendSnapshot(nil, SnapshotOptions{})
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		buf = term.AppendSnapshot(buf[:0], SnapshotOptions{})
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
}

func BenchmarkSnapshot200x50Scrollback1000(b *testing.B) {
	term := colourScreen(200, 50)
	term.Write(logStream(2000))
	term.Write(colourScreen(200, 50).AppendSnapshot(nil, SnapshotOptions{}))
	buf := term.AppendSnapshot(nil, SnapshotOptions{ScrollbackLines: 1000})
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = term.AppendSnapshot(buf[:0], SnapshotOptions{ScrollbackLines: 1000})
	}
}

func TestMemBytes(t *testing.T) {
	for _, tc := range []struct {
		cols, rows, sb int
		feed           []byte
		limit          int
	}{
		{80, 24, 0, nil, 16 << 10},
		{200, 50, 0, nil, 16 << 10},
		{80, 24, 0, logStream(5000), 64 << 10},
		{80, 24, 1000, logStream(5000), 200 << 10},
		{200, 50, 0, logStream(5000), 200 << 10},
		{200, 50, 1000, logStream(5000), 300 << 10},
	} {
		term := New(tc.cols, tc.rows, Options{ScrollbackLines: tc.sb})
		term.Write(tc.feed)
		got := term.MemBytes()
		t.Logf("%dx%d scrollback %d after %d bytes: MemBytes %d", tc.cols, tc.rows, tc.sb, len(tc.feed), got)
		if got > tc.limit {
			t.Errorf("%dx%d scrollback %d: got MemBytes %d, want at most %d", tc.cols, tc.rows, tc.sb, got, tc.limit)
		}
	}
}

// yesStream is `yes`: "y\r\n" lines (the PTY turns \n into \r\n), n of them.
func yesStream(n int) []byte { return slices.Repeat([]byte("y\r\n"), n) }

// seqStream is `seq 1 n`.
func seqStream(n int) []byte {
	var b []byte
	for i := range n {
		b = fmt.Appendf(b, "%d\r\n", i+1)
	}
	return b
}

func BenchmarkWriteYes(b *testing.B) { benchWrite(b, yesStream(100000), Options{}) }
func BenchmarkWriteYesScrollback(b *testing.B) {
	benchWrite(b, yesStream(100000), Options{ScrollbackLines: 1000})
}
func BenchmarkWriteSeqScrollback(b *testing.B) {
	benchWrite(b, seqStream(100000), Options{ScrollbackLines: 1000})
}
func BenchmarkWriteSeq(b *testing.B) { benchWrite(b, seqStream(100000), Options{}) }

// base64Stream is `base64` of n bytes: 76-column lines.
func base64Stream(n int) []byte {
	enc := base64.StdEncoding.EncodeToString(slices.Repeat([]byte{0x5a, 0x17, 0xc3}, n/3))
	var b []byte
	for len(enc) > 76 {
		b = append(append(b, enc[:76]...), "\r\n"...)
		enc = enc[76:]
	}
	return b
}

// BenchmarkFlood feeds floods of plain text as the gateway does (32 KiB per Write, 1,000
// lines of history, 80×24), with the plain-text fast path and line by line, so that the two
// compare within one run.
func BenchmarkFlood(b *testing.B) {
	for _, st := range []struct {
		name string
		data []byte
	}{
		{"base64", base64Stream(4 << 20)}, {"seq", seqStream(500000)}, {"yes", yesStream(1 << 20)},
		// on a raw terminal (`stty raw`, as muxbench runs them): LF alone, the lines stair-step
		{"base64-raw", bytes.ReplaceAll(base64Stream(4<<20), []byte("\r\n"), []byte("\n"))},
		{"yes-raw", bytes.ReplaceAll(yesStream(1<<20), []byte("\r\n"), []byte("\n"))},
	} {
		for _, lineByLine := range []bool{false, true} {
			name := st.name + "/fast"
			if lineByLine {
				name = st.name + "/line-by-line"
			}
			b.Run(name, func(b *testing.B) {
				term := New(80, 24, Options{ScrollbackLines: 1000})
				term.noBulk = lineByLine
				b.SetBytes(int64(len(st.data)))
				b.ReportAllocs()
				for b.Loop() {
					for p := st.data; len(p) > 0; p = p[min(len(p), 32<<10):] {
						term.Write(p[:min(len(p), 32<<10)])
					}
				}
			})
		}
	}
}
