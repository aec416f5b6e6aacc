package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// stallingOwner is a fake owner node: it answers initialize and session.attach as a gateway
// does, then stops reading its socket (an owner that stalled). Closing release ends its socket.
func stallingOwner(t *testing.T, release <-chan struct{}) string {
	t.Helper()
	up := websocket.Upgrader{Subprotocols: []string{proto.Subprotocol}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for answered := 0; answered < 2; {
			typ, b, err := ws.ReadMessage()
			if err != nil {
				return
			}
			if typ != websocket.TextMessage {
				continue
			}
			req, perr := proto.ParseRequest(b)
			if perr != nil {
				return
			}
			var res any
			switch req.Method {
			case "initialize":
				res = proto.InitializeResult{Protocol: proto.Subprotocol,
					Limits: proto.Limits{MaxInputBytes: 4096}, Flow: proto.Flow{Window: 65536, AckBytes: 16384}}
			case "session.attach":
				var p proto.AttachParams
				_ = json.Unmarshal(req.Params, &p)
				res = proto.AttachResult{Session: p.Session, Channel: p.Channel, Cols: 80, Rows: 24}
			default:
				continue
			}
			answered++
			if err := ws.WriteMessage(websocket.TextMessage, proto.MarshalResponse(req.ID, res, nil)); err != nil {
				return
			}
		}
		<-release // reads nothing more: what the relay writes piles up in the socket buffers
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"
}

// TestRelayUpstreamNeverBlocks: a relay's Write and Ack run on the client socket's read loop,
// so against an owner that stopped reading each returns at once (invariant 4); the input held
// for the owner, queued or written and not reported taken, is bounded by a session's own input
// queue, beyond which a Write is refused whole with limit_exceeded inputQueue; once the owner's socket ends, the channel closes node_lost and
// a Write gets session_closed node_lost.
func TestRelayUpstreamNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	url := stallingOwner(t, release)
	t.Cleanup(free) // before the server's Close, which waits for its handler
	n, err := New(Config{Name: "here", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	n.ctx, n.stop = context.WithCancel(context.Background())
	n.peers["owner"] = &peer{url: url, alive: true, seen: time.Now()}
	defer func() { n.stop(); n.wg.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	notified := make(chan struct{}, 1)
	r := &relay{n: n, notify: func() {
		select {
		case notified <- struct{}{}:
		default:
		}
	}}
	sock, err := n.acquire(ctx, url, "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	c := sock.c
	ch, _, err := c.Attach(ctx, id1, nil)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if _, err := n.startRelay(r, "owner", id1, &binding{c: c, sock: sock, ch: ch}); err != nil {
		t.Fatal(err)
	}
	defer r.Close(false)

	// Write until refused: what the relay holds for the owner, queued or written and not
	// reported taken (this owner reports nothing), is bounded; no call waits for the owner.
	frame := make([]byte, 4096)
	var slowest time.Duration
	var refused *proto.Error
	total := 0
	for total < 256<<20 {
		start := time.Now()
		r.Ack(1)
		err := r.Write(frame)
		slowest = max(slowest, time.Since(start))
		if err == nil {
			total += len(frame)
			continue
		}
		if !errors.As(err, &refused) {
			t.Fatalf("write after %d bytes: %v, want a *proto.Error", total, err)
		}
		break
	}
	if refused == nil {
		t.Fatalf("256 MiB of input to an owner that reads nothing was all accepted: the relay's queue is unbounded")
	}
	if refused.Kind() != proto.KindLimitExceeded || refused.Data["limit"] != "inputQueue" {
		t.Fatalf("refusal: got %v (data %v), want limit_exceeded inputQueue", refused, refused.Data)
	}
	if slowest > 500*time.Millisecond {
		t.Fatalf("the slowest Write/Ack took %v: they must not wait for the owner", slowest)
	}
	if total > maxRelayInput || total+len(frame) <= maxRelayInput {
		t.Fatalf("accepted %d bytes when refused: want within one frame of the bound %d", total, maxRelayInput)
	}
	// The flusher writes what was queued: it counts as in flight, not as room.
	written := func() int64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.cur.written
	}
	for deadline := time.Now().Add(5 * time.Second); written() < int64(total); {
		if time.Now().After(deadline) {
			t.Fatalf("the flusher wrote %d of %d bytes to the owner", written(), total)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.Write(frame); !errors.As(err, &refused) || refused.Kind() != proto.KindLimitExceeded {
		t.Fatalf("write once the queue was written, the owner having taken nothing: %v, want limit_exceeded inputQueue", err)
	}
	t.Logf("accepted %d KiB before refusing; slowest call %v", total>>10, slowest)

	// The owner's socket ends: the binding closes node_lost; input now is session_closed.
	free()
	deadline := time.After(10 * time.Second)
	for {
		if _, _, closed := r.State(); closed != "" {
			if closed != ReasonNodeLost {
				t.Fatalf("closed %q, want %s", closed, ReasonNodeLost)
			}
			break
		}
		select {
		case <-notified:
		case <-deadline:
			t.Fatal("the relay did not close within 10 s of its owner's socket ending")
		}
	}
	err = r.Write([]byte("x"))
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Kind() != proto.KindSessionClosed || pe.Data["reason"] != ReasonNodeLost {
		t.Fatalf("write after the end: got %v, want session_closed node_lost", err)
	}
}

// ownerTurn is what one socket of a restartingOwner does after it answered the attach: it
// sends out, then either closes with 1012 at once, closes with 1012 once it read an ack
// (reported on firstAck), or reports each ack it reads on acks.
type ownerTurn struct {
	out           []byte
	restartAtOnce bool
	restartOnAck  bool
}

// restartingOwner is a fake owner node that restarts in place as turns say: its k-th socket
// plays turns[k-1] (the last turn for any socket past them). Every socket after the first
// reports the from its attach got on froms.
func restartingOwner(t *testing.T, turns []ownerTurn, froms chan<- int64, firstAck, acks chan<- int) string {
	t.Helper()
	up := websocket.Upgrader{Subprotocols: []string{proto.Subprotocol}}
	var mu sync.Mutex // guards conns
	conns := 0
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		mu.Lock()
		conns++
		k := conns
		mu.Unlock()
		turn := turns[min(k, len(turns))-1]
		var channel uint32
		for answered := 0; answered < 2; {
			_, b, err := ws.ReadMessage()
			if err != nil {
				return
			}
			req, perr := proto.ParseRequest(b)
			if perr != nil {
				continue
			}
			var res any
			switch req.Method {
			case "initialize":
				res = proto.InitializeResult{Protocol: proto.Subprotocol,
					Limits: proto.Limits{MaxInputBytes: 4096}, Flow: proto.Flow{Window: 65536, AckBytes: 16384}}
			case "session.attach":
				var p proto.AttachParams
				_ = json.Unmarshal(req.Params, &p)
				channel = p.Channel
				from := int64(0)
				if p.From != nil {
					from = *p.From
				}
				if k > 1 {
					froms <- from
				}
				res = proto.AttachResult{Session: p.Session, Channel: p.Channel, Offset: from, Live: from, End: from, Cols: 80, Rows: 24}
			default:
				continue
			}
			answered++
			if err := ws.WriteMessage(websocket.TextMessage, proto.MarshalResponse(req.ID, res, nil)); err != nil {
				return
			}
		}
		if err := ws.WriteMessage(websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameOutput, channel, turn.out)); err != nil {
			return
		}
		restart := func() {
			_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseServiceRestart, "upgrade"), time.Now().Add(time.Second))
		}
		if turn.restartAtOnce {
			restart()
			return
		}
		for {
			typ, b, err := ws.ReadMessage()
			if err != nil {
				return
			}
			f, ferr := proto.ParseFrame(b)
			if typ != websocket.BinaryMessage || ferr != nil || f.Type != proto.FrameAck {
				continue
			}
			if turn.restartOnAck {
				firstAck <- int(f.AckCount())
				restart()
				return
			}
			select {
			case acks <- int(f.AckCount()):
			case <-done:
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) })
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"
}

// relayToOwner starts a relay of session id1, from a node of its own, to the owner node at
// url. It returns the relay, its upstream channel, the deadline every step of the test waits
// under, and a wait that returns once cond holds (woken by the relay's notify). The relay and
// the node end with the test.
func relayToOwner(t *testing.T, url string) (*relay, *client.Channel, context.Context, func(string, func() bool)) {
	t.Helper()
	n, err := New(Config{Name: "here", Token: "t", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n.ctx, n.stop = context.WithCancel(context.Background())
	n.peers["owner"] = &peer{url: url, alive: true, seen: time.Now()}
	t.Cleanup(func() { n.stop(); n.wg.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	notified := make(chan struct{}, 1)
	r := &relay{n: n, principal: "alice", notify: func() {
		select {
		case notified <- struct{}{}:
		default:
		}
	}}
	sock, err := n.acquire(ctx, url, "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	c := sock.c
	ch, _, err := c.Attach(ctx, id1, nil)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if _, err := n.startRelay(r, "owner", id1, &binding{c: c, sock: sock, ch: ch}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(false) })
	wait := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-notified:
			case <-time.After(50 * time.Millisecond): // a notify may have come before the check
			case <-ctx.Done():
				t.Fatalf("%s: %v", what, ctx.Err())
			}
		}
	}
	return r, ch, ctx, wait
}

// TestRelayResumesAfterOwnerRestart: an owner that closes the relay's socket with 1012 (an
// upgrade in place) is dialled again and attached from the offset the relay had received (read
// plus buffered); the channel stays bound; the old binding's buffered bytes are read before the
// new binding's; acks for the old binding's bytes are not passed to the new one (so its credit
// stays exact), and the first ack past them is.
func TestRelayResumesAfterOwnerRestart(t *testing.T) {
	froms, firstAck, acks := make(chan int64, 1), make(chan int, 1), make(chan int, 4)
	// The first socket sends 100 of 'a' and restarts on its first ack; the second sends 50 of 'b'.
	url := restartingOwner(t, []ownerTurn{
		{out: bytes.Repeat([]byte("a"), 100), restartOnAck: true},
		{out: bytes.Repeat([]byte("b"), 50)},
	}, froms, firstAck, acks)
	r, ch, ctx, wait := relayToOwner(t, url)
	wait("the first binding's 100 bytes", func() bool { pending, _, _ := r.State(); return pending && ch.Buffered() == 100 })

	// The writer sends 60 to its client; the client acknowledges 40; the owner restarts.
	buf := make([]byte, 60)
	if k, lost := r.Read(buf); k != 60 || lost != 0 {
		t.Fatalf("read: %d bytes, lost %d", k, lost)
	}
	r.Ack(40)
	if got := <-firstAck; got != 40 {
		t.Fatalf("the first binding got an ack of %d, want 40", got)
	}
	select {
	case from := <-froms:
		if from != 100 {
			t.Fatalf("resumed from %d, want 100 (60 read and 40 buffered)", from)
		}
	case <-ctx.Done():
		t.Fatal("the relay did not attach again after the 1012")
	}
	var got []byte
	big := make([]byte, 256)
	wait("the old binding's 40 bytes, then the new one's 50", func() bool {
		k, lost := r.Read(big)
		if lost != 0 {
			t.Fatalf("lost %d across the resume", lost)
		}
		got = append(got, big[:k]...)
		return len(got) >= 90
	})
	if want := strings.Repeat("a", 40) + strings.Repeat("b", 50); string(got) != want {
		t.Fatalf("after the resume read %q, want %q", got, want)
	}
	if _, _, closed := r.State(); closed != "" {
		t.Fatalf("the channel closed (%q) across the owner's restart", closed)
	}
	// The client acknowledges the rest of the old binding (60) and the new binding's 50: only
	// the 50 reach the new binding.
	r.Ack(60)
	r.Ack(50)
	select {
	case got := <-acks:
		if got != 50 {
			t.Fatalf("the new binding got an ack of %d, want 50 (the old binding's 60 absorbed)", got)
		}
	case <-ctx.Done():
		t.Fatal("no ack reached the new binding")
	}
	select {
	case extra := <-acks:
		t.Fatalf("the new binding got a further ack of %d", extra)
	default:
	}
}

// TestRelayResumesAfterTwoOwnerRestarts: the owner restarts twice while the first old
// binding still holds output the client has not read: both old bindings' output is read, in
// order, before the newest's, with no gap; the acks for the old bindings' bytes are absorbed
// and exactly the newest binding's bytes are acknowledged to it.
func TestRelayResumesAfterTwoOwnerRestarts(t *testing.T) {
	froms, firstAck, acks := make(chan int64, 2), make(chan int, 1), make(chan int, 4)
	// 100 of 'a', restarting on the first ack; 50 of 'b', restarting at once; 30 of 'c'.
	url := restartingOwner(t, []ownerTurn{
		{out: bytes.Repeat([]byte("a"), 100), restartOnAck: true},
		{out: bytes.Repeat([]byte("b"), 50), restartAtOnce: true},
		{out: bytes.Repeat([]byte("c"), 30)},
	}, froms, firstAck, acks)
	r, ch, ctx, wait := relayToOwner(t, url)
	wait("the first binding's 100 bytes", func() bool { pending, _, _ := r.State(); return pending && ch.Buffered() == 100 })
	buf := make([]byte, 60)
	if k, lost := r.Read(buf); k != 60 || lost != 0 {
		t.Fatalf("read: %d bytes, lost %d", k, lost)
	}
	r.Ack(40)
	if got := <-firstAck; got != 40 {
		t.Fatalf("the first binding got an ack of %d, want 40", got)
	}
	for i, want := range []int64{100, 150} { // nothing read meanwhile: the 40 'a' wait in a drain
		select {
		case from := <-froms:
			if from != want {
				t.Fatalf("resume %d from %d, want %d", i+1, from, want)
			}
		case <-ctx.Done():
			t.Fatalf("the relay did not attach again after 1012 number %d", i+1)
		}
	}
	// (froms hears of the attach before the relay has taken it: wait for the second resume to
	// be done, each adds at least 1 to sizeBase.)
	wait("the second resume", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.sizeBase >= 2 })
	var got []byte
	big := make([]byte, 256)
	wait("40 'a', 50 'b', 30 'c'", func() bool {
		k, lost := r.Read(big)
		if lost != 0 {
			t.Fatalf("lost %d across the resumes", lost)
		}
		got = append(got, big[:k]...)
		return len(got) >= 120
	})
	if want := strings.Repeat("a", 40) + strings.Repeat("b", 50) + strings.Repeat("c", 30); string(got) != want {
		t.Fatalf("after the resumes read %q, want %q", got, want)
	}
	if _, _, closed := r.State(); closed != "" {
		t.Fatalf("the channel closed (%q) across the owner's restarts", closed)
	}
	// The client acknowledges the rest of 'a' (60), all of 'b' (50), then 'c' (30): only the 30
	// reach the newest binding.
	r.Ack(60)
	r.Ack(50)
	r.Ack(30)
	select {
	case got := <-acks:
		if got != 30 {
			t.Fatalf("the newest binding got an ack of %d, want 30", got)
		}
	case <-ctx.Done():
		t.Fatal("no ack reached the newest binding")
	}
	select {
	case extra := <-acks:
		t.Fatalf("the newest binding got a further ack of %d", extra)
	default:
	}
}

// TestRelayRefusedOnceTheNodeCloses: a relay started after the node began closing (its dial
// and attach were in flight) is refused with errNodeClosed, its socket is closed and it is not
// registered: close has taken its snapshot of the relays and waits for the node's goroutines.
func TestRelayRefusedOnceTheNodeCloses(t *testing.T) {
	release := make(chan struct{})
	url := stallingOwner(t, release)
	t.Cleanup(func() { close(release) }) // before the server's Close, which waits for its handler
	n, err := New(Config{Name: "here", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := &relay{n: n, principal: "alice"}
	sock, err := n.acquire(ctx, url, "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	c := sock.c
	ch, _, err := c.Attach(ctx, id1, nil)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	n.CloseWithin(ctx) // (never started: it only marks the node closed)
	if _, err := n.startRelay(r, "owner", id1, &binding{c: c, sock: sock, ch: ch}); !errors.Is(err, errNodeClosed) {
		t.Fatalf("startRelay after Close: %v, want errNodeClosed", err)
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the refused relay's socket was not closed")
	}
	n.mu.Lock()
	registered := len(n.relays)
	n.mu.Unlock()
	if registered != 0 {
		t.Fatalf("%d relays registered after Close, want 0", registered)
	}
}

// TestRelayResumeGivesUpWhenClosing: a resume that starts after Close (or nodeLost) ran, which
// found no cancelResume to call, gives up at once: it does not dial the owner on a context
// nothing cancels.
func TestRelayResumeGivesUpWhenClosing(t *testing.T) {
	release := make(chan struct{})
	url := stallingOwner(t, release)
	t.Cleanup(func() { close(release) }) // before the server's Close, which waits for its handler
	var dials atomic.Int32
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		dials.Add(1)
		http.NotFound(w, nil)
	}))
	t.Cleanup(counting.Close)
	n, err := New(Config{Name: "here", Token: "t", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n.ctx, n.stop = context.WithCancel(context.Background())
	defer n.stop()
	n.peers["owner"] = &peer{url: "ws" + strings.TrimPrefix(counting.URL, "http") + "/ws", alive: true, seen: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := &relay{n: n, node: "owner", id: id1, principal: "alice", stopped: make(chan struct{})}
	sock, err := n.acquire(ctx, url, "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	c := sock.c
	defer c.Close()
	ch, _, err := c.Attach(ctx, id1, nil)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	r.cur = &binding{c: c, sock: sock, ch: ch}
	r.closing = true // Close ran between the flusher seeing Done and the resume
	close(r.stopped)
	if r.resume(r.cur) {
		t.Fatal("resume went on after Close")
	}
	if d := dials.Load(); d != 0 {
		t.Fatalf("resume dialled the owner %d times after Close, want 0", d)
	}
}
