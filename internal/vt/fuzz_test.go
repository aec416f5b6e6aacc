package vt

import (
	"math/rand/v2"
	"testing"
)

// FuzzWrite checks, for any output, that the model does not panic and that its snapshot
// rebuilds it. The first bytes choose the size, the history and two resizes, made between
// thirds of the rest (sizes out of bounds included: Resize clamps them).
func FuzzWrite(f *testing.F) {
	for _, tok := range tokens {
		f.Add([]byte("\x50\x10\x05\x00\x00\x00\x00" + tok + "x\r\n" + tok))
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		f.Add(append([]byte{byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(3)), byte(r.IntN(256)), byte(r.IntN(256)), 0, 255}, randomOutput(r, 50)...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 7 {
			return
		}
		size := func(c, r byte) (int, int) {
			switch c % 8 { // now and then absurd
			case 0:
				return 0, 0
			case 1:
				return 100000, int(r)
			}
			return int(c%40) + 1, int(r%15) + 1
		}
		cols, rows := size(in[0], in[1])
		term := New(cols, rows, Options{ScrollbackLines: int(in[2] % 4 * 3)})
		data := in[7:]
		third := len(data) / 3
		term.Write(data[:third])
		if in[3] != 0 {
			term.Resize(size(in[3], in[4]))
		}
		term.Write(data[third : 2*third])
		if in[5] != 0 {
			term.Resize(size(in[5], in[6]))
		}
		term.Write(data[2*third:])
		checkRoundTrip(t, "fuzz", term)
	})
}

func TestRandomBytesBounded(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for _, sb := range []int{0, 1000} {
		term := New(200, 50, Options{ScrollbackLines: sb})
		for i := 0; i < len(data); i += 4096 {
			term.Write(data[i:min(i+4096, len(data))])
		}
		if got, limit := term.MemBytes(), 8<<20; got > limit {
			t.Errorf("scrollback %d: got MemBytes %d after 1 MiB of random bytes, want at most %d", sb, got, limit)
		}
		checkRoundTrip(t, "random bytes", term)
	}
}
