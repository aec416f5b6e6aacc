package client

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/proto"
)

// BenchmarkReadStream reads a stream through Channel.Read, as a plugin shows a build's output:
// each op is one MiB read, acknowledged as Read does. It reports the heap the whole process
// (the in-process gateway included) allocated per MiB, most of which is the client's copies of
// the frames it buffers.
func BenchmarkReadStream(b *testing.B) {
	g := newGateway(b, mux.ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := Dial(ctx, g.url, DialOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Open(ctx, OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "stty raw -echo; exec yes"}})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	read := func(n int) {
		for got := 0; got < n; {
			m, err := ch.ReadContext(ctx, buf)
			if err != nil {
				b.Fatal(err)
			}
			got += m
		}
	}
	read(1 << 20) // the stream runs
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for range b.N {
		read(1 << 20)
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/1024, "KiB-alloc/MiB")
	b.ReportMetric(float64(after.NumGC-before.NumGC)/float64(b.N), "GCs/MiB")
	if _, err := c.Kill(ctx, ch.Session()); err != nil {
		b.Fatal(err)
	}
}

// Read returns as much as p takes of the output at the head, across the recycled segments of
// one binding, and stops at a gap and at another binding's bytes; a short p takes the rest on
// the next Read. Output is pushed as the reader goroutine does, frame by frame.
func TestReadAcrossSegments(t *testing.T) {
	c := newClient("ws://127.0.0.1:1/unused", DialOptions{ManualAck: true})
	defer c.Close()
	ch := c.newChannel()
	fill := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	var want []byte
	for _, f := range [][]byte{fill('a', 10), fill('b', proto.MaxOutputPayload), fill('c', 5)} {
		_ = ch.push(f, MaxWindow, false)
		want = append(want, f...)
	}
	_ = ch.gap(7)
	_ = ch.push(fill('d', 3), MaxWindow, false)
	ch.mu.Lock()
	ch.epoch++ // a new binding (a reconnect's attach)
	ch.mu.Unlock()
	_ = ch.push(fill('e', 4), MaxWindow, false)

	read := func(size int) string {
		t.Helper()
		p := make([]byte, size)
		n, err := ch.Read(p)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return string(p[:n])
	}
	if got := read(1 << 20); got != string(want) {
		t.Fatalf("first read: %d bytes, want the %d before the gap", len(got), len(want))
	}
	if got := ch.Offset(); got != int64(len(want)) {
		t.Fatalf("offset after the first read: %d, want %d", got, len(want))
	}
	if got := read(2); got != "dd" {
		t.Fatalf("after the gap, a short read: %q, want dd", got)
	}
	if got := ch.Offset(); got != int64(len(want))+7+2 {
		t.Fatalf("offset past the gap: %d, want %d", got, len(want)+7+2)
	}
	if got := read(1 << 20); got != "d" {
		t.Fatalf("the rest of the binding: %q, want d (not the next binding's bytes)", got)
	}
	if got := read(1 << 20); got != "eeee" {
		t.Fatalf("the next binding: %q, want eeee", got)
	}
}

// ReadStream returns one stream at a time, in the order the frames came, and the offset counts
// both streams' bytes (a resume is byte-exact for each).
func TestReadStreamSplitsStdoutAndStderr(t *testing.T) {
	c := newClient("ws://127.0.0.1:1/unused", DialOptions{ManualAck: true})
	defer c.Close()
	ch := c.newChannel()
	_ = ch.push([]byte("out1 "), MaxWindow, false)
	_ = ch.push([]byte("out2 "), MaxWindow, false)
	_ = ch.push([]byte("err1 "), MaxWindow, true)
	_ = ch.push([]byte("out3"), MaxWindow, false)
	type read struct {
		s      string
		stderr bool
	}
	want := []read{{"out1 out2 ", false}, {"err1 ", true}, {"out3", false}}
	for i, w := range want {
		p := make([]byte, 64)
		n, stderr, err := ch.ReadStream(context.Background(), p)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if got := (read{string(p[:n]), stderr}); got != w {
			t.Errorf("read %d: got %+v, want %+v", i, got, w)
		}
	}
	if got := ch.Offset(); got != 19 {
		t.Errorf("offset: got %d, want 19 (both streams)", got)
	}
}
