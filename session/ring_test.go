package session

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// pattern returns the n bytes the tests append at offsets [off, off+n): byte i is i mod 251,
// so any misplaced byte shows.
func pattern(off int64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((off + int64(i)) % 251)
	}
	return b
}

// appendSizes appends len(sizes) chunks of the pattern to r.
func appendSizes(r *ring, sizes ...int) {
	for _, n := range sizes {
		r.append(pattern(r.end, n))
	}
}

func TestRing(t *testing.T) {
	type read struct {
		off      int64
		p        int // len of the buffer passed to readAt
		wantN    int
		wantLost int64
		wantNext int64
	}
	tests := []struct {
		name       string
		max        int
		appends    []int
		wantStart  int64
		wantEnd    int64
		wantBufLen int
		reads      []read
	}{
		{name: "empty", max: 16, wantBufLen: 0,
			reads: []read{{off: 0, p: 8, wantN: 0, wantNext: 0}}},
		{name: "first append allocates the minimum", max: 1 << 20, appends: []int{10},
			wantEnd: 10, wantBufLen: ringMinAlloc,
			reads: []read{{off: 0, p: 100, wantN: 10, wantNext: 10}, {off: 4, p: 100, wantN: 6, wantNext: 10}}},
		{name: "growth doubles", max: 1 << 20, appends: []int{4000, 1000},
			wantEnd: 5000, wantBufLen: 2 * ringMinAlloc,
			reads: []read{{off: 0, p: 5000, wantN: 5000, wantNext: 5000}}},
		{name: "growth jumps to the need", max: 1 << 20, appends: []int{1, 20000},
			wantEnd: 20001, wantBufLen: 32 << 10,
			reads: []read{{off: 0, p: 1 << 16, wantN: 20001, wantNext: 20001}}},
		{name: "growth keeps earlier data", max: 1 << 20, appends: []int{3000, 3000, 3000},
			wantEnd: 9000, wantBufLen: 16 << 10,
			reads: []read{{off: 0, p: 9000, wantN: 9000, wantNext: 9000}}},
		{name: "growth capped at a max that is not a power of two", max: 10000, appends: []int{4096, 5000},
			wantEnd: 9096, wantBufLen: 10000,
			reads: []read{{off: 0, p: 1 << 14, wantN: 9096, wantNext: 9096}}},
		{name: "full ring at a max that is not a power of two wraps", max: 10000, appends: []int{4096, 5000, 3000},
			wantStart: 2096, wantEnd: 12096, wantBufLen: 10000,
			reads: []read{{off: 0, p: 1 << 14, wantN: 10000, wantLost: 2096, wantNext: 12096}}},
		{name: "exactly max", max: 10, appends: []int{10},
			wantEnd: 10, wantBufLen: 10,
			reads: []read{{off: 0, p: 10, wantN: 10, wantNext: 10}}},
		{name: "one past max", max: 10, appends: []int{10, 1},
			wantStart: 1, wantEnd: 11, wantBufLen: 10,
			reads: []read{{off: 0, p: 10, wantN: 10, wantLost: 1, wantNext: 11}}},
		{name: "wraparound", max: 10, appends: []int{7, 7},
			wantStart: 4, wantEnd: 14, wantBufLen: 10,
			reads: []read{
				{off: 4, p: 10, wantN: 10, wantNext: 14},
				{off: 0, p: 10, wantN: 10, wantLost: 4, wantNext: 14},
				{off: 9, p: 10, wantN: 5, wantNext: 14},
				{off: 14, p: 10, wantN: 0, wantNext: 14},
			}},
		{name: "many wraps", max: 10, appends: []int{3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
			wantStart: 65, wantEnd: 75, wantBufLen: 10,
			reads: []read{{off: 60, p: 4, wantN: 4, wantLost: 5, wantNext: 69}, {off: 69, p: 100, wantN: 6, wantNext: 75}}},
		{name: "partial reads", max: 100, appends: []int{50},
			wantEnd: 50, wantBufLen: 100,
			reads: []read{{off: 0, p: 20, wantN: 20, wantNext: 20}, {off: 20, p: 20, wantN: 20, wantNext: 40}, {off: 40, p: 20, wantN: 10, wantNext: 50}}},
		{name: "append larger than max into an empty ring", max: 10, appends: []int{25},
			wantStart: 15, wantEnd: 25, wantBufLen: 10,
			reads: []read{{off: 0, p: 100, wantN: 10, wantLost: 15, wantNext: 25}}},
		{name: "append larger than max over wrapped data", max: 10, appends: []int{7, 7, 25},
			wantStart: 29, wantEnd: 39, wantBufLen: 10,
			reads: []read{{off: 14, p: 100, wantN: 10, wantLost: 15, wantNext: 39}}},
		{name: "append larger than max into a ring still growing", max: 10000, appends: []int{100, 30000},
			wantStart: 20100, wantEnd: 30100, wantBufLen: 10000,
			reads: []read{{off: 0, p: 1 << 15, wantN: 10000, wantLost: 20100, wantNext: 30100}}},
		{name: "empty appends change nothing", max: 10, appends: []int{0, 4, 0},
			wantEnd: 4, wantBufLen: 10,
			reads: []read{{off: 0, p: 10, wantN: 4, wantNext: 4}}},
		{name: "max of one", max: 1, appends: []int{1, 5, 1},
			wantStart: 6, wantEnd: 7, wantBufLen: 1,
			reads: []read{{off: 0, p: 10, wantN: 1, wantLost: 6, wantNext: 7}}},
		{name: "zero max means one", max: 0, appends: []int{3},
			wantStart: 2, wantEnd: 3, wantBufLen: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(tt.max)
			appendSizes(&r, tt.appends...)
			if r.start != tt.wantStart || r.end != tt.wantEnd {
				t.Fatalf("start, end: got %v, %v, want %v, %v", r.start, r.end, tt.wantStart, tt.wantEnd)
			}
			if len(r.buf) != tt.wantBufLen {
				t.Errorf("backing array: got %v bytes, want %v", len(r.buf), tt.wantBufLen)
			}
			for _, rd := range tt.reads {
				p := make([]byte, rd.p)
				n, lost, next := r.readAt(p, rd.off)
				if n != rd.wantN || lost != rd.wantLost || next != rd.wantNext {
					t.Errorf("readAt(%d bytes, %d): got n=%v lost=%v next=%v, want n=%v lost=%v next=%v",
						rd.p, rd.off, n, lost, next, rd.wantN, rd.wantLost, rd.wantNext)
					continue
				}
				if want := pattern(next-int64(n), n); !bytes.Equal(p[:n], want) {
					t.Errorf("readAt(%d bytes, %d): got %v, want %v", rd.p, rd.off, p[:n], want)
				}
			}
		})
	}
}

