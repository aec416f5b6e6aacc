package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/muxterm/muxterm/session"
)

// The directory's fast path. A JetStream stream whose leader's server dies takes a raft
// election to write again (4 to 9 s: nats-server's election timeouts), and a write queued behind
// it waits as long. So each node also announces its sessions' additions and removals on core
// NATS (announceSubj, no leader, delivered in milliseconds), every node folds the announcements
// and the bucket's watch into one view, and a lookup that finds nothing asks the other nodes
// directly (askSubj), each answering from its own registry. The bucket stays the durable copy:
// what a node that starts loads.
const (
	announceSubj = "muxterm.dir." // + node: {id, entry} for a session added, {id, sig} for one removed
	askSubj      = "muxterm.ask"  // a session id: every node answers whether it owns it
	// tombTTL: how long an announced removal keeps the bucket's older write of the same
	// session (still queued behind an election) from listing it again, unless the bucket's
	// removal comes first.
	tombTTL = markerTTL
)

// announcement is what announceSubj carries.
type announcement struct {
	ID    string `json:"id"`
	Entry *Entry `json:"entry,omitempty"` // added: the entry, signed
	Sig   string `json:"sig,omitempty"`   // removed: signer.sum("removed", key)
}

// askReply answers an askSubj request: the node's signed entry for the id, or a signed no.
type askReply struct {
	Node  string `json:"node"`
	Entry *Entry `json:"entry,omitempty"`
	Sig   string `json:"sig,omitempty"` // no such session here: signer.sum("absent", node, id)
}

// eventQueue holds session events in order for one writer goroutine (drain); flush waits
// until what was queued before it is written.
type eventQueue struct {
	// mu guards q, busy and idle. It is taken from the registry's Observer with Registry.mu
	// held: nothing else is taken under it.
	mu   sync.Mutex
	q    []session.Event
	busy bool          // the writer is writing a batch it took from q
	idle chan struct{} // closed and renewed by the writer after each batch
	wake chan struct{} // capacity 1
}

func newEventQueue() *eventQueue {
	return &eventQueue{idle: make(chan struct{}), wake: make(chan struct{}, 1)}
}

func (q *eventQueue) push(es ...session.Event) {
	q.mu.Lock()
	q.q = append(q.q, es...)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns what is queued, and marks the batch taken before it written.
func (q *eventQueue) take() []session.Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.q
	q.q = nil
	if q.busy {
		q.busy = false
		close(q.idle)
		q.idle = make(chan struct{})
	}
	q.busy = len(b) > 0
	return b
}

