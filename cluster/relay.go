package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

var _ mux.Remote = (*Node)(nil)

// List returns principal's sessions on the other live nodes, oldest first, each with its node.
func (n *Node) List(principal string) []proto.SessionInfo {
	n.mu.Lock()
	var es []Entry
	for _, e := range n.entries {
		if e.Principal != principal || e.Node == n.cfg.Name {
			continue
		}
		if _, ok := n.aliveLocked(e.Node); ok {
			es = append(es, e)
		}
	}
	n.mu.Unlock()
	sort.Slice(es, func(i, j int) bool { return es[i].Created.Before(es[j].Created) })
	out := make([]proto.SessionInfo, 0, len(es))
	for _, e := range es {
		out = append(out, proto.SessionInfo{Session: e.ID, Name: e.Name, Node: e.Node,
			Created: e.Created.UTC().Format(time.RFC3339Nano)})
	}
	return out
}

// owner finds the live node that owns id and its URL. A session of a lost node is
// session_closed {reason: node_lost}; one the directory does not know is mux.ErrNotRemote.
func (n *Node) owner(ctx context.Context, id string) (node, url string, err error) {
	e, ok := n.lookup(ctx, id)
	if !ok || e.Node == n.cfg.Name {
		return "", "", mux.ErrNotRemote
	}
	// A node named by the directory but not heard from yet (this node just started) is waited
	// for, at most until it would be declared lost.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		n.mu.Lock()
		url, alive := n.aliveLocked(e.Node)
		n.mu.Unlock()
		if !alive {
			return "", "", proto.ErrSessionClosed(id, ReasonNodeLost)
		}
		if url != "" {
			return e.Node, url, nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return "", "", fmt.Errorf("owner %s of %s: %w", e.Node, id, ctx.Err())
		}
	}
}

// dial opens a socket to a node's /ws acting for principal, with the cluster token.
func (n *Node) dial(ctx context.Context, url, principal string, readOnly bool, onErr func(*proto.Error)) (*client.Client, error) {
	h := http.Header{}
	h.Set(proto.HeaderOnBehalfOf, principal)
	if readOnly {
		h.Set(proto.HeaderReadOnly, "1")
	}
	var d *websocket.Dialer
	if n.cfg.RelayTLS != nil {
		d = &websocket.Dialer{TLSClientConfig: n.cfg.RelayTLS, HandshakeTimeout: opTimeout}
	}
	c, err := client.Dial(ctx, url, client.DialOptions{Token: n.cfg.Token, Header: h, Dialer: d,
		Name: "muxterm-relay/" + n.cfg.Name, ManualAck: true, OnServerError: onErr})
	if err != nil {
		return nil, fmt.Errorf("relay: dial %s: %w", url, err)
	}
	return c, nil
}

// Attach implements mux.Remote: a relay bound to the owner's session.
func (n *Node) Attach(ctx context.Context, principal string, readOnly bool, p proto.AttachParams, notify func()) (mux.Relay, proto.AttachResult, error) {
	node, url, err := n.owner(ctx, p.Session)
	if err != nil {
		return nil, proto.AttachResult{}, err
	}
	r := &relay{n: n, notify: notify}
	c, err := n.dial(ctx, url, principal, readOnly, r.onServerError)
	if err != nil {
		return nil, proto.AttachResult{}, n.dialErr(node, p.Session, err)
	}
	ch, res, err := c.Attach(ctx, p.Session, p.From)
	if err != nil {
		c.Close()
		return nil, res, err // the owner's error, e.g. unknown_session for another principal
	}
	if p.Cols > 0 && !readOnly {
		if rerr := ch.Resize(ctx, p.Cols, p.Rows); rerr == nil {
			res.Cols, res.Rows = p.Cols, p.Rows
		}
	}
	return n.startRelay(r, node, p.Session, c, ch), res, nil
}

