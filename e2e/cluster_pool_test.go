//go:build e2e

package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
)

// TestClusterRelaysShareOneSocket (relay pooling): 20 of a's sessions attached through b cost b
// one socket to a between them, not one each; a channel detached leaves the others echoing on
// the shared socket, and when a is killed every channel on it closes node_lost.
func TestClusterRelaysShareOneSocket(t *testing.T) {
	const n = 20
	tc := startCluster(t, "a", "b", "c")
	a, b := tc.nodes["a"], tc.nodes["b"]
	ca, cb := dialAs(t, a, tc.alice), dialAs(t, b, tc.alice)
	ctx := ctxT(t, 60*time.Second)

	var ids []string
	for range n {
		ids = append(ids, catSession(ctx, t, ca).Session())
	}
	waitListed(t, cb, ids[n-1], "a", 10*time.Second)
	before := fdCount(t, b.cmd.Process.Pid)
	var relayed []*client.Channel
	for i, id := range ids {
		ch, _, err := cb.Attach(ctx, id, nil)
		if err != nil {
			t.Fatalf("attach %d through b: %v", i, err)
		}
		if _, err := ch.ReadUntil(ctx, "READY\n"); err != nil {
			t.Fatalf("relayed replay %d: %v", i, err)
		}
		relayed = append(relayed, ch)
	}
	after := fdCount(t, b.cmd.Process.Pid)
	t.Logf("b's descriptors: %d before, %d with %d relayed channels", before, after, n)
	if after-before > 2 {
		t.Fatalf("b's descriptors grew by %d for %d relayed channels to one node: want one shared socket", after-before, n)
	}
	if err := relayed[0].Detach(ctx); err != nil {
		t.Fatalf("detach: %v", err)
	}
	for i, ch := range relayed[1:] {
		catEchoes(ctx, t, ch, fmt.Sprintf("still-%d", i+1))
	}

	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i, ch := range relayed[1:] {
		select {
		case <-ch.Closed():
		case <-time.After(5 * clusterTTL):
			t.Fatalf("relayed channel %d: not closed after a's SIGKILL", i+1)
		}
		if r := ch.Reason(); r != "node_lost" {
			t.Fatalf("relayed channel %d: closed with %q, want node_lost", i+1, r)
		}
	}
}
