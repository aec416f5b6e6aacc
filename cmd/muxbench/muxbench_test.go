package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/websocket"
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

// TestMain lets the test binary serve the pass-through, as muxbench does when re-executed.
func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == passthroughArg {
		if err := servePassthrough(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if testGatewayDir != "" {
		_ = os.RemoveAll(testGatewayDir) // the gateway built once for the tests (echotrace_test.go)
	}
	os.Exit(code)
}

// The pass-through runs in its own process, echoes through a real PTY, and leaves no process
// behind when closed: neither itself nor the shell it ran.
func TestPassthroughProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tag := fmt.Sprintf("MUXBENCH_TEST=%d", os.Getpid())
	pt, err := startPassthrough(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if pt.cmd.Process.Pid == os.Getpid() {
		t.Fatal("the pass-through runs in the test's own process")
	}
	ws, err := pt.dial(ctx, "stty raw -echo; printf R; exec cat")
	if err != nil {
		pt.close()
		t.Fatal(err)
	}
	if _, p, err := ws.ReadMessage(); err != nil || !bytes.Contains(p, []byte("R")) {
		t.Fatalf("first message %q, %v; want R", p, err)
	}
	if err := ws.WriteMessage(websocket.BinaryMessage, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, p, err := ws.ReadMessage(); err != nil || string(p) != "x" {
		t.Fatalf("echo %q, %v; want x", p, err)
	}
	if n := len(taggedProcs(tag)); n != 2 {
		t.Errorf("%d processes carry the tag while a connection is open, want 2 (the pass-through and cat)", n)
	}
	pt.close()
	if !pt.cmd.ProcessState.Exited() || pt.cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("pass-through ended with %v, want exit status 0 after SIGTERM", pt.cmd.ProcessState)
	}
	if pids := taggedProcs(tag); len(pids) > 0 {
		sweepTagged(tag)
		t.Errorf("processes %v outlived the pass-through", pids)
	}
	ws.Close()
}

func TestParseVariant(t *testing.T) {
	v, err := parseVariant("fast=/tmp/gw --window=64KiB  --x=1")
	if err != nil || v.Name != "fast" || v.Bin != "/tmp/gw" || len(v.Args) != 2 || v.Args[0] != "--window=64KiB" {
		t.Fatalf("parseVariant = %+v, %v", v, err)
	}
	for _, bad := range []string{"fast", "=bin", "fast=", "raw=/tmp/gw", "pass=/tmp/gw"} {
		if _, err := parseVariant(bad); err == nil {
			t.Errorf("parseVariant(%q) accepted it", bad)
		}
	}
}

// TestTargetOf: a target is checked against the median it names, the ratio to raw, the ratio to
// the pass-through or the value, and a row without that median has no verdict.
func TestTargetOf(t *testing.T) {
	// muxterm 120 and 130 µs against raw 60 and pass-through 100 in each repetition.
	r := newRow("echo", "x", "µs", []float64{120, 130}, []float64{60, 65}, []float64{100, 100}, nil, "")
	for _, tc := range []struct {
		t    Target
		want bool
	}{
		{Target{Of: "ratio_pass", Op: "<=", Value: 1.05}, false}, // 1.25×
		{Target{Of: "ratio_pass", Op: "<=", Value: 1.3}, true},
		{Target{Of: "ratio_raw", Op: "<=", Value: 1.5}, false}, // 2×
		{Target{Of: "ratio_raw", Op: ">=", Value: 1.9}, true},
		{Target{Of: "value", Op: "<=", Value: 125}, true},
	} {
		if got := tc.t.met(&r); got == nil || *got != tc.want {
			t.Errorf("%+v met = %v, want %v", tc.t, got, tc.want)
		}
	}
	noPass := newRow("echo", "x", "µs", []float64{120}, []float64{60}, nil, nil, "")
	if got := (&Target{Of: "ratio_pass", Op: "<=", Value: 2}).met(&noPass); got != nil {
		t.Errorf("a ratio to a pass-through that was not measured is %v, want no verdict", *got)
	}
}

func TestMinOverMax(t *testing.T) {
	for _, c := range []struct {
		v    []int64
		want float64
	}{{nil, 0}, {[]int64{0, 0}, 0}, {[]int64{5}, 1}, {[]int64{4, 8, 6}, 0.5}, {[]int64{0, 3}, 0}} {
		if got := minOverMax(c.v); got != c.want {
			t.Errorf("minOverMax(%v) = %v, want %v", c.v, got, c.want)
		}
	}
}
