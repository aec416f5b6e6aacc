//go:build e2e

package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/freeport"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/internal/testutil/rawmux"
	"github.com/muxterm/muxterm/proto"
)

// clusterTTL is the nodes' --cluster-ttl in these tests: small, so a lost node is noticed fast.
const clusterTTL = 1500 * time.Millisecond

// clusterWindow is the nodes' --window.
const clusterWindow = 64 << 10

// testCluster is three gateway processes, each with an embedded NATS server routed to the
// other two, sharing a tokens file (alice, bob; root, an admin; carol, read-only viewing alice)
// and a cluster token.
type testCluster struct {
	t      *testing.T
	alice  string
	bob    string
	root   string
	carol  string
	tokens string
	ctok   string
	args   map[string][]string // node name → its arguments, to restart it alike
	env    map[string][]string // node name → its extra environment
	nodes  map[string]*gateway
}

// freePort returns a loopback port nothing listens on now, for a server started later on it.
// It lies outside the kernel's ephemeral range (freeport.Port): a port the kernel handed out
// could be handed again to another socket on the machine (any outgoing connection's source
// port) before the server binds it, and a node that cannot bind its route port leaves the other
// two unable to place the directory's three replicas.
func freePort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func startCluster(t *testing.T, names ...string) *testCluster {
	t.Helper()
	return startClusterWith(t, nil, names...)
}

// startClusterWith is startCluster with extra arguments for every node (by node name).
func startClusterWith(t *testing.T, extra map[string][]string, names ...string) *testCluster {
	t.Helper()
	return startClusterEnv(t, extra, nil, names...)
}

// startClusterEnv is startClusterWith with extra environment variables for every node (by
// node name).
func startClusterEnv(t *testing.T, extra, env map[string][]string, names ...string) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, alice: newToken(), bob: newToken(), root: newToken(), carol: newToken(), ctok: newToken(),
		args: map[string][]string{}, env: env, nodes: map[string]*gateway{}}
	tc.tokens = writeTokensFile(t, 0o600,
		tokenLine{"alice", "read-write", tc.alice, ""},
		tokenLine{"bob", "read-write", tc.bob, ""},
		tokenLine{"root", "admin", tc.root, ""},
		tokenLine{"carol", "read-only", tc.carol, "alice"})
	routes := map[string]int{}
	for _, n := range names {
		routes[n] = freePort(t)
	}
	for _, n := range names {
		var others []string
		for _, o := range names {
			if o != n {
				others = append(others, fmt.Sprintf("nats-route://127.0.0.1:%d", routes[o]))
			}
		}
		tc.args[n] = []string{"--tokens", tc.tokens, "--cluster-embedded", "--node-name", n,
			"--cluster-listen", fmt.Sprintf("127.0.0.1:0,127.0.0.1:%d", routes[n]),
			"--cluster-routes", strings.Join(others, ","), "--cluster-store", t.TempDir(),
			"--cluster-ttl", clusterTTL.String(), "--window", fmt.Sprint(clusterWindow),
			"--allow-cmd", "sh"}
		tc.args[n] = append(tc.args[n], extra[n]...)
	}
	// Registered before the nodes' own cleanups, so it runs after them: the logs include the
	// shutdown.
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range names {
				if g := tc.nodes[n]; g != nil {
					t.Logf("node %s's log:\n%s", n, g.Logs())
				}
			}
		}
	})
	listening := map[string]<-chan string{}
	for _, n := range names {
		tc.nodes[n], listening[n] = spawnGateway(t, tc.alice, append([]string{"MUXTERM_CLUSTER_TOKEN=" + tc.ctok}, env[n]...), tc.args[n]...)
	}
	for _, n := range names {
		tc.nodes[n].awaitListening(listening[n], 60*time.Second)
	}
	return tc
}

// restart starts node name again with the same arguments (ports, store).
func (tc *testCluster) restart(name string) *gateway {
	tc.t.Helper()
	g, l := tc.respawn(name)
	g.awaitListening(l, 60*time.Second)
	return g
}

// respawn starts node name again with the same arguments and returns at once, with the channel
// of its listening line.
func (tc *testCluster) respawn(name string) (*gateway, <-chan string) {
	tc.t.Helper()
	g, l := spawnGateway(tc.t, tc.alice, append([]string{"MUXTERM_CLUSTER_TOKEN=" + tc.ctok}, tc.env[name]...), tc.args[name]...)
	tc.nodes[name] = g
	return g, l
}