// dialErr: an owner that cannot be reached is reported as lost; one whose TLS certificate this
// node does not trust is a configuration error, said as such (the node is not lost).
func (n *Node) dialErr(node, id string, err error) error {
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		n.log.Error("relay: the owner's TLS certificate is not trusted (check --cluster-ca)", "owner", node, "session", id, "err", err)
		return proto.ErrInternal(fmt.Sprintf("relay to node %s: its TLS certificate is not trusted by this node (--cluster-ca): %v", node, cv.Err))
	}
	n.log.Warn("relay: owner unreachable", "owner", node, "session", id, "err", err)
	return proto.ErrSessionClosed(id, ReasonNodeLost)
}

// Open implements mux.Remote: with least-sessions placement, the open goes to the live node
// with the fewest sessions when that is not this one.
func (n *Node) Open(ctx context.Context, principal string, p proto.OpenParams, notify func()) (mux.Relay, proto.OpenResult, bool, error) {
	if n.cfg.Placement != PlaceLeastSessions {
		return nil, proto.OpenResult{}, false, nil
	}
	// Each node's sessions as the directory says (current to within its propagation time);
	// this node's own count is exact. Fewest wins; a tie stays here, then goes to the first name.
	best, bestURL, bestN := "", "", n.cfg.Sessions()
	n.mu.Lock()
	counts := make(map[string]int, len(n.peers))
	for _, e := range n.entries {
		counts[e.Node]++
	}
	for name, pr := range n.peers {
		c := counts[name]
		if pr.alive && pr.url != "" && (c < bestN || (c == bestN && best != "" && name < best)) {
			best, bestURL, bestN = name, pr.url, c
		}
	}
	n.mu.Unlock()
	if best == "" {
		return nil, proto.OpenResult{}, false, nil
	}
	r := &relay{n: n, notify: notify}
	c, err := n.dial(ctx, bestURL, principal, false, r.onServerError)
	if err != nil {
		return nil, proto.OpenResult{}, false, nil // placement is a preference: open here
	}
	ch, err := c.Open(ctx, client.OpenOptions{Cmd: p.Cmd, Cwd: p.Cwd, Env: p.Env, Cols: p.Cols, Rows: p.Rows, Name: p.Name})
	if err != nil {
		c.Close()
		return nil, proto.OpenResult{}, true, err
	}
	return n.startRelay(r, best, ch.Session(), c, ch), proto.OpenResult{Session: ch.Session(), Pid: ch.Pid()}, true, nil
}

// Kill implements mux.Remote.
func (n *Node) Kill(ctx context.Context, principal, id string) (proto.KillResult, error) {
	node, url, err := n.owner(ctx, id)
	if err != nil {
		return proto.KillResult{}, err
	}
	c, err := n.dial(ctx, url, principal, false, nil)
	if err != nil {
		return proto.KillResult{}, n.dialErr(node, id, err)
	}
	defer c.Close()
	return c.Kill(ctx, id)
}

// Lease implements mux.Remote: the lease is taken on the owner, where the reaper runs.
func (n *Node) Lease(ctx context.Context, principal, id string, ttlMs int64) (proto.LeaseResult, error) {
	node, url, err := n.owner(ctx, id)
	if err != nil {
		return proto.LeaseResult{}, err
	}
	c, err := n.dial(ctx, url, principal, false, nil)
	if err != nil {
		return proto.LeaseResult{}, n.dialErr(node, id, err)
	}
	defer c.Close()
	var res proto.LeaseResult
	err = c.Call(ctx, "session.lease", map[string]any{"session": id, "ttl_ms": ttlMs}, &res)
	return res, err
}

