package record

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/leakcheck"
	"github.com/muxterm/muxterm/internal/testutil"
)

func TestMain(m *testing.M) { leakcheck.Main(m, leakcheck.Options{FDs: true}) }

// cast is a recording read back: its header and events.
type cast struct {
	header Header
	events []Event
}

// output is the recording's output, concatenated.
func (c cast) output() string {
	var b strings.Builder
	for _, e := range c.events {
		if e.Code == "o" {
			b.WriteString(e.Data)
		}
	}
	return b.String()
}

// dropped sums the drop markers.
func (c cast) dropped(t *testing.T) int64 {
	var n int64
	for _, e := range c.events {
		if e.Code == "m" && strings.HasPrefix(e.Data, "muxterm: ") {
			var k int64
			if _, err := fmt.Sscanf(e.Data, "muxterm: %d bytes not recorded", &k); err != nil {
				t.Fatalf("marker %q: %v", e.Data, err)
			}
			n += k
		}
	}
	return n
}

// parseCast reads a recording with Parser (strictly); without a header (New's) it reads a
// header it makes up first.
func parseCast(t *testing.T, r io.Reader, header bool) cast {
	t.Helper()
	if !header {
		r = io.MultiReader(strings.NewReader(`{"version":2,"width":80,"height":24}`+"\n"), r)
	}
	p, err := NewParser(r)
	if err != nil {
		t.Fatal(err)
	}
	c := cast{header: p.Header}
	for {
		e, err := p.Next()
		if err == io.EOF {
			return c
		}
		if err != nil {
			t.Fatal(err)
		}
		c.events = append(c.events, e)
	}
}

// A recording holds the header, the output byte for byte (UTF-8 split across writes included),
// sizes and markers in order, in a file of mode 0600 that asciinema itself reads back.
func TestRecordingRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s"+Ext)
	r, err := Create(path, Header{Width: 80, Height: 24, Command: "/bin/sh", Title: "t"}, time.Now(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := "plain \x1b[1mbold\x1b[0m é 世界 🙂\r\n"
	b := []byte(want)
	// Split inside é, inside 世 and inside the emoji.
	cuts := []int{strings.Index(want, "é") + 1, strings.Index(want, "世") + 2, strings.Index(want, "🙂") + 3, len(b)}
	prev := 0
	for _, c := range cuts {
		r.Output(b[prev:c])
		prev = c
	}
	r.Resize(100, 30)
	r.Marker("attach")
	r.Output([]byte("after\r\n"))
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := parseCast(t, f, true)
	if c.header.Version != 2 || c.header.Width != 80 || c.header.Height != 24 || c.header.Command != "/bin/sh" || c.header.Timestamp == 0 {
		t.Fatalf("header %+v", c.header)
	}
	if got := c.output(); got != want+"after\r\n" {
		t.Fatalf("output %q, want %q", got, want+"after\r\n")
	}
	var order []string
	for _, e := range c.events {
		if e.Code != "o" {
			order = append(order, e.Code+":"+e.Data)
		}
	}
	if strings.Join(order, ",") != "r:100x30,m:attach" {
		t.Fatalf("events %v", order)
	}
	if r.Dropped() != 0 {
		t.Fatalf("dropped %d", r.Dropped())
	}
	if got := testutil.AsciinemaCat(t, path); got != want+"after\r\n" {
		t.Fatalf("asciinema cat: %q, want %q", got, want+"after\r\n")
	}
}

// A writer that does not take its writes (a pipe nobody reads: a stalled disk) never blocks
// the caller. What does not fit is dropped, and the recording says how much, exactly: once the
// reader reads, the output it holds plus its drop markers is every byte given.
func TestStalledWriterDropsAndSaysHowMuch(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var counted atomic.Int64
	r := New(pw, time.Now(), Options{QueueBytes: 256 << 10, OnDrop: func(n int64) { counted.Add(n) }})
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 2048) // 32 KiB
	const chunks = 320                                      // 10 MiB, far beyond pipe and queue
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range chunks {
			r.Output(chunk)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Output blocked behind a writer that does not write")
	}
	if r.Dropped() == 0 || counted.Load() != r.Dropped() {
		t.Fatalf("dropped %d, counted %d: want some, equal", r.Dropped(), counted.Load())
	}
	// Now the reader reads: everything queued is written.
	read := make(chan []byte, 1)
	go func() { // only reads: the test's goroutine parses
		b, _ := io.ReadAll(pr)
		read <- b
	}()
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	c := parseCast(t, bytes.NewReader(<-read), false)
	if got, dropped := int64(len(c.output())), c.dropped(t); got+dropped != chunks*int64(len(chunk)) || dropped != r.Dropped() {
		t.Fatalf("recorded %d + dropped markers %d (Dropped %d), want %d in all", got, dropped, r.Dropped(), chunks*len(chunk))
	}
}