// listed returns the node of session id in c's list, or "" when absent.
func listed(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	l, err := c.List(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	for _, s := range l {
		if s.Session == id {
			return s.Node
		}
	}
	return ""
}

// waitListed waits until c lists id on node (or, node "", no longer lists it) and returns how
// long that took.
func waitListed(t *testing.T, c *client.Client, id, node string, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	testutil.WaitFor(t, d, fmt.Sprintf("session %s listed on %q", id, node), func() bool { return listed(t, c, id) == node })
	return time.Since(start)
}

func readExactly(t *testing.T, ch *client.Channel, n int, d time.Duration) []byte {
	t.Helper()
	ctx := ctxT(t, d)
	out := make([]byte, 0, n)
	buf := make([]byte, 32<<10)
	for len(out) < n {
		k, err := ch.ReadContext(ctx, buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if err != nil {
			t.Fatalf("read %d of %d bytes: %v", len(out), n, err)
		}
	}
	return out
}

// TestClusterRelaysAcrossNodes: a session opened on node a is listed (node named) and
// attached through b and c; what c types comes back byte for byte through b and on a; bob
// attaching alice's session through a relay gets exactly the unknown_session a random id
// gets; a raw client on b that never acknowledges receives exactly one window; a kill through
// b ends the session on a and every relayed channel.
func TestClusterRelaysAcrossNodes(t *testing.T) {
	tc := startCluster(t, "a", "b", "c")
	a, b, c := tc.nodes["a"], tc.nodes["b"], tc.nodes["c"]
	ca, cb, cc := dialAs(t, a, tc.alice), dialAs(t, b, tc.alice), dialAs(t, c, tc.alice)
	ctx := ctxT(t, 60*time.Second)

	cha := catSession(ctx, t, ca)
	id := cha.Session()
	if n := listed(t, ca, id); n != "a" {
		t.Fatalf("a's own list: got node %q, want a", n)
	}
	took := waitListed(t, cb, id, "a", 5*time.Second)
	waitListed(t, cc, id, "a", 5*time.Second)
	t.Logf("directory propagation (open on a → listed on b): %v", took)

	chb, resb, err := cb.Attach(ctx, id, ptrTo(int64(0)))
	if err != nil {
		t.Fatalf("attach through b: %v", err)
	}
	if resb.Session != id {
		t.Fatalf("attach through b: got session %q, want %q", resb.Session, id)
	}
	chc, _, err := cc.Attach(ctx, id, nil)
	if err != nil {
		t.Fatalf("attach through c: %v", err)
	}
	payload := make([]byte, 100<<10)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	_, _ = rand.Read(payload[:4096]) // some bytes of every value, raw mode passes them through
	for i := range 4096 {
		if payload[i] == 3 || payload[i] == 4 || payload[i] == 0x1a || payload[i] == 0x1c || payload[i] == 0x11 || payload[i] == 0x13 {
			payload[i] = 'x' // no INTR, EOF, SUSP, QUIT, XON, XOFF: stty raw keeps isig off, but IXON may stay
		}
	}
	// Typed in pieces a session's input queue takes, each echoed through b before the next.
	if got := readExactly(t, chb, 6, 10*time.Second); string(got) != "READY\n" {
		t.Fatalf("replay through b: got %q, want READY", got)
	}
	for off := 0; off < len(payload); off += 8 << 10 {
		piece := payload[off:min(off+8<<10, len(payload))]
		if _, err := chc.Write(piece); err != nil {
			t.Fatalf("type through c: %v", err)
		}
		if got := readExactly(t, chb, len(piece), 30*time.Second); !bytes.Equal(got, piece) {
			t.Fatalf("output through b at %d: differs from what c typed at %d", off, firstDiff(got, piece))
		}
	}
	if got := readExactly(t, cha, len(payload), 30*time.Second); !bytes.Equal(got, payload) {
		t.Fatalf("output on a: differs from what c typed at %d", firstDiff(got, payload))
	}

	// A resize through c reaches the session on a; b's relayed channel is told the new size.
	if err := chc.Resize(ctx, 101, 31); err != nil {
		t.Fatalf("resize through c: %v", err)
	}
	testutil.WaitFor(t, 5*time.Second, "session.size 101x31 through b", func() bool {
		cols, rows, n := chb.SizeGen()
		return n > 0 && cols == 101 && rows == 31
	})

	// Another principal, through a relay, learns nothing: the owner checks ownership.
	cbob := dialAs(t, b, tc.bob)
	_, _, errOther := cbob.Attach(ctx, id, nil)
	fake := randomSessionID()
	_, _, errFake := cbob.Attach(ctx, fake, nil)
	eo, ef := rpcErr(t, errOther), rpcErr(t, errFake)
	if eo.Kind() != proto.KindUnknownSession || eo.Code != ef.Code || eo.Message != ef.Message ||
		eo.Data["session"] != id || ef.Data["session"] != fake || len(eo.Data) != len(ef.Data) {
		t.Fatalf("bob attaching alice's session through b: got %+v, want exactly what a random id gets (%+v)", eo, ef)
	}
	if n := listed(t, cbob, id); n != "" {
		t.Fatalf("bob's list through b: got alice's session on %q, want none", n)
	}
	if _, err := cbob.Kill(ctx, id); kindOf(t, err) != proto.KindUnknownSession {
		t.Fatalf("bob killing alice's session through b: got %v, want unknown_session", err)
	}
	sameAsRandom(t, b, tc.bob, id)

	// Credit end to end: a session on a that prints without end, a raw client on b that
	// never acknowledges.
	flood, err := ca.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "exec yes 0123456789abcdefghijklmnopqrstuvwxyz"}})
	if err != nil {
		t.Fatalf("open flood: %v", err)
	}
	waitListed(t, cb, flood.Session(), "a", 5*time.Second)
	if got := rawNoAck(t, b, tc.alice, flood.Session(), 2*time.Second); got != clusterWindow {
		t.Fatalf("raw client on b that never acks: got %d bytes, want exactly one window (%d)", got, clusterWindow)
	}

	// Kill through b: the owner kills; every channel hears it.
	res, err := cb.Kill(ctx, id)
	if err != nil {
		t.Fatalf("kill through b: %v", err)
	}
	if res.Session != id {
		t.Fatalf("kill result: got %+v, want session %s", res, id)
	}
	for name, ch := range map[string]*client.Channel{"a": cha, "b": chb, "c": chc} {
		// session.closed follows the last byte: drain what the channel still has.
		buf := make([]byte, 32<<10)
		for {
			if _, err := ch.ReadContext(ctx, buf); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("channel on %s: not closed after the kill: %v", name, err)
			}
		}
		if ch.Reason() != "killed" {
			t.Fatalf("channel on %s: closed with %q, want killed", name, ch.Reason())
		}
	}
	waitListed(t, cc, id, "", 5*time.Second)
	if _, err := cb.Kill(ctx, flood.Session()); err != nil {
		t.Fatalf("kill flood through b: %v", err)
	}
}

