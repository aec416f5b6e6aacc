package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/leakcheck"
	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

func TestMain(m *testing.M) { leakcheck.Main(m, leakcheck.Options{}) }

const testTTL = 600 * time.Millisecond

func startServer(t *testing.T) *Embedded {
	t.Helper()
	e, err := StartEmbedded(context.Background(), EmbeddedConfig{Name: "nats0", ClientListen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

func startNode(t *testing.T, e *Embedded, name string) *Node {
	t.Helper()
	n, err := New(Config{NATS: e.ClientURL(), Name: name, URL: "ws://127.0.0.1:1/ws", Token: "t",
		TTL: testTTL, Replicas: 1})
	if err != nil {
		t.Fatalf("new %s: %v", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return n
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		<-tick.C
	}
	return time.Since(start)
}

const (
	id1 = "0123456789abcdef0123456789abcdef"
	id2 = "fedcba9876543210fedcba9876543210"
)

// TestDirectory: an entry one node writes is listed by another for its principal only, with
// the node named; its removal propagates; a node whose heartbeat stops is lost after the TTL
// (its sessions vanish from lists and an attach gets node_lost); the node restarted sweeps
// its stale entry.
func TestDirectory(t *testing.T) {
	e := startServer(t)
	a := startNode(t, e, "a")
	b := startNode(t, e, "b")
	defer b.Close()

	created := time.Now()
	a.Observe(session.Event{ID: id1, Owner: "alice", Name: "build", Created: created, Opened: true})
	waitFor(t, "a's session in b's list", 5*time.Second, func() bool { return len(b.List("alice")) == 1 })
	got := b.List("alice")[0]
	if got.Session != id1 || got.Node != "a" || got.Name != "build" {
		t.Fatalf("b's list: got %+v, want %s on node a named build", got, id1)
	}
	if l := b.List("bob"); len(l) != 0 {
		t.Fatalf("bob's list: got %+v, want none", l)
	}
	if l := a.List("alice"); len(l) != 0 {
		t.Fatalf("a's remote list: got %+v, want none (its own sessions come from its registry)", l)
	}
	a.Observe(session.Event{ID: id1, Owner: "alice", Opened: false})
	waitFor(t, "removal seen by b", 5*time.Second, func() bool { return len(b.Entries()) == 0 })

	// a second session, then a stops: its heartbeat ends and it is lost after the TTL. Its id
	// is new, as every session's is: an announced removal keeps its id out of the directory for
	// tombTTL, against the bucket's older write arriving after it.
	a.Observe(session.Event{ID: id2, Owner: "alice", Created: created, Opened: true})
	waitFor(t, "entry seen by b", 5*time.Second, func() bool { return len(b.List("alice")) == 1 })
	// The bucket holds it too before a stops: the restarted a sweeps the bucket. (b saw it by its
	// announcement, which may come first; a real restart also has a new boot id, which b's list
	// checks, but these nodes share this process's.)
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := a.kvQ.flush(fctx); err != nil {
		t.Fatalf("a's bucket write: %v", err)
	}
	cancel()
	a.stop() // the heartbeat stops, the entry stays: as if a were killed
	a.wg.Wait()
	a.nc.Close()
	took := waitFor(t, "a lost", 3*testTTL, func() bool { return len(b.List("alice")) == 0 })
	if took > testTTL+testTTL/2 {
		t.Errorf("loss detected after %v, want within about the TTL %v", took, testTTL)
	}
	if _, _, err := b.owner(context.Background(), "alice", id2); !isClosed(err, ReasonNodeLost) {
		t.Fatalf("owner of a lost node's session: got %v, want session_closed node_lost", err)
	}
	if _, _, err := b.owner(context.Background(), "bob", id2); !errors.Is(err, mux.ErrNotRemote) {
		t.Fatalf("owner of a lost node's session asked by another principal: got %v, want not remote (as a random id)", err)
	}
	if n := len(b.Entries()); n != 1 {
		t.Fatalf("b's directory: got %d entries, want a's stale one until a comes back", n)
	}
	a2 := startNode(t, e, "a")
	defer a2.Close()
	waitFor(t, "stale entry swept", 5*time.Second, func() bool { return len(b.Entries()) == 0 })
	if _, _, err := b.owner(context.Background(), "alice", id2); !errors.Is(err, mux.ErrNotRemote) {
		t.Fatalf("owner after the sweep: got %v, want not remote", err)
	}
}

func isClosed(err error, reason string) bool {
	var pe *proto.Error
	return errors.As(err, &pe) && pe.Kind() == proto.KindSessionClosed && pe.Data["reason"] == reason
}