// Close on a stalled writer returns when its context ends and counts what it could not write.
func TestCloseOnStalledWriterIsBounded(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r := New(pw, time.Now(), Options{})
	r.Output(bytes.Repeat([]byte("x"), 128<<10)) // more than the pipe holds: the write blocks
	// A second event waits behind the blocked write.
	r.Output([]byte("tail"))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := r.Close(ctx); err == nil {
		t.Fatal("Close on a stalled writer: no error")
	}
	r.Output([]byte("late")) // after Close: ignored
	pr.Close()               // the blocked write fails: the writer ends
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	// Whether "tail" was still queued at Close or in the blocked write with the rest, every
	// byte not read is counted, "late" is not.
	if want := int64(128<<10 + 4); r.Dropped() != want {
		t.Fatalf("dropped %d, want %d", r.Dropped(), want)
	}
}

// Prune removes recordings older than MaxAge, then the oldest while the rest exceed MaxBytes,
// never an active one nor a file that is not a recording.
func TestPrune(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	mk := func(name string, size int, age time.Duration) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := mk("old"+Ext, 10, 48*time.Hour)
	activeOld := mk("active"+Ext, 10, 72*time.Hour)
	other := mk("notes.txt", 10, 99*time.Hour)
	a := mk("a"+Ext, 400, 3*time.Hour)
	b := mk("b"+Ext, 400, 2*time.Hour)
	c := mk("c"+Ext, 400, time.Hour)
	got, err := Prune(dir, Retention{MaxAge: 24 * time.Hour, MaxBytes: 900}, now, func(p string) bool { return p == activeOld })
	if err != nil {
		t.Fatal(err)
	}
	if got.Files != 2 || got.Bytes != 410 {
		t.Fatalf("pruned %+v, want old and a (2 files, 410 bytes)", got)
	}
	for p, want := range map[string]bool{old: false, activeOld: true, other: true, a: false, b: true, c: true} {
		_, err := os.Stat(p)
		if (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(p), err == nil, want)
		}
	}
}