// relay is one channel relayed to its owner: a client socket to the owner acting for the
// principal, with ManualAck, so the owner gets acks only for what the relay's own client
// acknowledged: the bytes in flight from the owner (on the wire, buffered here, on the wire to
// the client) never exceed the owner's window.
type relay struct {
	n      *Node
	node   string
	id     string
	c      *client.Client
	ch     *client.Channel
	notify func()

	// mu guards lost, closing, errs and the upstream queue (ackDue, input, inputBytes).
	mu      sync.Mutex
	lost    bool // the owner node was declared lost
	closing bool
	errs    []*proto.Error // id-less errors from the owner, not yet passed on
	// The upstream queue: what the client sent for the owner and the flusher has not written
	// yet. Ack and Write run on the client socket's read loop and only queue (invariant 4: an
	// owner that stops reading must not stall the other channels of that socket).
	ackDue     int      // acknowledged bytes not yet passed on (acks merge: bounded by the window)
	input      [][]byte // input frames' payloads, copied, in order
	inputBytes int      // sum of len(input): at most maxRelayInput

	wake    chan struct{} // capacity 1: the queue has something for the flusher
	stopped chan struct{} // closed by Close: the flusher writes what is queued and ends
	flushed chan struct{} // closed when the flusher has ended
}

// maxRelayInput bounds the input a relay holds for an owner that has not taken it yet: the
// same bound a session's input queue has (session.InputQueueBytes). An input that does not fit
// is refused whole, as the owner refuses input its program does not read: limit_exceeded
// inputQueue (docs/protocol.md §2).
const maxRelayInput = session.InputQueueBytes

// errRelayInputFull is Write's refusal when the queue is full.
func errRelayInputFull() *proto.Error {
	return proto.ErrLimitExceeded("inputQueue", "the node that owns the session has not taken the pending input; nothing was written")
}

// maxRelayErrors bounds the owner's errors kept for the writer; beyond it they are dropped
// (the client is told of the first ones; they repeat the same refusal).
const maxRelayErrors = 64

func (r *relay) onServerError(e *proto.Error) {
	r.mu.Lock()
	if len(r.errs) < maxRelayErrors {
		r.errs = append(r.errs, e)
	}
	r.mu.Unlock()
	if r.notify != nil {
		r.notify()
	}
}

func (r *relay) Errors() []*proto.Error {
	r.mu.Lock()
	defer r.mu.Unlock()
	es := r.errs
	r.errs = nil
	return es
}

// startRelay completes r (made before the dial, for its error hook) and registers it.
func (n *Node) startRelay(r *relay, node, id string, c *client.Client, ch *client.Channel) *relay {
	r.node, r.id, r.c, r.ch = node, id, c, ch
	r.wake, r.stopped, r.flushed = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	n.mu.Lock()
	n.relays[r] = struct{}{}
	_, alive := n.aliveLocked(node)
	n.mu.Unlock()
	ch.SetNotify(r.notify)
	n.wg.Go(r.flusher)
	if !alive {
		r.nodeLost()
	}
	return r
}

func (r *relay) Session() string { return r.id }

func (r *relay) Read(p []byte) (int, int64) {
	if len(p) == 0 {
		return 0, 0
	}
	if r.ch.Buffered() == 0 {
		return 0, 0 // (a gap with no data behind it yet is reported with the data that follows)
	}
	// Only this goroutine reads: with data buffered, Read returns at once.
	before := r.ch.Offset()
	nr, _ := r.ch.Read(p)
	lost := r.ch.Offset() - before - int64(nr)
	return nr, lost
}

func (r *relay) State() (bool, *proto.ExitInfo, string) {
	if r.ch.Buffered() > 0 {
		return true, r.ch.ExitInfo(), ""
	}
	select {
	case <-r.ch.Closed():
	default:
		return false, r.ch.ExitInfo(), ""
	}
	reason := r.ch.Reason()
	r.mu.Lock()
	if r.lost || reason == "" {
		reason = ReasonNodeLost // the owner's socket ended without session.closed
	}
	r.mu.Unlock()
	return false, r.ch.ExitInfo(), reason
}

func (r *relay) Size() (int, int, uint64) { return r.ch.SizeGen() }

// Ack queues n acknowledged bytes for the owner; it never blocks.
func (r *relay) Ack(n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	r.ackDue += n
	r.mu.Unlock()
	r.kick()
}

