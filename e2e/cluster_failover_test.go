//go:build e2e

package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/cluster"
	"github.com/muxterm/muxterm/proto"
)

// directoryLeader is the node that leads the directory's stream, asked through node g's NATS.
func directoryLeader(t *testing.T, tc *testCluster, g *gateway) string {
	t.Helper()
	user, pass := cluster.EmbeddedCredentials(tc.ctok, "client")
	nc, err := nats.Connect(natsURLOf(t, g), nats.UserInfo(user, pass), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("NATS client: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Second)
	s, err := js.Stream(ctx, "KV_"+cluster.DirectoryBucket)
	if err != nil {
		t.Fatalf("the directory's stream: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		t.Fatalf("the directory's stream info: %v", err)
	}
	return info.Cluster.Leader
}

// TestClusterFailoverInSeconds: one node of three, the directory stream's leader, is SIGKILLed;
// at once a session opened on one survivor is listed by and attachable through the other
// within 2 s of the kill, both ways (the second pair timed from the kill too).
func TestClusterFailoverInSeconds(t *testing.T) {
	tc := startCluster(t, "a", "b", "c")
	ctx := ctxT(t, 90*time.Second)
	victim := directoryLeader(t, tc, tc.nodes["a"])
	var survivors []string
	for _, n := range []string{"a", "b", "c"} {
		if n != victim {
			survivors = append(survivors, n)
		}
	}
	clients := map[string]*client.Client{}
	for _, n := range survivors {
		clients[n] = dialAs(t, tc.nodes[n], tc.alice)
	}
	if err := tc.nodes[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	t.Logf("SIGKILLed %s (the directory's leader)", victim)
	for i, from := range survivors {
		through := survivors[1-i]
		start := time.Now()
		ch, err := clients[from].Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "exec sleep 600"}})
		if err != nil {
			t.Fatalf("open on %s after the kill: %v", from, err)
		}
		opened := time.Since(start)
		listedAfter := waitListed(t, clients[through], ch.Session(), from, 30*time.Second)
		astart := time.Now()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		att, _, err := clients[through].Attach(actx, ch.Session(), nil)
		cancel()
		if err != nil {
			t.Fatalf("attach of %s's new session through %s: %v", from, through, err)
		}
		_ = att.Detach(ctx)
		total := time.Since(killed)
		t.Logf("open on %s: %v; listed on %s %v later; attach %v; %v after the kill",
			from, opened.Round(time.Millisecond), through, listedAfter.Round(time.Millisecond), time.Since(astart).Round(time.Millisecond), total.Round(time.Millisecond))
		if total > 2*time.Second {
			t.Errorf("%s's new session attachable through %s %v after the kill, want within 2 s", from, through, total.Round(time.Millisecond))
		}
	}
	// A random id, asked right after the kill, is answered unknown_session once every node
	// heard alive has said it is not its own: the victim, until its silence makes it lost.
	start := time.Now()
	_, _, err := clients[survivors[0]].Attach(ctx, randomSessionID(), nil)
	if kindOf(t, err) != proto.KindUnknownSession {
		t.Fatalf("attach of a random id after the kill: got %v, want unknown_session", err)
	}
	if d := time.Since(start); d > clusterTTL {
		t.Errorf("attach of a random id after the kill answered in %v, want within the TTL (%v)", d, clusterTTL)
	} else {
		t.Logf("attach of a random id %v after the kill: unknown_session in %v", start.Sub(killed).Round(time.Millisecond), d.Round(time.Millisecond))
	}
}
