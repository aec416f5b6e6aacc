//go:build e2e

package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/muxterm/muxterm/cluster"
	"github.com/muxterm/muxterm/internal/testutil"
)

var natsJoined = regexp.MustCompile(`cluster joined.* nats=(nats://\S+)`)

// natsURLOf is node g's NATS client URL, from its "cluster joined" log line.
func natsURLOf(t *testing.T, g *gateway) string {
	t.Helper()
	var url string
	testutil.WaitFor(t, 10*time.Second, "'cluster joined' in the log", func() bool {
		m := natsJoined.FindStringSubmatch(g.Logs())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	return url
}

// TestClusterForgedDirectoryAndHeartbeats: a NATS client that has the NATS credentials but not
// the cluster token (a NATS operator, the holder of an external server's credentials) writes
// directory entries of principal alice (one for a node that does not exist, one under a real
// node's name) signed with what it has, and heartbeats that name a listener it controls: for
// its own node, and copies of a real node's heartbeats with the URL swapped. No node lists the
// forged entries, an attach of one gets a random id's answer, a real session of the node whose
// heartbeats are copied stays attachable through the others, no connection at all reaches the
// probe's listener, and each node logs the forgeries.
func TestClusterForgedDirectoryAndHeartbeats(t *testing.T) {
	tc := startCluster(t, "a", "b", "c")
	ctx := ctxT(t, 60*time.Second)

	// The probe's listener: it counts connections (a relay's dial would carry the cluster token).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	var lwg sync.WaitGroup
	lwg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	})
	defer func() {
		ln.Close()
		lwg.Wait()
	}()
	probeURL := "ws://" + ln.Addr().String() + "/ws"

	user, pass := cluster.EmbeddedCredentials(tc.ctok, "client")
	nc, err := nats.Connect(natsURLOf(t, tc.nodes["a"]), nats.UserInfo(user, pass), nats.NoEcho(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("the probe's NATS client with the NATS credentials: %v", err)
	}
	defer nc.Close()
	// What the probe signs with: the one secret it holds.
	forge := func(fields ...string) string {
		m := hmac.New(sha256.New, []byte(pass))
		for _, f := range fields {
			m.Write([]byte(f))
		}
		return hex.EncodeToString(m.Sum(nil))
	}

	// Alice's real session on b, before the forgeries.
	cb := dialAs(t, tc.nodes["b"], tc.alice)
	real := catSession(ctx, t, cb)
	ca := dialAs(t, tc.nodes["a"], tc.alice)
	waitListed(t, ca, real.Session(), "b", 10*time.Second)

	// Heartbeats: its own node's, and b's with the probe's URL, every 100 ms until the end.
	var hbwg sync.WaitGroup
	hbctx, hbstop := context.WithCancel(context.Background())
	defer func() {
		hbstop()
		hbwg.Wait()
	}()
	var copies atomic.Int64
	copied, err := nc.Subscribe("muxterm.heartbeat.b", func(m *nats.Msg) {
		var hb map[string]any
		if json.Unmarshal(m.Data, &hb) != nil {
			return
		}
		hb["url"] = probeURL
		b, _ := json.Marshal(hb)
		if nc.Publish(m.Subject, b) == nil {
			copies.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer copied.Unsubscribe()
	hbwg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			hb, _ := json.Marshal(map[string]any{"node": "ghost", "url": probeURL, "boot": "1-1", "sessions": 0,
				"sig": forge("ghost", probeURL, "1-1", "0")})
			_ = nc.Publish("muxterm.heartbeat.ghost", hb)
			select {
			case <-tick.C:
			case <-hbctx.Done():
				return
			}
		}
	})

	// Entries of alice: on the ghost node, and under a's name.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, cluster.DirectoryBucket)
	if err != nil {
		t.Fatalf("the probe opens the directory: %v", err)
	}
	forged := map[string]string{randomSessionID(): "ghost", randomSessionID(): "a"}
	for id, node := range forged {
		key := "s." + node + "." + id
		created := time.Now().UTC().Format(time.RFC3339Nano)
		e, _ := json.Marshal(map[string]any{"node": node, "principal": "alice", "name": "forged", "created": created,
			"state": "running", "sig": forge(key, "alice", "forged", created, "running")})
		if _, err := kv.Put(ctx, key, e); err != nil {
			t.Fatalf("the probe writes %s: %v", key, err)
		}
	}
	// A real entry written after the forged ones: once a node lists it, its watcher has read the
	// forged ones too (one stream, in order).
	after := catSession(ctx, t, dialAs(t, tc.nodes["c"], tc.alice))
	testutil.WaitFor(t, 10*time.Second, "the probe copies b's heartbeats", func() bool { return copies.Load() > 3 })
	for _, n := range []string{"a", "b", "c"} {
		g := tc.nodes[n]
		if n != "c" {
			waitListed(t, dialAs(t, g, tc.alice), after.Session(), "c", 10*time.Second)
		}
		// Not fatal: without it the checks below still say what went wrong.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			l := g.Logs()
			if strings.Contains(l, "kind=heartbeat source=ghost") && strings.Contains(l, "kind=entry source=ghost") {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("node %s did not log the forged heartbeats and entries within 10s", n)
				break
			}
		}
	}

	for _, n := range []string{"a", "b", "c"} {
		g := tc.nodes[n]
		c := dialAs(t, g, tc.alice)
		for id, node := range forged {
			if got := listed(t, c, id); got != "" {
				t.Errorf("node %s lists alice the forged entry %s (node %s) on %q", n, id, node, got)
			}
			sameAsRandom(t, g, tc.alice, id)
		}
		// The forged entries' errors and the lists took a while of forged heartbeats: b's real
		// session is still attached through the real b.
		if n != "b" {
			ch, _, err := c.Attach(ctx, real.Session(), nil)
			if err != nil {
				t.Fatalf("attach of b's session through %s while b's heartbeats are copied with another URL: %v", n, err)
			}
			if got := catEchoes(ctx, t, ch, "through-"+n); !strings.Contains(got, "through-"+n) {
				t.Errorf("echo through %s: got %q", n, got)
			}
			_ = ch.Detach(ctx)
		}
		// Each forgery's source is logged once, the rest only counted: ghost's and b's heartbeats
		// (b drops those naming itself unread).
		want := 2
		if n == "b" {
			want = 1
		}
		if k := strings.Count(g.Logs(), "kind=heartbeat source="); k != want {
			t.Errorf("node %s logged %d unverified heartbeats' sources, want %d", n, k, want)
		}
	}
	if k := conns.Load(); k != 0 {
		t.Fatalf("%d connections reached the probe's listener: a node dialled a URL only a forged heartbeat named", k)
	}
}
