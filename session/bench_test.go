package session

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
)

var benchChunks = []int{64, 4 << 10, 32 << 10}

func BenchmarkRingAppend(b *testing.B) {
	for _, chunk := range benchChunks {
		b.Run(fmt.Sprintf("chunk=%d", chunk), func(b *testing.B) {
			r := newRing(defaultScrollback)
			p := pattern(0, chunk)
			r.append(make([]byte, defaultScrollback)) // grown and full: the steady state
			b.SetBytes(int64(chunk))
			b.ResetTimer()
			for range b.N {
				r.append(p)
			}
		})
	}
}

func BenchmarkRingRead(b *testing.B) {
	for _, chunk := range benchChunks {
		b.Run(fmt.Sprintf("chunk=%d", chunk), func(b *testing.B) {
			r := newRing(defaultScrollback)
			r.append(pattern(0, defaultScrollback+12345)) // full, and wrapped
			p := make([]byte, chunk)
			off := r.start
			b.SetBytes(int64(chunk))
			b.ResetTimer()
			for range b.N {
				n, _, next := r.readAt(p, off)
				if n < chunk {
					next = r.start // wrap around to the oldest byte
				}
				off = next
			}
		})
	}
}

// BenchmarkKill measures Registry.Kill from the call to its return, with the default options
// (KillGrace 250ms, escapee policy on), and reports the median and 99th percentile.
func BenchmarkKill(b *testing.B) {
	ready := func(b *testing.B, r *Registry, script string) *Session {
		wake, wakeFn := testutil.WakeChan()
		s, v := openT(b, r, "alice", wakeFn, "/bin/sh", "-c", script)
		collect(b, v, wake, nil).waitOutput(b, "READY", 10*time.Second)
		return s
	}
	cases := []struct {
		name string
		open func(b *testing.B) (*Registry, *Session)
	}{
		{"plain shell", func(b *testing.B) (*Registry, *Session) {
			r := NewRegistry(testOptions(), nil)
			return r, ready(b, r, "echo READY; while :; do sleep 1; done")
		}},
		{"shell trapping HUP and TERM", func(b *testing.B) (*Registry, *Session) {
			r := NewRegistry(testOptions(), nil)
			return r, ready(b, r, "trap '' HUP TERM; echo READY; while :; do sleep 1; done")
		}},
		{"shell with an escapee", func(b *testing.B) (*Registry, *Session) {
			r, s, _, _ := openWithEscapee(b, testOptions(), "")
			return r, s
		}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			b.StopTimer()
			for range b.N {
				r, s := bc.open(b)
				b.StartTimer()
				start := time.Now()
				res, err := r.Kill(context.Background(), s.ID(), "alice")
				d := time.Since(start)
				b.StopTimer()
				if err != nil || !res.Reaped || res.Survivors != 0 {
					b.Fatalf("kill: got %+v, %v, want reaped and no survivors", res, err)
				}
				lat = append(lat, d)
				endSession(b, s)
			}
			slices.Sort(lat)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
			b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*99/100)]), "p99-ms")
		})
	}
}
