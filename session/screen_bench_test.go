package session

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
)

// BenchmarkScreenIdleMemory reports the heap an idle session holds (a prompt printed, then
// nothing), without its screen and with it, at 80x24 and 200x50: bytes/session over 100
// sessions of each, opened one lot after the other. Run with -benchtime 1x.
func BenchmarkScreenIdleMemory(b *testing.B) {
	for _, size := range [][2]int{{80, 24}, {200, 50}} {
		b.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(b *testing.B) {
			for range b.N {
				heap := func() int64 {
					runtime.GC()
					runtime.GC()
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					return int64(m.HeapAlloc)
				}
				const n = 100
				before := heap()
				plain := idleSessions(b, n, size[0], size[1], false)
				mid := heap()
				screened := idleSessions(b, n, size[0], size[1], true)
				after := heap()
				b.ReportMetric(float64(mid-before)/n, "B/session-plain")
				b.ReportMetric(float64(after-mid)/n, "B/session-screen")
				runtime.KeepAlive(plain)
				runtime.KeepAlive(screened)
			}
		})
	}
}

// idleSessions opens n sessions that print a prompt and wait, and returns them once each
// prompt is read (and, with screens, its model has read it).
func idleSessions(b *testing.B, n, cols, rows int, screens bool) []*Session {
	o := testOptions()
	o.NoScreen = !screens
	o.ScreenScrollback = 1000
	r := NewRegistry(o, nil)
	var ss []*Session
	for range n {
		wake, wakeFn := testutil.WakeChan()
		s, v, err := r.Open(Spec{Argv: []string{"/bin/sh", "-c", `printf 'user@host:~/src/muxterm$ '; exec sleep 600`},
			Cols: cols, Rows: rows, Owner: "alice"}, 0, wakeFn)
		if err != nil {
			b.Fatal(err)
		}
		cleanupSession(b, s)
		collect(b, v, wake, nil).waitOutput(b, "$ ", 10*time.Second)
		if s.scr != nil {
			if _, err := s.Capture(false, 0); err != nil { // the model has read the prompt
				b.Fatal(err)
			}
		}
		ss = append(ss, s)
	}
	return ss
}

// BenchmarkScreenStream streams a log through one session read by one viewer, with the screen
// and without: MB/s of output, and for the screen how far behind the ring's end its model got
// (lag-max-KiB) and what it skipped (lost-B). -bench ScreenStream -benchtime 1x with
// MUXTERM_BENCH_BYTES (default 256 MiB) sets the size.
func BenchmarkScreenStream(b *testing.B) {
	total := int64(256 << 20)
	if v := getenvInt("MUXTERM_BENCH_BYTES"); v > 0 {
		total = v
	}
	for _, screens := range []bool{false, true} {
		b.Run(fmt.Sprintf("screen=%v", screens), func(b *testing.B) {
			for range b.N {
				o := testOptions()
				o.NoScreen = !screens
				r := NewRegistry(o, nil)
				wake, wakeFn := testutil.WakeChan()
				script := fmt.Sprintf(`yes 'drwxr-xr-x  2 root root  4096 Dec  4 20:33 \033[01;34mmuxterm\033[0m some/path/file.go' | head -c %d; echo; echo STREAM-END`, total)
				s, v, err := r.Open(Spec{Argv: []string{"/bin/sh", "-c", script}, Cols: 120, Rows: 40, Owner: "alice"}, 0, wakeFn)
				if err != nil {
					b.Fatal(err)
				}
				cleanupSession(b, s)
				start := time.Now()
				buf := make([]byte, 64<<10)
				var got int64
				for {
					n, _, err := v.Read(buf)
					got += int64(n)
					if err != nil {
						break
					}
					if n == 0 {
						<-wake
					}
				}
				el := time.Since(start)
				b.SetBytes(got)
				b.ReportMetric(float64(got)/el.Seconds()/(1<<20), "MiB/s")
				if sc := s.scr; sc != nil {
					s.mu.Lock()
					lag := sc.lagMax
					s.mu.Unlock()
					snap, err := s.Capture(false, 0)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(lag)/1024, "lag-max-KiB")
					b.ReportMetric(float64(snap.Lost), "lost-B")
				}
			}
		})
	}
}

