package cluster

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/muxterm/muxterm/session"
)

// TestAskAndTombstones: a session missing from a node's view is found by asking its owner,
// a random id is answered no within milliseconds (every live node said so), and a session whose
// removal was announced is not listed again by a late bucket write of its entry.
func TestAskAndTombstones(t *testing.T) {
	e := startServer(t)
	a := startNode(t, e, "a")
	defer a.Close()
	b := startNode(t, e, "b")
	defer b.Close()
	waitFor(t, "b hears a", 5*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.peers["a"] != nil && b.peers["a"].alive
	})
	ctx := context.Background()

	a.Observe(session.Event{ID: id1, Owner: "alice", Name: "n", Created: time.Now(), Opened: true})
	waitFor(t, "a's session in b's view", 5*time.Second, func() bool { return len(b.List("alice")) == 1 })
	b.mu.Lock()
	delete(b.entries, id1) // as if both the announcement and the bucket's write were not seen yet
	b.mu.Unlock()
	got, ok := b.lookup(ctx, id1)
	if !ok || got.Node != "a" || got.Principal != "alice" {
		t.Fatalf("lookup of a's session missing from b's view: got %+v, %v; want a's entry, from a", got, ok)
	}
	start := time.Now()
	if _, ok := b.lookup(ctx, "ffffffffffffffffffffffffffffffff"); ok {
		t.Fatal("lookup of a random id: found")
	}
	if d := time.Since(start); d > testTTL/2 {
		t.Errorf("lookup of a random id with every node answering took %v", d)
	}

	// Removed: announced at once; then a late write of the entry (as an election would release
	// it) must not list the session again.
	const id2 = "abcdef0123456789abcdef0123456789"
	a.Observe(session.Event{ID: id2, Owner: "alice", Created: time.Now(), Opened: true})
	if err := a.flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The removal announced, its bucket write not done (held back by an election).
	a.annQ.push(session.Event{ID: id2, Owner: "alice", Opened: false})
	waitFor(t, "the removal in b's view", 5*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		_, tomb := b.tombs[id2]
		return tomb
	})
	key := entryKey("a", id2)
	late, _ := json.Marshal(a.sign.signEntry(key, a.entryOf(session.Event{ID: id2, Owner: "alice", Created: time.Now(), Opened: true})))
	if _, err := a.dir.Put(ctx, key, late); err != nil {
		t.Fatal(err)
	}
	// A marker written after it: once b lists it, b's watcher has read the late write too.
	const id3 = "00000000000000000000000000000003"
	key3 := entryKey("a", id3)
	marker, _ := json.Marshal(a.sign.signEntry(key3, a.entryOf(session.Event{ID: id3, Owner: "alice", Created: time.Now(), Opened: true})))
	if _, err := a.dir.Put(ctx, key3, marker); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the marker in b's view", 5*time.Second, func() bool {
		for _, s := range b.List("alice") {
			if s.Session == id3 {
				return true
			}
		}
		return false
	})
	for _, s := range b.List("alice") {
		if s.Session == id2 {
			t.Fatalf("b lists the removed session %s after a late write of its entry", id2)
		}
	}
	// The bucket's removal clears the tombstone.
	if err := a.dir.Purge(ctx, key, jetstream.PurgeTTL(markerTTL)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bucket's removal in b's view", 5*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		_, tomb := b.tombs[id2]
		return !tomb
	})
}
