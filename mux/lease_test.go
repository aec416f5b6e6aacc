package mux

import (
	"fmt"
	"testing"
	"time"

	"github.com/muxterm/muxterm/proto"
)

// TestLeaseCountsFromThePingsSendTime: a pong extends the lease to its ping's send time + the
// lease, so a pong read late (it waited in a buffer while this process was stopped) extends
// nothing that has passed; a payload that is not a lease ping's, or names a time to come,
// extends nothing.
func TestLeaseCountsFromThePingsSendTime(t *testing.T) {
	const d = time.Second
	l := newLease(d)
	at := func(off time.Duration) time.Time { return l.start.Add(off) }
	if l.holds(at(0)) {
		t.Fatal("a lease with no pong holds")
	}
	sent := string(l.ping(at(100 * time.Millisecond)))
	l.renew(sent, at(150*time.Millisecond))
	for _, c := range []struct {
		now  time.Duration
		want bool
	}{{150 * time.Millisecond, true}, {1099 * time.Millisecond, true}, {1100 * time.Millisecond, false}} {
		if got := l.holds(at(c.now)); got != c.want {
			t.Fatalf("holds at %v after the pong of a ping sent at 100ms: got %v, want %v", c.now, got, c.want)
		}
	}
	// The pong of a ping sent at 200 ms, read at 5 s (the process was stopped): lapsed.
	late := string(l.ping(at(200 * time.Millisecond)))
	l.renew(late, at(5*time.Second))
	if l.holds(at(5 * time.Second)) {
		t.Fatal("a pong read 4.8 s after its ping was sent renewed a 1 s lease")
	}
	for _, bad := range []string{"", "muxterm-lease x", "other 1", fmt.Sprintf("%s%d", proto.LeasePing, (10 * time.Second).Nanoseconds())} {
		l.renew(bad, at(5*time.Second))
		if l.holds(at(5 * time.Second)) {
			t.Fatalf("pong payload %q renewed the lease", bad)
		}
	}
}