// rawNoAck attaches to id through g with a hand-made socket that never acknowledges, and
// returns the output bytes it received once nothing more arrived for quiet.
func rawNoAck(t *testing.T, g *gateway, token, id string, quiet time.Duration) int {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}, HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial(g.WS, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.Close()
	for i, m := range []map[string]any{
		{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{}},
		{"jsonrpc": "2.0", "id": 2, "method": "session.attach", "params": map[string]any{"channel": 1, "session": id, "from": 0}},
	} {
		b, _ := json.Marshal(m)
		if err := ws.WriteMessage(websocket.TextMessage, b); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	got, replied := 0, false
	for {
		_ = ws.SetReadDeadline(time.Now().Add(quiet))
		typ, b, err := ws.ReadMessage()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() && replied {
				return got // quiet for the whole interval: nothing more will come
			}
			t.Fatalf("raw read after %d bytes: %v", got, err)
		}
		if typ == websocket.TextMessage {
			var r struct {
				ID    *int         `json:"id"`
				Error *proto.Error `json:"error"`
			}
			_ = json.Unmarshal(b, &r)
			if r.Error != nil {
				t.Fatalf("raw attach: %s", b)
			}
			if r.ID != nil && *r.ID == 2 {
				replied = true
			}
			continue
		}
		f, err := proto.ParseFrame(b)
		if err != nil || f.Type != proto.FrameOutput {
			t.Fatalf("raw: bad frame %v", err)
		}
		got += len(f.Payload)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestClusterNodeLoss: SIGKILL of node a closes b's relayed channels to it with node_lost
// within the TTL, a reattach to a's session gets the same reason (another principal gets what a
// random id gets), c's own sessions go on; a restarted a sweeps its stale entries from the
// directory.
func TestClusterNodeLoss(t *testing.T) {
	tc := startCluster(t, "a", "b", "c")
	a, b, c := tc.nodes["a"], tc.nodes["b"], tc.nodes["c"]
	ca, cb, cc := dialAs(t, a, tc.alice), dialAs(t, b, tc.alice), dialAs(t, c, tc.alice)
	ctx := ctxT(t, 90*time.Second)

	sa := catSession(ctx, t, ca)
	sc := catSession(ctx, t, cc)
	waitListed(t, cb, sa.Session(), "a", 5*time.Second)
	relayed, _, err := cb.Attach(ctx, sa.Session(), nil)
	if err != nil {
		t.Fatalf("attach a's session through b: %v", err)
	}
	if _, err := relayed.ReadUntil(ctx, "READY\n"); err != nil {
		t.Fatalf("relayed replay: %v", err)
	}

	killed := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	if err := relayed.Wait(ctxT(t, clusterTTL+time.Second)); err != nil {
		t.Fatalf("relayed channel on b: not closed within the TTL (%v) of a's SIGKILL", clusterTTL)
	}
	detect := time.Since(killed)
	if r := relayed.Reason(); r != "node_lost" {
		t.Fatalf("relayed channel on b: closed with %q, want node_lost", r)
	}
	t.Logf("node loss → session.closed node_lost on the relay: %v (TTL %v)", detect, clusterTTL)
	if _, _, err := cb.Attach(ctx, sa.Session(), nil); kindOf(t, err) != proto.KindSessionClosed ||
		rpcErr(t, err).Data["reason"] != "node_lost" {
		t.Fatalf("reattach to a lost session through b: got %v, want session_closed node_lost", err)
	}
	// To another principal the lost node's session does not exist: attach, lease and kill through
	// b answer exactly what a random id gets, not node_lost.
	sameAsRandom(t, b, tc.bob, sa.Session())
	gone := waitListed(t, cb, sa.Session(), "", 2*clusterTTL)
	t.Logf("a's session dropped from b's list %v after the kill", time.Since(killed))
	_ = gone

	// c's own session is unharmed.
	if got := catEchoes(ctx, t, sc, "after-a-died"); !strings.Contains(got, "after-a-died") {
		t.Fatalf("c's session after a died: got %q", got)
	}

	// a comes back: its stale entry is swept; what it opens now is listed again. b never lists
	// the dead session, not even while a heartbeats before its sweep (its directory can take
	// seconds to come back).
	a2, up := tc.respawn("a")
	polls := 0
	for listening := false; !listening; polls++ {
		select {
		case base := <-up:
			a2.Base, a2.WS = base, "ws"+strings.TrimPrefix(base, "http")+"/ws"
			listening = true
		case <-a2.exited:
			t.Fatalf("restarted a exited: %v\n%s", a2.err, a2.Logs())
		case <-time.After(20 * time.Millisecond):
		}
		if n := listed(t, cb, sa.Session()); n != "" {
			t.Fatalf("b lists a's dead session (on %q) while a restarts", n)
		}
	}
	t.Logf("b's list polled %d times while a restarted (a waited for its directory: %v)", polls,
		strings.Contains(a2.Logs(), "directory bucket not ready"))
	ca2 := dialAs(t, a2, tc.alice)
	fresh := catSession(ctx, t, ca2)
	t.Logf("restarted a's new session listed on b after %v", waitListed(t, cb, fresh.Session(), "a", 30*time.Second))
	l, err := cb.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range l {
		ids = append(ids, s.Session+"@"+s.Node)
	}
	sort.Strings(ids)
	want := []string{fresh.Session() + "@a", sc.Session() + "@c"}
	sort.Strings(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("b's list after a restarted: got %v, want %v (no stale entry of a)", ids, want)
	}
	if _, _, err := cb.Attach(ctx, sa.Session(), nil); kindOf(t, err) != proto.KindUnknownSession {
		t.Fatalf("attach to the swept session: got %v, want unknown_session", err)
	}
}

// TestClusterPlacementAndResume: with --placement least-sessions on b, an open through b runs on
// the live node with the fewest sessions and is relayed at once; a client that dropped its
// socket to b resumes through c from the offset it consumed, byte for byte.
func TestClusterPlacementAndResume(t *testing.T) {
	tc := startClusterWith(t, map[string][]string{"b": {"--placement", "least-sessions"}}, "a", "b", "c")
	a, b, c := tc.nodes["a"], tc.nodes["b"], tc.nodes["c"]
	ca, cb, cc := dialAs(t, a, tc.alice), dialAs(t, b, tc.alice), dialAs(t, c, tc.alice)
	ctx := ctxT(t, 60*time.Second)

	// b holds two sessions of its own (opened while a and c had none... placement sends them
	// away, so count what b itself holds through its list).
	sa := catSession(ctx, t, ca)
	sc := catSession(ctx, t, cc)
	waitListed(t, cb, sa.Session(), "a", 5*time.Second)
	waitListed(t, cb, sc.Session(), "c", 5*time.Second)
	first := catSession(ctx, t, cb) // b: 0 sessions, a and c 1 each: b itself
	if n := listed(t, cb, first.Session()); n != "b" {
		t.Fatalf("first open through b: on %q, want b (it had the fewest)", n)
	}
	second := catSession(ctx, t, cb) // b 1, a 1, c 1: a tie keeps it here
	if n := listed(t, cb, second.Session()); n != "b" {
		t.Fatalf("second open through b: on %q, want b (a tie stays local)", n)
	}
	placed := catSession(ctx, t, cb) // b 2, a 1, c 1: a (the first name of the fewest)
	var node string
	testutil.WaitFor(t, 5*time.Second, "the placed session in b's list", func() bool {
		node = listed(t, cb, placed.Session()) // b's view of the owner's entry may lag a moment
		return node != ""
	})
	if node != "a" && node != "c" {
		t.Fatalf("third open through b: on %q, want a or c (fewer sessions than b's 2)", node)
	}
	if got := catEchoes(ctx, t, placed, "placed-echo"); !strings.Contains(got, "placed-echo") {
		t.Fatalf("placed session through b's relay: got %q", got)
	}

	// Resume through another node: attach a's session through b, read, drop the socket, let
	// the program print, and resume through c from what was consumed.
	cbr, err := client.Dial(ctx, b.WS, client.DialOptions{Token: tc.alice})
	if err != nil {
		t.Fatal(err)
	}
	rch, _, err := cbr.Attach(ctx, sa.Session(), ptrTo(int64(0)))
	if err != nil {
		t.Fatalf("attach through b: %v", err)
	}
	if _, err := sa.Write([]byte("before-drop;")); err != nil {
		t.Fatal(err)
	}
	if _, err := rch.ReadUntil(ctx, "before-drop;"); err != nil {
		t.Fatal(err)
	}
	offset := rch.Offset()
	cbr.Close() // the socket drops; a holds the relay's output at what it acknowledged
	typeUntil(ctx, t, sa, "while-away;", "while-away;")
	resumed, res, err := cc.Attach(ctx, sa.Session(), &offset)
	if err != nil {
		t.Fatalf("resume through c: %v", err)
	}
	if res.Offset != offset || res.Lost != 0 {
		t.Fatalf("resume through c: got offset %d lost %d, want %d and 0", res.Offset, res.Lost, offset)
	}
	if got := readExactly(t, resumed, len("while-away;"), 10*time.Second); string(got) != "while-away;" {
		t.Fatalf("resume through c: got %q, want exactly what was printed while away", got)
	}
}

var natsBin = &goBinary{pkg: "github.com/nats-io/nats-server/v2", name: "nats-server"}

// natsServerBin builds the nats-server of the module's nats-server/v2 once per run.
func natsServerBin(t *testing.T) string { return natsBin.get(t) }

// TestClusterExternalNATS: two gateways joined through a separate nats-server process (with
// JetStream) by --cluster: a session opened on one is listed, attached and typed into through
// the other; the gateways start no NATS server of their own.
func TestClusterExternalNATS(t *testing.T) {
	port := freePort(t)
	srv := exec.Command(natsServerBin(t), "-js", "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-sd", t.TempDir())
	startKilledAtEnd(t, srv)
	tok := newToken()
	ctok := newToken()
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var nodes []*gateway
	for _, name := range []string{"x", "y"} {
		g, l := spawnGateway(t, tok, []string{"MUXTERM_CLUSTER_TOKEN=" + ctok}, "--token", tok,
			"--cluster", url, "--cluster-replicas", "1", "--node-name", name, "--cluster-ttl", clusterTTL.String(),
			"--allow-cmd", "sh")
		nodes = append(nodes, g)
		defer func() {
			if t.Failed() {
				t.Logf("node %s's log:\n%s", name, g.Logs())
			}
		}()
		g.awaitListening(l, 60*time.Second)
	}
	cx, cy := dialAs(t, nodes[0], tok), dialAs(t, nodes[1], tok)
	ctx := ctxT(t, 30*time.Second)
	s := catSession(ctx, t, cx)
	waitListed(t, cy, s.Session(), "x", 10*time.Second)
	r, _, err := cy.Attach(ctx, s.Session(), nil)
	if err != nil {
		t.Fatalf("attach through y: %v", err)
	}
	if got := catEchoes(ctx, t, r, "via-external-nats"); !strings.Contains(got, "via-external-nats") {
		t.Fatalf("echo through y: got %q", got)
	}
	for _, g := range nodes {
		if strings.Contains(g.Logs(), "embedded") {
			t.Fatalf("a --cluster gateway mentions an embedded server:\n%s", g.Logs())
		}
	}
}

// TestClusterReaperAndLeases: on the owner a viewer through another node counts as watching and
// a lease taken through another node protects the session, while a bare session is reaped.
func TestClusterReaperAndLeases(t *testing.T) {
	const grace = 2 * time.Second
	tc := startClusterWith(t, map[string][]string{"a": {"--idle-grace", grace.String(),
		"--reap-interval", "100ms", "--resume-hold", "0"}}, "a", "b", "c")
	a, b := tc.nodes["a"], tc.nodes["b"]
	ca, cb := dialAs(t, a, tc.alice), dialAs(t, b, tc.alice)
	ctx := ctxT(t, 60*time.Second)

	open := func() string {
		ch := catSession(ctx, t, ca)
		if err := ch.Detach(ctx); err != nil {
			t.Fatal(err)
		}
		waitListed(t, cb, ch.Session(), "a", 5*time.Second)
		return ch.Session()
	}
	watched, leased := open(), open()
	viewer, _, err := cb.Attach(ctx, watched, nil)
	if err != nil {
		t.Fatalf("attach through b: %v", err)
	}
	var lr proto.LeaseResult
	if err := cb.Call(ctx, "session.lease", map[string]any{"session": leased, "ttl_ms": 60000}, &lr); err != nil {
		t.Fatalf("lease through b: %v", err)
	}
	if lr.Session != leased {
		t.Fatalf("lease result: got %+v", lr)
	}
	// Two bare sessions reaped one after the other: by the second, the reaper has looked at the
	// watched and the leased ones for well over the grace.
	for range 2 {
		bare := open()
		waitListed(t, ca, bare, "", grace+15*time.Second)
	}
	for _, id := range []string{watched, leased} {
		if n := listed(t, ca, id); n != "a" {
			t.Fatalf("session %s on a: gone (listed %q), want kept by b's viewer or lease", id, n)
		}
	}
	if got := catEchoes(ctx, t, viewer, "still-watched"); !strings.Contains(got, "still-watched") {
		t.Fatalf("b's relayed viewer: got %q", got)
	}
}

// TestClusterBadConfigRefusedAtStart: cluster flags that cannot work stop the gateway at start
// with one line naming the flag.
func TestClusterBadConfigRefusedAtStart(t *testing.T) {
	tok, ctok := newToken(), newToken()
	base := []string{"--listen", "127.0.0.1:0", "--token", tok}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-embedded"}, "--cluster-token (required with a cluster)"},
		{[]string{"--cluster-embedded", "--cluster-token", tok}, "--cluster-token must differ from every principal's token"},
		{[]string{"--cluster-embedded", "--cluster", "nats://127.0.0.1:1", "--cluster-token", ctok}, "--cluster and --cluster-embedded exclude each other"},
		{[]string{"--cluster-embedded", "--cluster-token", ctok, "--placement", "nowhere"}, "--placement \"nowhere\""},
		{[]string{"--cluster-embedded", "--cluster-token", ctok, "--node-name", "a.b"}, "--node-name"},
		{[]string{"--cluster-embedded", "--cluster-token", ctok, "--cluster-ttl", "10ms"}, "--cluster-ttl must be at least 100ms"},
		{[]string{"--cluster-embedded", "--cluster-token", ctok, "--cluster-ca", "/nonexistent.pem"}, "--cluster-ca: open /nonexistent.pem"},
		{[]string{"--cluster-embedded", "--cluster-token", ctok, "--cluster-ca", "/dev/null"}, "--cluster-ca /dev/null: no PEM certificate in it"},
	} {
		out := runRefused(t, nil, append(slices.Clone(base), tc.args...)...)
		if !strings.Contains(out, tc.want) {
			t.Errorf("%v: got %q, want it to name %q", tc.args, out, tc.want)
		}
	}
}

// TestClusterPartitionHeals: a node that stops answering without its sockets breaking (SIGSTOP:
// what a partition looks like) is lost after its heartbeats stop: b's relayed channel gets
// node_lost within the TTL; once it answers again (SIGCONT) its session, which never died, is
// listed and attachable through b again.
func TestClusterPartitionHeals(t *testing.T) {
	tc := startCluster(t, "a", "b", "c")
	a, b := tc.nodes["a"], tc.nodes["b"]
	ca, cb := dialAs(t, a, tc.alice), dialAs(t, b, tc.alice)
	ctx := ctxT(t, 60*time.Second)
	s := catSession(ctx, t, ca)
	waitListed(t, cb, s.Session(), "a", 5*time.Second)
	relayed, _, err := cb.Attach(ctx, s.Session(), nil)
	if err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) }) // so the cleanup's SIGTERM works
	if err := relayed.Wait(ctxT(t, clusterTTL+time.Second)); err != nil {
		t.Fatalf("relayed channel on b: not closed within the TTL (%v) of a's SIGSTOP", clusterTTL)
	}
	if took := time.Since(stopped); relayed.Reason() != "node_lost" || took > clusterTTL {
		t.Fatalf("relayed channel on b: closed with %q after %v, want node_lost within %v", relayed.Reason(), took, clusterTTL)
	}
	if n := listed(t, cb, s.Session()); n != "" {
		t.Fatalf("b's list while a is silent: a's session still listed on %q", n)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitListed(t, cb, s.Session(), "a", 10*time.Second)
	again, _, err := cb.Attach(ctx, s.Session(), nil)
	if err != nil {
		t.Fatalf("attach through b after a came back: %v", err)
	}
	if got := catEchoes(ctx, t, again, "healed"); !strings.Contains(got, "healed") {
		t.Fatalf("echo after the partition healed: got %q", got)
	}
}