// Write queues input for the owner; it never blocks. Input that does not fit in the queue is
// refused whole (limit_exceeded inputQueue); input for a binding that ended gets
// session_closed with its reason.
func (r *relay) Write(p []byte) error {
	select {
	case <-r.ch.Closed():
		return proto.ErrSessionClosed(r.id, r.closedReason())
	default:
	}
	r.mu.Lock()
	if r.lost || r.closing {
		r.mu.Unlock()
		return proto.ErrSessionClosed(r.id, ReasonNodeLost)
	}
	if r.inputBytes+len(p) > maxRelayInput {
		r.mu.Unlock()
		return errRelayInputFull()
	}
	r.input = append(r.input, append([]byte(nil), p...))
	r.inputBytes += len(p)
	r.mu.Unlock()
	r.kick()
	return nil
}

// closedReason is the reason a binding that ended gives: the owner's, else node_lost.
func (r *relay) closedReason() string {
	reason := r.ch.Reason()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lost || reason == "" {
		return ReasonNodeLost
	}
	return reason
}

func (r *relay) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// flusher writes the upstream queue to the owner, acks first (they let output flow), then
// input in order. Its writes may block up to the client's WriteTimeout on an owner that stopped
// reading; a write that fails ends the relay's socket, so the channel closes with node_lost.
// It ends when the relay closes or its client ends.
func (r *relay) flusher() {
	defer close(r.flushed)
	for {
		stop := false
		select {
		case <-r.wake:
		case <-r.stopped:
			stop = true // what was queued before Close still goes, ahead of the detach
		case <-r.c.Done():
			return
		}
		r.flushQueue()
		if stop {
			return
		}
	}
}

// flushQueue writes what is queued now.
func (r *relay) flushQueue() {
	r.mu.Lock()
	ack, input := r.ackDue, r.input
	r.ackDue = 0
	r.mu.Unlock()
	if ack > 0 {
		if err := r.ch.Ack(ack); err != nil {
			r.n.log.Debug("relay: ack", "session", r.id, "err", err)
		}
	}
	for i, p := range input {
		_, err := r.ch.Write(p)
		r.mu.Lock()
		r.input = r.input[1:]
		r.inputBytes -= len(p)
		r.mu.Unlock()
		if err != nil {
			r.n.log.Debug("relay: input", "session", r.id, "err", err, "dropped_frames", len(input)-i-1)
			r.dropInput()
			return
		}
	}
}

// dropInput forgets the queued input of a binding that ended (its writes would fail too).
func (r *relay) dropInput() {
	r.mu.Lock()
	r.input, r.inputBytes = nil, 0
	r.mu.Unlock()
}

func (r *relay) Resize(ctx context.Context, cols, rows int) (proto.ResizeResult, error) {
	var res proto.ResizeResult
	err := r.c.Call(ctx, "session.resize", map[string]any{"channel": r.ch.ID, "cols": cols, "rows": rows}, &res)
	return res, err
}

func (r *relay) Signal(ctx context.Context, sig string) error {
	return r.ch.Signal(ctx, sig)
}

// Close ends the relay off the caller's goroutine (a detach is a round trip to the owner),
// once the flusher has written what was queued.
func (r *relay) Close(detach bool) {
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return
	}
	r.closing = true
	r.mu.Unlock()
	close(r.stopped)
	r.n.mu.Lock()
	delete(r.n.relays, r)
	r.n.mu.Unlock()
	r.n.wg.Go(func() {
		<-r.flushed // input typed before the detach reaches the owner before it
		select {
		case <-r.ch.Closed():
			detach = false // the owner already ended the binding
		default:
		}
		if detach {
			ctx, cancel := context.WithTimeout(r.n.ctx, opTimeout) // Close cuts it short
			_ = r.ch.Detach(ctx)
			cancel()
		}
		r.c.Close()
	})
}

// nodeLost ends the relay's socket: its client is told session.closed {reason: node_lost}
// once what was buffered is delivered.
func (r *relay) nodeLost() {
	r.mu.Lock()
	r.lost = true
	r.mu.Unlock()
	r.c.Close() // ends the channel: the notify wakes the writer
}