// TestRingMatchesModel appends random sizes (up to twice the max) and checks after every
// append that the ring holds exactly the newest min(total, max) bytes, that reads from random
// offsets report exactly the bytes lost, and that the backing array only grows by doubling.
func TestRingMatchesModel(t *testing.T) {
	for _, limit := range []int{1, 7, 100, ringMinAlloc, 10000, 64 << 10} {
		t.Run(fmt.Sprintf("max=%d", limit), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(limit), 42))
			r := newRing(limit)
			var total int64
			lastLen := 0
			// Fewer rounds for large rings: the race detector makes each byte costly.
			for i := range max(50, min(500, 4<<20/(2*limit))) {
				n := rng.IntN(2*limit + 1)
				if i%7 == 0 {
					n = rng.IntN(16) // many small appends too
				}
				r.append(pattern(total, n))
				total += int64(n)

				wantStart := max(int64(0), total-int64(limit))
				if r.end != total || r.start != wantStart {
					t.Fatalf("after %v bytes: got start=%v end=%v, want start=%v end=%v", total, r.start, r.end, wantStart, total)
				}
				if len(r.buf) > limit {
					t.Fatalf("backing array: got %v bytes, want at most %v", len(r.buf), limit)
				}
				if l := len(r.buf); l != lastLen && l != limit && l < 2*lastLen {
					t.Fatalf("backing array grew from %v to %v: want doubling or max %v", lastLen, l, limit)
				}
				lastLen = len(r.buf)

				off := rng.Int64N(total + 1)
				p := make([]byte, rng.IntN(limit+1)+1)
				got, lost, next := r.readAt(p, off)
				wantLost := max(int64(0), wantStart-off)
				from := off + wantLost
				wantN := int(min(int64(len(p)), total-from))
				if lost != wantLost || got != wantN || next != from+int64(wantN) {
					t.Fatalf("readAt(%d bytes, %d) after %v bytes: got n=%v lost=%v next=%v, want n=%v lost=%v next=%v",
						len(p), off, total, got, lost, next, wantN, wantLost, from+int64(wantN))
				}
				if want := pattern(from, wantN); !bytes.Equal(p[:got], want) {
					t.Fatalf("readAt(%d bytes, %d) after %v bytes: wrong bytes", len(p), off, total)
				}
			}
		})
	}
}