// getenvInt reads an integer from the environment (0 when unset or not a number).
func getenvInt(name string) int64 {
	v, err := strconv.ParseInt(os.Getenv(name), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// BenchmarkAttachPaint200x50 measures an attach that paints a 200x50 screen full of coloured
// text, without history and with 1000 lines of it (the paint's catch-up, snapshot and
// subscription, under the locks an attach takes), and reports its p50 and p99.
func BenchmarkAttachPaint200x50(b *testing.B) {
	for _, history := range []int{0, 1000} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) { attachPaint(b, history) })
	}
}

func attachPaint(b *testing.B, history int) {
	o := testOptions()
	o.ScreenScrollback = history
	r := NewRegistry(o, nil)
	wake, wakeFn := testutil.WakeChan()
	s, v, err := r.Open(Spec{Argv: []string{"/bin/sh", "-c",
		`i=0; while [ $i -lt 1100 ]; do printf '\033[3%dm%04d %0190d\033[m\n' $((i % 8)) $i $i; i=$((i+1)); done; printf DONE; exec sleep 600`},
		Cols: 200, Rows: 50, Owner: "alice"}, 0, wakeFn)
	if err != nil {
		b.Fatal(err)
	}
	cleanupSession(b, s)
	collect(b, v, wake, nil).waitOutput(b, "DONE", 30*time.Second)
	var took []time.Duration
	var paint int
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		v2, info, err := r.AttachWith(s.ID(), "alice", AttachOptions{From: -1, Screen: ScreenAlways}, nil)
		took = append(took, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		paint = info.Screen
		v2.Close()
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(paint), "paint-B")
}

// BenchmarkEchoRecordingStalled: a keystroke's echo through a session (cat on a raw terminal)
// with no recording, and with its recording on a stalled disk (a pipe nobody reads, whose
// writer blocks at once: the recorder's queue fills and drops). Reports each echo's p50 and
// p99; the ratio of the two sub-benchmarks is the cost a stalled disk puts on typing.
func BenchmarkEchoRecordingStalled(b *testing.B) {
	for _, stalled := range []bool{false, true} {
		b.Run(fmt.Sprintf("stalled=%v", stalled), func(b *testing.B) {
			o := testOptions()
			if stalled {
				pr, pw, err := os.Pipe()
				if err != nil {
					b.Fatal(err)
				}
				defer pr.Close()
				defer pw.Close()
				o.Record = RecordOptions{Dir: b.TempDir(), All: true}
				o.testRecordWriter = pw
			}
			r := NewRegistry(o, nil)
			wake, wakeFn := testutil.WakeChan()
			s, v, err := r.Open(Spec{Argv: []string{"/bin/sh", "-c", "stty raw -echo; printf R; head -c 4194304 /dev/zero; exec cat"},
				Cols: 80, Rows: 24, Owner: "alice"}, 0, wakeFn)
			if err != nil {
				b.Fatal(err)
			}
			cleanupSession(b, s)
			buf := make([]byte, 64<<10)
			readN := func(n int) {
				for got := 0; got < n; {
					k, _, err := v.Read(buf[:min(len(buf), n-got)])
					if err != nil {
						b.Fatal(err)
					}
					got += k
					if k == 0 {
						<-wake
					}
				}
			}
			readN(1 + 4<<20) // R and 4 MiB: the stalled recorder's pipe and 1 MiB queue are full
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if _, err := s.Write([]byte("x")); err != nil {
					b.Fatal(err)
				}
				readN(1)
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			if stalled && s.rec.Dropped() == 0 {
				b.Fatal("the stalled recording dropped nothing: the disk was not stalled")
			}
		})
	}
}
