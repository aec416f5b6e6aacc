//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// TestClusterInputNeverRunsAfterNodeLost (at most once): node a, which owns a shell a client on
// b attached through a relay, is stopped (SIGSTOP); the client types a command that creates a
// marker file, and waits for the relayed channel's node_lost. Once a runs again, the command
// never runs: a took nothing of the relay's socket after its lease lapsed (its log says it
// discarded it). Checked after two commands typed on a's own socket ran in the same shell, by
// which time a has read what waited on the relay's socket.
func TestClusterInputNeverRunsAfterNodeLost(t *testing.T) {
	tc := startCluster(t, "a", "b", "c")
	a, b := tc.nodes["a"], tc.nodes["b"]
	ca, cb := dialAs(t, a, tc.alice), dialAs(t, b, tc.alice)
	ctx := ctxT(t, 60*time.Second)

	sh, err := ca.Open(ctx, client.OpenOptions{Cols: 120, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	typeUntil(ctx, t, sh, "echo UP-$((40+2))\r", "UP-42")
	waitListed(t, cb, sh.Session(), "a", 10*time.Second)
	relayed, _, err := cb.Attach(ctx, sh.Session(), nil)
	if err != nil {
		t.Fatalf("attach a's session through b: %v", err)
	}
	typeUntil(ctx, t, relayed, "echo RELAYED-$((40+3))\r", "RELAYED-43")

	marker := filepath.Join(t.TempDir(), "LATE")
	stopped := stopProcess(t, a.cmd.Process.Pid)
	if _, err := relayed.Write([]byte("touch " + marker + "\r")); err != nil {
		t.Fatalf("type through b while a is stopped: %v", err)
	}
	select {
	case <-relayed.Closed():
	case <-time.After(10 * clusterTTL):
		t.Fatalf("relayed channel: not closed %v after SIGSTOP", time.Since(stopped))
	}
	if r := relayed.Reason(); r != "node_lost" {
		t.Fatalf("relayed channel: closed with %q, want node_lost", r)
	}
	t.Logf("node_lost %v after SIGSTOP (TTL %v)", time.Since(stopped).Round(time.Millisecond), clusterTTL)
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	// a's own socket goes on; by the second command's output, a has long read the relay's
	// socket (it was readable the moment a ran again).
	typeUntil(ctx, t, sh, "echo SYNC-$((40+4))\r", "SYNC-44")
	out := typeUntil(ctx, t, sh, "test -e "+marker+"; echo STATE-$?-$((40+5))\r", "-45")
	if !strings.Contains(out, "STATE-1-45") {
		t.Fatalf("the command typed through b before node_lost ran on a after SIGCONT (want the marker absent): %q", out)
	}
	if logs := a.Logs(); !strings.Contains(logs, "lease lapsed") {
		t.Fatalf("a's log does not say it discarded the relay's socket:\n%s", logs)
	}
}

// TestClusterRelayInputToAStoppedOwnerIsBounded: input typed through b for a stopped owner is
// held up to a session input queue's worth (64 KiB), counting what b wrote to a's socket and a
// has not reported taking; the rest of 4 MiB is refused with limit_exceeded inputQueue, whose
// data.bytes add up to all of it but that bound. None of what was held runs once a continues:
// the cat that echoes its input on a's own socket echoes only what a's socket sends.
func TestClusterRelayInputToAStoppedOwnerIsBounded(t *testing.T) {
	extra := []string{"--max-input-rate", "0"}
	tc := startClusterWith(t, map[string][]string{"a": extra, "b": extra, "c": extra}, "a", "b", "c")
	a, b := tc.nodes["a"], tc.nodes["b"]
	ca := dialAs(t, a, tc.alice)
	var refused serverErrors
	cb := dialAsWith(t, b, client.DialOptions{Token: tc.alice, OnServerError: refused.record})
	ctx := ctxT(t, 60*time.Second)

	cat := catSession(ctx, t, ca)
	waitListed(t, cb, cat.Session(), "a", 10*time.Second)
	relayed, _, err := cb.Attach(ctx, cat.Session(), nil)
	if err != nil {
		t.Fatalf("attach a's session through b: %v", err)
	}
	if _, err := relayed.ReadUntil(ctx, "READY\n"); err != nil {
		t.Fatalf("relayed replay: %v", err)
	}
	catEchoes(ctx, t, relayed, "through-b")
	catEchoes(ctx, t, cat, "on-a")

	stopProcess(t, a.cmd.Process.Pid)
	const total = 4 << 20
	frame := []byte(strings.Repeat("x", 4096))
	for sent := 0; sent < total; sent += len(frame) {
		if _, err := relayed.Write(frame); err != nil {
			t.Fatalf("write through b after %d KiB: %v", sent>>10, err)
		}
	}
	select {
	case <-relayed.Closed():
	case <-time.After(10 * clusterTTL):
		t.Fatal("relayed channel: not closed after SIGSTOP")
	}
	if r := relayed.Reason(); r != "node_lost" {
		t.Fatalf("relayed channel: closed with %q, want node_lost", r)
	}
	// Every refusal was queued on b before session.closed: all have arrived.
	var refusedBytes float64
	kinds := map[string]int{}
	for _, e := range refused.all() {
		kinds[fmt.Sprintf("%s/%v", e.Kind(), e.Data["limit"])]++
		if e.Kind() != proto.KindLimitExceeded || e.Data["limit"] != "inputQueue" {
			continue
		}
		if e.Data["channel"] != float64(relayed.ID) {
			t.Fatalf("inputQueue refusal %v: data %v, want channel %d", e, e.Data, relayed.ID)
		}
		n, _ := e.Data["bytes"].(float64)
		refusedBytes += n
	}
	held := total - int(refusedBytes)
	t.Logf("4 MiB typed at a stopped owner: %d bytes held (queued or in flight), %d refused inputQueue; refusals %v", held, int(refusedBytes), kinds)
	if held < 0 || held > 64<<10 {
		t.Fatalf("b held %d bytes for the stopped owner (refused %d of %d): want at most 64 KiB", held, int(refusedBytes), total)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	out := catEchoes(ctx, t, cat, "after-stop")
	if strings.Contains(out, "x") {
		t.Fatalf("input held for the stopped owner reached its program after node_lost: %q…", out[:min(len(out), 80)])
	}
}

// stopProcess sends SIGSTOP to pid and returns once every one of its threads is stopped: kill
// returns when the signal is queued, and under load the other threads run on until the one
// that took the signal is scheduled and stops them all. SIGCONT follows in cleanup.
func stopProcess(t *testing.T, pid int) time.Time {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	deadline := time.Now().Add(10 * time.Second)
	for tick := time.NewTicker(time.Millisecond); ; <-tick.C {
		if allStopped(t, pid) {
			tick.Stop()
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d: not every thread stopped 10 s after SIGSTOP", pid)
		}
	}
}

// allStopped reports whether every thread of pid is in state T (stopped).
func allStopped(t *testing.T, pid int) bool {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false // a thread that just ended: look again
		}
		// pid (comm) state ...: comm may hold spaces and parentheses; the state follows the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}