// On a full disk (a tmpfs of 64 KiB) a write fails: the file is cut back to its last whole
// line, the bytes are counted, and once space is free again the recording goes on with a marker
// saying how much it lacks. Every line stays an event.
func TestFullDisk(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): %v", err)
	}
	defer func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	}()
	path := filepath.Join(dir, "s"+Ext)
	r, err := Create(path, Header{Width: 80, Height: 24}, time.Now(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	fill, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fill.Write(make([]byte, 128<<10)) // fills the tmpfs; the error is the point
	fill.Close()
	chunk := bytes.Repeat([]byte("y"), 8<<10)
	const chunks = 16
	for range chunks {
		r.Output(chunk)
		if err := r.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if r.Dropped() == 0 {
		t.Fatal("nothing dropped on a full disk")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	r.Output([]byte("after\r\n"))
	c := closeAndRead(t, r, path)
	out := c.output()
	if !strings.HasSuffix(out, "after\r\n") {
		t.Fatalf("output after space came back is missing: ends %q", out[max(0, len(out)-20):])
	}
	if got, dropped := int64(len(out)), c.dropped(t); got+dropped != chunks*int64(len(chunk))+7 || dropped != r.Dropped() {
		t.Fatalf("recorded %d + dropped markers %d (Dropped %d), want %d in all", got, dropped, r.Dropped(), chunks*len(chunk)+7)
	}
}

// Hostile or broken recordings get an error naming the line, never a hang or a panic.
func TestParserRefusesBrokenRecordings(t *testing.T) {
	hdr := `{"version":2,"width":80,"height":24}` + "\n"
	for name, in := range map[string]string{
		"empty":           "",
		"not json":        "hello\n",
		"version 1":       `{"version":1,"width":80,"height":24}` + "\n",
		"no size":         `{"version":2}` + "\n",
		"huge size":       `{"version":2,"width":99999999,"height":24}` + "\n",
		"truncated event": hdr + `[0.5, "o", "abc`,
		"time goes back":  hdr + `[1.0, "o", "a"]` + "\n" + `[0.5, "o", "b"]` + "\n",
		"negative time":   hdr + `[-1, "o", "a"]` + "\n",
		"two members":     hdr + `[1.0, "o"]` + "\n",
		"data a number":   hdr + `[1.0, "o", 7]` + "\n",
		"line too long":   hdr + `[1.0, "o", "` + strings.Repeat("x", MaxLine) + `"]` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			p, err := NewParser(strings.NewReader(in))
			for err == nil {
				_, err = p.Next()
			}
			if err == io.EOF || !strings.HasPrefix(err.Error(), "record: ") {
				t.Fatalf("got %v, want a record: error", err)
			}
		})
	}
}

// Resume cuts a last line the file holds only part of (a write cut short), marks it, and goes
// on from the recording's handed time: one valid recording whose times never go back.
func TestResumeCutsAPartialLineAndKeepsTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s"+Ext)
	r, err := Create(path, Header{Width: 80, Height: 24}, time.Now(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.Output([]byte("before"))
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	partial := `[9.5, "o", "half a li`
	if _, err := f.WriteString(partial); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r, err = Resume(path, 10*time.Second, 7, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.Output([]byte("after"))
	c := closeAndRead(t, r, path)
	if got := c.output(); got != "beforeafter" {
		t.Fatalf("output %q", got)
	}
	if d := c.dropped(t); d != int64(len(partial))+7 {
		t.Fatalf("marked %d bytes not recorded, want the cut line's %d and the 7 unwritten", d, len(partial))
	}
	last := c.events[len(c.events)-1]
	if last.At < 10 {
		t.Fatalf("the resumed recording's time %f, want on from the handed 10 s", last.At)
	}
}

// Sizes and markers obey the queue's bound at a stalled writer: a flood of them keeps the
// queue small (a size replaces the size queued last; a marker beyond the bound is counted).
func TestMarkersAndSizesAreBounded(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r := New(pw, time.Now(), Options{QueueBytes: 4 << 10})
	r.Output(bytes.Repeat([]byte("x"), 3<<10)) // the writer takes it and blocks: the pipe is full soon
	for i := range 200000 {
		r.Resize(80+i%7, 24)
		r.Marker("attach")
	}
	r.mu.Lock()
	n, qb := len(r.q), r.qBytes
	r.mu.Unlock()
	if qb > 4<<10 || n > 4<<10 {
		t.Fatalf("queue holds %d events, %d bytes, past its 4 KiB bound", n, qb)
	}
	if r.Dropped() == 0 {
		t.Fatal("nothing counted as dropped")
	}
	pr.Close() // the blocked write fails: the writer ends
	if err := r.Close(context.Background()); err != nil && !strings.Contains(err.Error(), "closed") {
		t.Log(err)
	}
	pw.Close()
}

// An unfinished UTF-8 sequence at the end is written as U+FFFD when the recording ends, not
// left out silently.
func TestCarryWrittenAtClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s"+Ext)
	r, err := Create(path, Header{Width: 80, Height: 24}, time.Now(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.Output([]byte("abc\xe4\xb8"))
	if got := closeAndRead(t, r, path).output(); got != "abc\uFFFD" {
		t.Fatalf("output %q, want abc and U+FFFD", got)
	}
}

// closeAndRead closes r and parses the recording it wrote at path.
func closeAndRead(t *testing.T, r *Recorder, path string) cast {
	t.Helper()
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return parseCast(t, f, true)
}

// appendJSONBytes writes what encoding/json reads back as the same text (invalid UTF-8 as
// U+FFFD, as strings.ToValidUTF8 would), for every byte value and a few mixed strings.
func TestAppendJSONBytes(t *testing.T) {
	cases := [][]byte{[]byte(""), []byte("plain"), []byte("quote\" back\\ nl\n cr\r tab\t bell\a del\x7f"),
		[]byte("héllo 世界 🙂"), []byte("bad\xff\xfe\xe4 end"), []byte("\xe4\xb8"), {0x00, 0x1b, '[', 'm'}}
	for c := range 256 {
		cases = append(cases, []byte{byte(c)})
	}
	for _, p := range cases {
		var got string
		if err := json.Unmarshal(appendJSONBytes(nil, p), &got); err != nil {
			t.Fatalf("%q: not JSON: %v (%s)", p, err, appendJSONBytes(nil, p))
		}
		if want := strings.ToValidUTF8(string(p), "\uFFFD"); got != want {
			t.Errorf("%q: read back %q, want %q", p, got, want)
		}
	}
}

// BenchmarkRecordOutput: the writer's cost per byte of a terminal's output (colours, text,
// CJK), encoding and writing one queued batch.
func BenchmarkRecordOutput(b *testing.B) {
	chunk := bytes.Repeat([]byte("\x1b[1;32mok\x1b[0m  some/path/file.go:42: text, \"quoted\" \xe4\xb8\x96\r\n"), 512)
	r := New(io.Discard, time.Now(), Options{})
	q := []event{{code: codeOutput, data: chunk}}
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		r.write(q)
	}
}
