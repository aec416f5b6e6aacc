package cluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muxterm/muxterm/session"
)

func freeRoutePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startRouted starts the embedded servers of names, each with routes to the others only (as
// README's example and the e2e clusters configure them), one after the other.
func startRouted(t *testing.T, names ...string) map[string]*Embedded {
	t.Helper()
	ports := map[string]int{}
	for _, n := range names {
		ports[n] = freeRoutePort(t)
	}
	out := map[string]*Embedded{}
	for _, n := range names {
		var routes []string
		for _, o := range names {
			if o != n {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[o]))
			}
		}
		e, err := StartEmbedded(context.Background(), EmbeddedConfig{Name: n, ClientListen: "127.0.0.1:0",
			RouteListen: fmt.Sprintf("127.0.0.1:%d", ports[n]), Routes: strings.Join(routes, ","), StoreDir: t.TempDir()})
		if err != nil {
			t.Fatalf("embedded %s: %v", n, err)
		}
		t.Cleanup(e.Shutdown)
		out[n] = e
	}
	return out
}

// TestEmbeddedMetaGroupCountsEveryServer: a server given the routes of the two others expects a
// JetStream meta group of three from its first moment, before it has heard from anyone (with
// only the others' routes JetStream expected two).
func TestEmbeddedMetaGroupCountsEveryServer(t *testing.T) {
	ports := []int{freeRoutePort(t), freeRoutePort(t), freeRoutePort(t)}
	e, err := StartEmbedded(context.Background(), EmbeddedConfig{Name: "a", ClientListen: "127.0.0.1:0",
		RouteListen: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		Routes:      fmt.Sprintf("nats-route://127.0.0.1:%d,nats-route://127.0.0.1:%d", ports[1], ports[2]), StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	if got := e.metaSize(); got != 3 {
		t.Fatalf("meta group size with routes to two others: got %d, want 3", got)
	}
}

// TestThreeRoutedNodesForm: three embedded servers routed to each other and a node on each that
// wants three replicas of the directory all start, and an entry one writes reaches the others.
func TestThreeRoutedNodesForm(t *testing.T) {
	es := startRouted(t, "a", "b", "c")
	nodes := map[string]*Node{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	start := time.Now()
	for name, e := range es {
		n, err := New(Config{NATS: e.ClientURL(), Name: name, URL: "ws://127.0.0.1:1/ws", Token: "t", TTL: testTTL, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := n.Start(ctx); err != nil {
				errs <- fmt.Errorf("start %s: %w", name, err)
				return
			}
			mu.Lock()
			nodes[name] = n
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, n := range nodes {
		defer n.Close()
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	t.Logf("three nodes joined after %v", time.Since(start))
	nodes["a"].Observe(session.Event{ID: id1, Owner: "alice", Created: time.Now(), Opened: true})
	for _, name := range []string{"b", "c"} {
		waitFor(t, "a's entry on "+name, 5*time.Second, func() bool { return len(nodes[name].List("alice")) == 1 })
	}
}
