//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
)

// TestClusterFigures measures what docs/scaling.md reports, local path against relayed path in
// the same run: output throughput, echo round trip, directory propagation, node-loss detection
// against the TTL, RSS and threads per node. It is a measurement, not a check of the suite:
// it runs only with MUXTERM_FIGURES=1 (make bench-cluster), and asserts only that each
// measurement completed and that loss was detected within the TTL.
func TestClusterFigures(t *testing.T) {
	measurement(t, "MUXTERM_FIGURES")
	unlimited := []string{"--max-open-rate", "0", "--max-sessions", "1000"}
	tc := startClusterWith(t, map[string][]string{"a": unlimited, "b": unlimited, "c": unlimited}, "a", "b", "c")
	a, b := tc.nodes["a"], tc.nodes["b"]
	ca, cb := dialAs(t, a, tc.alice), dialAs(t, b, tc.alice)
	ctx := ctxT(t, 5*time.Minute)

	// Throughput: 8 MiB from a session on a, read on a (local) and through b (relayed).
	const total = 8 << 20
	var local, relayed []float64
	for rep := range 7 {
		for _, via := range []struct {
			name string
			c    *client.Client
			out  *[]float64
		}{{"local", ca, &local}, {"relayed", cb, &relayed}} {
			open, err := ca.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
				Cmd: []string{"sh", "-c", fmt.Sprintf("stty raw -echo; echo READY; read x; exec head -c %d /dev/zero", total)}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := open.ReadUntil(ctx, "READY\n"); err != nil {
				t.Fatal(err)
			}
			id := open.Session()
			if via.c == cb {
				waitListed(t, cb, id, "a", 5*time.Second)
			}
			ch, res, err := via.c.Attach(ctx, id, nil)
			if err != nil {
				t.Fatalf("%s attach: %v", via.name, err)
			}
			if err := open.Detach(ctx); err != nil {
				t.Fatal(err)
			}
			skip := res.End - res.Offset // the replay: READY
			readExactly(t, ch, int(skip), 10*time.Second)
			start := time.Now()
			if _, err := ch.Write([]byte("\n")); err != nil {
				t.Fatal(err)
			}
			readExactly(t, ch, total, time.Minute)
			mbs := float64(total) / (1 << 20) / time.Since(start).Seconds()
			*via.out = append(*via.out, mbs)
			if _, err := via.c.Kill(ctx, id); err != nil {
				t.Fatalf("kill: %v", err)
			}
			t.Logf("throughput rep %d %s: %.0f MiB/s", rep, via.name, mbs)
		}
	}
	t.Logf("FIGURE throughput MiB/s (8 MiB, 7 reps): local median %.0f %v; relayed median %.0f %v; relayed/local %.0f %%",
		median(local), rounded(local), median(relayed), rounded(relayed), 100*median(relayed)/median(local))

	// Echo: one byte typed, the same byte back, 300 times per path, paths interleaved.
	cat := catSession(ctx, t, ca)
	waitListed(t, cb, cat.Session(), "a", 5*time.Second)
	la, _, err := ca.Attach(ctx, cat.Session(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rb, _, err := cb.Attach(ctx, cat.Session(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []*client.Channel{la, rb} {
		if _, err := ch.ReadUntil(ctx, "READY\n"); err != nil { // the replay
			t.Fatal(err)
		}
	}
	var echoL, echoR []float64
	buf := make([]byte, 64)
	for i := range 600 {
		// Whoever types, both channels see the echo: read it on both, time it on the typist's.
		typist, other, out := la, rb, &echoL
		if i%2 == 1 {
			typist, other, out = rb, la, &echoR
		}
		b := []byte{byte('a' + i%26)}
		start := time.Now()
		if _, err := typist.Write(b); err != nil {
			t.Fatal(err)
		}
		if n, err := typist.ReadContext(ctx, buf[:1]); err != nil || n != 1 || buf[0] != b[0] {
			t.Fatalf("echo %d: %v %q", i, err, buf[:n])
		}
		*out = append(*out, float64(time.Since(start).Microseconds())/1000)
		if n, err := other.ReadContext(ctx, buf[:1]); err != nil || n != 1 {
			t.Fatalf("echo %d on the other: %v", i, err)
		}
	}
	t.Logf("FIGURE echo ms (300 each): local p50 %.3f p99 %.3f; relayed p50 %.3f p99 %.3f",
		pct(echoL, 50), pct(echoL, 99), pct(echoR, 50), pct(echoR, 99))
	if _, err := ca.Kill(ctx, cat.Session()); err != nil {
		t.Fatal(err)
	}

	// Attach: local versus through a relay (dial of the owner included).
	sh := catSession(ctx, t, ca)
	waitListed(t, cb, sh.Session(), "a", 5*time.Second)
	var attL, attR []float64
	for i := range 40 {
		c, out := ca, &attL
		if i%2 == 1 {
			c, out = cb, &attR
		}
		start := time.Now()
		ch, _, err := c.Attach(ctx, sh.Session(), nil)
		if err != nil {
			t.Fatal(err)
		}
		*out = append(*out, float64(time.Since(start).Microseconds())/1000)
		if err := ch.Detach(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("FIGURE attach ms (20 each): local p50 %.3f; relayed p50 %.3f", pct(attL, 50), pct(attR, 50))

	// Directory propagation: open on a, poll b's list until it is there.
	var prop []float64
	for range 50 {
		ch, err := ca.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for listed(t, cb, ch.Session()) != "a" {
		}
		prop = append(prop, float64(time.Since(start).Microseconds())/1000)
		if _, err := ca.Kill(ctx, ch.Session()); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("FIGURE propagation open on a → in b's list, ms (50): p50 %.3f p99 %.3f max %.3f",
		pct(prop, 50), pct(prop, 99), slices.Max(prop))

	// RSS and threads per node, and per session: 100 idle shells on a.
	before := procStatus(t, a.cmd.Process.Pid)
	var ids []string
	for range 100 {
		ch, err := ca.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ch.Session())
		if err := ch.Detach(ctx); err != nil {
			t.Fatal(err)
		}
	}
	after := procStatus(t, a.cmd.Process.Pid)
	t.Logf("FIGURE node a: idle with an embedded NATS server: RSS %d KiB, threads %d; with 100 idle sessions: RSS %d KiB, threads %d (%.1f KiB per session)",
		before["VmRSS"], before["Threads"], after["VmRSS"], after["Threads"], float64(after["VmRSS"]-before["VmRSS"])/100)
	for _, id := range ids {
		if _, err := ca.Kill(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	single := startGateway(t)
	ss := procStatus(t, single.cmd.Process.Pid)
	t.Logf("FIGURE a gateway without a cluster, idle: RSS %d KiB, threads %d", ss["VmRSS"], ss["Threads"])

	// Node loss against the TTL: SIGSTOP freezes a (its sockets stay open, its heartbeats
	// stop), so only the TTL can tell; SIGKILL breaks its sockets at once.
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
		tgt := tc.nodes["a"]
		if sig == syscall.SIGKILL {
			tgt = tc.restart("a")
			ca = dialAs(t, tgt, tc.alice)
		}
		s := catSession(ctx, t, ca)
		waitListed(t, cb, s.Session(), "a", 10*time.Second)
		r, _, err := cb.Attach(ctx, s.Session(), nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := tgt.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(ctxT(t, 3*clusterTTL)); err != nil || r.Reason() != "node_lost" {
			t.Fatalf("%v: relay not closed with node_lost: %v %q", sig, err, r.Reason())
		}
		took := time.Since(start)
		listGone := waitListed(t, cb, s.Session(), "", 3*clusterTTL) + took
		t.Logf("FIGURE node loss by %v: relayed channel closed node_lost after %v, gone from b's list after %v (TTL %v)",
			sig, took.Round(time.Millisecond), listGone.Round(time.Millisecond), clusterTTL)
		if took > clusterTTL+clusterTTL/5 {
			t.Errorf("%v: loss detected after %v, want within the TTL %v", sig, took, clusterTTL)
		}
		if sig == syscall.SIGSTOP {
			_ = tgt.cmd.Process.Signal(syscall.SIGKILL)
			<-tgt.exited
		}
	}
}

func procStatus(t *testing.T, pid int) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		k, v, ok := strings.Cut(string(line), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

func median(x []float64) float64 { return pct(x, 50) }

func pct(x []float64, p int) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(min(i, len(s))-1, 0)]
}

func rounded(x []float64) []int {
	out := make([]int, len(x))
	for i, v := range x {
		out[i] = int(v + 0.5)
	}
	return out
}