var rpcID = regexp.MustCompile(`^\{"jsonrpc":"2.0","id":\d+,`)

// sameAsRandom checks that session.attach, session.lease and session.kill of id through g, as the
// principal of token, answer byte for byte what a random id gets (each id blanked).
func sameAsRandom(t *testing.T, g *gateway, token, id string) {
	t.Helper()
	rc := rawmux.Dial(t, g.WS, http.Header{"Authorization": {"Bearer " + token}})
	defer rc.Close()
	blank := func(b []byte, id string) string {
		return rpcID.ReplaceAllString(strings.ReplaceAll(string(b), id, "<session>"), `{"jsonrpc":"2.0","id":0,`)
	}
	fake := randomSessionID()
	for _, m := range []struct {
		method string
		params func(id string) map[string]any
	}{
		{"session.attach", func(id string) map[string]any { return map[string]any{"channel": 1, "session": id} }},
		{"session.lease", func(id string) map[string]any { return map[string]any{"session": id, "ttl_ms": 60000} }},
		{"session.kill", func(id string) map[string]any { return map[string]any{"session": id} }},
	} {
		got, want := blank(rc.Call(m.method, m.params(id)), id), blank(rc.Call(m.method, m.params(fake)), fake)
		if got != want {
			t.Errorf("%s of another principal's session: got %s, want exactly what a random id gets: %s", m.method, got, want)
		}
	}
}