// flush waits until the queue is empty and no batch is being written, or ctx ends.
func (q *eventQueue) flush(ctx context.Context) error {
	for {
		q.mu.Lock()
		idle, done := q.idle, len(q.q) == 0 && !q.busy
		q.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// drain runs write on each batch q holds, until write returns false or the node closes.
func (n *Node) drain(q *eventQueue, write func([]session.Event) bool) {
	for {
		b := q.take()
		if len(b) == 0 {
			select {
			case <-q.wake:
				continue
			case <-n.ctx.Done():
				return
			}
		}
		if !write(b) {
			return
		}
	}
}

// announcer publishes each event on core NATS, then flushes the connection: once flush
// returns, the NATS server has the batch (Published).
func (n *Node) announcer() {
	n.drain(n.annQ, func(b []session.Event) bool {
		for _, e := range b {
			key := entryKey(n.cfg.Name, e.ID)
			a := announcement{ID: e.ID}
			if e.Opened {
				ent := n.sign.signEntry(key, n.entryOf(e))
				a.Entry = &ent
			} else {
				a.Sig = n.sign.sum("removed", key)
			}
			data, _ := json.Marshal(a)
			if err := n.nc.Publish(announceSubj+n.cfg.Name, data); err != nil {
				n.log.Warn("cluster: announce", "session", e.ID, "err", err)
			}
		}
		if err := n.nc.FlushTimeout(opTimeout); err != nil {
			n.log.Warn("cluster: announcements not flushed", "err", err)
		}
		return true
	})
}

// entryOf is the directory entry of one of this node's sessions.
func (n *Node) entryOf(e session.Event) Entry {
	return Entry{Node: n.cfg.Name, Principal: e.Owner, Name: e.Name, Created: e.Created.UTC(), State: "running", Boot: n.boot}
}

// reannounce queues an announcement of every session of this node (a node that starts asked
// with hello: what the bucket has not written yet reaches it too).
func (n *Node) reannounce() {
	n.localMu.Lock()
	es := make([]session.Event, 0, len(n.local))
	for _, e := range n.local {
		es = append(es, e)
	}
	if len(es) > 0 {
		n.annQ.push(es...)
	}
	n.localMu.Unlock()
}

// onAnnounce folds another node's (or this node's own) announcement into the view.
func (n *Node) onAnnounce(m *nats.Msg) {
	node := strings.TrimPrefix(m.Subject, announceSubj)
	var a announcement
	if json.Unmarshal(m.Data, &a) != nil || !validID(a.ID) || ValidNodeName(node) != nil {
		return
	}
	key := entryKey(node, a.ID)
	if a.Entry != nil {
		if !n.sign.entryOK(key, *a.Entry) {
			n.unverified("entry", node)
			return
		}
		e := *a.Entry
		e.ID, e.Node = a.ID, node
		n.mu.Lock()
		if _, removed := n.tombs[a.ID]; !removed {
			n.entries[a.ID] = e
		}
		n.mu.Unlock()
		return
	}
	if !n.sign.verify(a.Sig, "removed", key) {
		n.unverified("entry", node)
		return
	}
	n.mu.Lock()
	if cur, ok := n.entries[a.ID]; ok && cur.Node == node {
		delete(n.entries, a.ID)
	}
	n.tombs[a.ID] = time.Now()
	n.mu.Unlock()
}

// expireTombsLocked forgets the removals announced more than tombTTL ago.
func (n *Node) expireTombsLocked(now time.Time) {
	for id, at := range n.tombs {
		if now.Sub(at) > tombTTL {
			delete(n.tombs, id)
		}
	}
}

// onAsk answers whether this node owns the session id in the request.
func (n *Node) onAsk(m *nats.Msg) {
	id := string(m.Data)
	if m.Reply == "" || !validID(id) {
		return
	}
	n.localMu.Lock()
	e, ok := n.local[id]
	n.localMu.Unlock()
	r := askReply{Node: n.cfg.Name}
	if ok {
		ent := n.sign.signEntry(entryKey(n.cfg.Name, id), n.entryOf(e))
		r.Entry = &ent
	} else {
		r.Sig = n.sign.sum("absent", n.cfg.Name, id)
	}
	data, _ := json.Marshal(r)
	_ = m.Respond(data)
}

// ask asks every node for session id and returns its owner's signed entry. It returns false
// once every node heard alive has said it does not own id (milliseconds), or a node that
// stays silent was declared lost (within 0.8 TTL), or at the latest after the TTL, or when ctx
// ends.
func (n *Node) ask(ctx context.Context, id string) (Entry, bool) {
	replies := make(chan *nats.Msg, 64)
	inbox := n.nc.NewRespInbox()
	sub, err := n.nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return Entry{}, false
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := n.nc.PublishRequest(askSubj, inbox, []byte(id)); err != nil {
		return Entry{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.TTL)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	answered := map[string]bool{n.cfg.Name: true}
	for {
		n.mu.Lock()
		pending := false
		for name, p := range n.peers {
			if p.alive && !answered[name] {
				pending = true
				break
			}
		}
		n.mu.Unlock()
		if !pending {
			return Entry{}, false
		}
		select {
		case m := <-replies:
			var r askReply
			if json.Unmarshal(m.Data, &r) != nil || ValidNodeName(r.Node) != nil {
				continue
			}
			key := entryKey(r.Node, id)
			if r.Entry != nil {
				if !n.sign.entryOK(key, *r.Entry) {
					n.unverified("entry", r.Node)
					continue
				}
				e := *r.Entry
				e.ID, e.Node = id, r.Node
				return e, true
			}
			if !n.sign.verify(r.Sig, "absent", r.Node, id) {
				n.unverified("entry", r.Node)
				continue
			}
			answered[r.Node] = true
		case <-tick.C:
		case <-ctx.Done():
			return Entry{}, false
		}
	}
}
