package client

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/muxterm/muxterm/mux"
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
