//go:build e2e

package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// TestClusterStalledOwnerDoesNotBlockTheSocket (invariant 4 through a relay): node a, which owns
// a session a client on b attached through a relay, is stopped (SIGSTOP) while the client
// floods that relayed channel with input. b's read loop never waits for a: the flood is refused
// with limit_exceeded inputQueue (named with the relayed channel) once b holds a session input
// queue's worth for a (queued, or written and not taken), a local session on the same socket
// still echoes at once, also seconds later while input keeps coming, and the relayed channel
// then closes with node_lost once a's heartbeat and lease lapse (3/4 of the TTL, 30 s here).
func TestClusterStalledOwnerDoesNotBlockTheSocket(t *testing.T) {
	const ttl = 30 * time.Second
	extra := []string{"--cluster-ttl", ttl.String(), "--max-input-rate", "0"}
	tc := startClusterWith(t, map[string][]string{"a": extra, "b": extra, "c": extra}, "a", "b", "c")
	a, b := tc.nodes["a"], tc.nodes["b"]
	ca := dialAs(t, a, tc.alice)
	refused := make(chan *proto.Error, 1)
	cb := dialAsWith(t, b, client.DialOptions{Token: tc.alice, OnServerError: func(e *proto.Error) {
		select {
		case refused <- e:
		default:
		}
	}})
	ctx := ctxT(t, 90*time.Second)

	sa := catSession(ctx, t, ca)
	waitListed(t, cb, sa.Session(), "a", 10*time.Second)
	relayed, _, err := cb.Attach(ctx, sa.Session(), nil)
	if err != nil {
		t.Fatalf("attach a's session through b: %v", err)
	}
	if _, err := relayed.ReadUntil(ctx, "READY\n"); err != nil {
		t.Fatalf("relayed replay: %v", err)
	}
	local := catSession(ctx, t, cb)
	catEchoes(ctx, t, local, "before")

	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })

	// Flood the relayed channel until b refuses; each Write returns once b's socket took it.
	frame := make([]byte, 4096)
	for i := range frame {
		frame[i] = 'x'
	}
	var first *proto.Error
	flood := time.After(20 * time.Second)
	sent := 0
	for first == nil {
		select {
		case first = <-refused:
			continue
		case <-flood:
			t.Fatalf("%d KiB of input to a stopped owner: no refusal from b within 20 s (b's read loop blocked on the relay?)", sent>>10)
		default:
		}
		if _, err := relayed.Write(frame); err != nil {
			t.Fatalf("write to the relayed channel after %d KiB: %v (b stopped reading its socket?)", sent>>10, err)
		}
		sent += len(frame)
	}
	if first.Kind() != proto.KindLimitExceeded || first.Data["limit"] != "inputQueue" ||
		first.Data["channel"] != float64(relayed.ID) {
		t.Fatalf("b's refusal: %v (data %v), want limit_exceeded inputQueue on channel %d", first, first.Data, relayed.ID)
	}
	t.Logf("b refused input for the stopped owner after %d KiB (%v after SIGSTOP)", sent>>10, time.Since(stopped).Round(time.Millisecond))

	// The local channel on the same socket echoes at once.
	start := time.Now()
	catEchoes(ctxT(t, 5*time.Second), t, local, "during")
	if d := time.Since(start); d > time.Second {
		t.Fatalf("local echo on b while a is stopped took %v: the socket's read loop waited for the relay", d)
	}
	t.Logf("local echo on the same socket while the owner is stopped: %v", time.Since(start).Round(time.Microsecond))

	// Input keeps coming (b refuses what does not fit) until the relayed channel closes
	// node_lost.
	pace := time.NewTicker(time.Millisecond)
	defer pace.Stop()
	lost := time.After(client.DefaultWriteTimeout + 30*time.Second)
	blocked := time.After(5 * time.Second) // seconds into the stop
	for closed := false; !closed; {
		select {
		case <-relayed.Closed():
			closed = true
		case <-blocked:
			start := time.Now()
			catEchoes(ctxT(t, 5*time.Second), t, local, "blocked")
			if d := time.Since(start); d > time.Second {
				t.Fatalf("local echo on b seconds into the owner's stop took %v", d)
			}
			t.Logf("local echo seconds into the owner's stop (%v after SIGSTOP): %v", time.Since(stopped).Round(time.Millisecond), time.Since(start).Round(time.Microsecond))
		case <-lost:
			t.Fatalf("relayed channel: not closed %v after SIGSTOP", time.Since(stopped))
		case <-pace.C:
			_, _ = relayed.Write(frame) // refused or queued; an error once the channel ended
		}
	}
	if r := relayed.Reason(); r != "node_lost" {
		t.Fatalf("relayed channel: closed with %q, want node_lost", r)
	}
	t.Logf("relayed channel node_lost %v after SIGSTOP (TTL %v)", time.Since(stopped).Round(time.Millisecond), ttl)
	catEchoes(ctx, t, local, "after")
}
