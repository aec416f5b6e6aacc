package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"testing"
)

func TestBase64Len(t *testing.T) {
	for _, n := range []int64{0, 1, 2, 3, 56, 57, 58, 100, 1000, 1 << 20} {
		out, err := exec.Command("sh", "-c", fmt.Sprintf("head -c %d /dev/zero | base64", n)).Output()
		if err != nil {
			t.Skipf("base64: %v", err)
		}
		if got := base64Len(n); got != int64(len(out)) {
			t.Errorf("base64Len(%d) = %d, base64 printed %d", n, got, len(out))
		}
	}
}

func seqOutput(n int) []byte {
	var b []byte
	for k := 1; k <= n; k++ {
		b = strconv.AppendInt(b, int64(k), 10)
		b = append(b, '\n')
	}
	return b
}

func TestSeqOffsets(t *testing.T) {
	out := seqOutput(12000)
	for _, k := range []int64{1, 9, 10, 99, 100, 999, 1000, 11999} {
		off := seqLineOffset(k)
		want := strconv.AppendInt(nil, k, 10)
		if !bytes.HasPrefix(out[off:], append(want, '\n')) {
			t.Errorf("seqLineOffset(%d) = %d: %q", k, off, out[off:off+8])
		}
	}
	for off := int64(0); off < int64(len(out))-64; off += 7 {
		if m := seqMatch(off, out[off:off+64]); m != 64 {
			t.Fatalf("seqMatch(%d) = %d", off, m)
		}
		if a, ok := seqActual(out[off : off+64]); !ok || a != off {
			t.Fatalf("seqActual at %d = %d, %v", off, a, ok)
		}
	}
	if m := seqMatch(100, out[101:165]); m == 64 {
		t.Error("seqMatch accepted a shifted chunk")
	}
}

func TestQuantile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]float64{0.5: 5, 0.99: 10, 0.1: 1, 0.11: 2} {
		if got := quantile(s, q); got != want {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
}
