package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

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
// for the owner is bounded by a session's own input queue, beyond which a Write is refused whole
// with limit_exceeded inputQueue; once the owner's socket ends, the channel closes node_lost and
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
	c, err := n.dial(ctx, url, "alice", false, r.onServerError)
	if err != nil {
		t.Fatal(err)
	}
	ch, _, err := c.Attach(ctx, id1, nil)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	n.startRelay(r, "owner", id1, c, ch)
	defer r.Close(false)

	// Write until refused and the queue stays full: the socket buffers fill, the flusher blocks
	// on the owner, the queue fills; no call waits for the owner.
	frame := make([]byte, 4096)
	var slowest time.Duration
	var refused *proto.Error
	total, atRefusal := 0, 0
	queued := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.inputBytes
	}
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
		if refused.Kind() != proto.KindLimitExceeded {
			break
		}
		// Full: does room come back within a second (the flusher took some), or is the
		// flusher stuck on the owner?
		room := time.After(time.Second)
		for stuck := false; !stuck; {
			select {
			case <-room:
				stuck = true
				continue
			case <-time.After(5 * time.Millisecond):
			}
			if queued()+len(frame) <= maxRelayInput {
				break
			}
		}
		if queued()+len(frame) > maxRelayInput {
			atRefusal = queued()
			break
		}
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
	if q := atRefusal; q > maxRelayInput || q+len(frame) <= maxRelayInput {
		t.Fatalf("queued input %d bytes when refused: want within one frame of the bound %d", q, maxRelayInput)
	}
	if total <= maxRelayInput {
		t.Fatalf("accepted %d bytes: the flusher never wrote to the owner", total)
	}
	t.Logf("accepted %d KiB (socket buffers and %d KiB queued) before the owner stalled the flusher; slowest call %v", total>>10, atRefusal>>10, slowest)

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
