package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// relay is one channel relayed to its owner: a client socket to the owner acting for the
// principal, with ManualAck, so the owner gets acks only for what the relay's own client
// acknowledged: the bytes in flight from the owner (on the wire, buffered here, on the wire to
// the client) never exceed the owner's window (more for a while after a resume: what each old
// binding had buffered here, and the new binding's).
//
// When the owner restarts in place (SIGUSR2: its sockets close with 1012) the relay dials it
// again and resumes from the offset it had received, so its client keeps the channel; output
// the old bindings had buffered is read first, oldest first.
type relay struct {
	n         *Node
	node      string
	id        string
	principal string
	readOnly  bool
	notify    func()

	// mu guards every field below. It is held across a Read of a channel that has data
	// buffered (which does not block) and nothing else that blocks.
	mu  sync.Mutex
	cur *binding // the binding input, acks, resizes and signals go to
	// drains are bindings that ended with a restart and still hold buffered output, oldest
	// first: Read empties them in order before cur (an owner may restart again before the
	// client has read what the first restart left; dropping it would lose bytes without a gap).
	drains  []*binding
	lost    bool // the owner node was declared lost, or a resume failed
	closing bool
	errs    []*proto.Error // id-less errors from the owner, not yet passed on
	// cancelResume ends a resume in progress (nil when none runs).
	cancelResume context.CancelFunc
	// fenceTimer wakes the writer when a node_lost held back for the owner's lease may be
	// answered (nil until needed).
	fenceTimer *time.Timer
	// ackDebt is what the client will still acknowledge of bindings that ended: those acks
	// are not passed on (the new binding never sent those bytes).
	ackDebt int
	// sizeBase is added to the current binding's count of session.size notifications, so a
	// resume counts as a change (the size is the new attach's).
	sizeBase uint64
	// The upstream queue: what the client sent for the owner and the flusher has not written
	// yet. Ack and Write run on the client socket's read loop and only queue (invariant 4: an
	// owner that stops reading must not stall the other channels of that socket).
	ackDue     int      // acknowledged bytes not yet passed on (acks merge: bounded by the window)
	input      [][]byte // input frames' payloads, copied, in order
	inputBytes int      // sum of len(input); with cur's in-flight input at most maxRelayInput

	wake    chan struct{} // capacity 1: the queue has something for the flusher
	stopped chan struct{} // closed by Close: the flusher writes what is queued and ends
	flushed chan struct{} // closed when the flusher has ended
}

// binding is one socket to the owner and the relayed channel on it. read, acked and written
// are guarded by relay.mu.
type binding struct {
	c       *client.Client
	sock    *relaySock
	ch      *client.Channel
	read    int   // output bytes Read returned from ch
	acked   int   // acks passed on to ch (queued or written)
	written int64 // input bytes written to ch; the owner has taken sock.taken() of them
	skip    int64 // offsets lost between the binding before and this one: reported with its first bytes
}

// inFlightLocked is the input written to b that the owner has not reported taking.
func (b *binding) inFlightLocked() int {
	return int(max(b.written-b.sock.taken(b.ch.ID), 0))
}

// maxRelayInput bounds the input a relay holds for an owner that has not taken it yet, queued
// here or written to the socket and not reported taken (relay.input): the same bound a
// session's input queue has (session.InputQueueBytes). An input that does not fit is refused
// whole, as the owner refuses input its program does not read: limit_exceeded inputQueue
// (docs/protocol.md §2).
const maxRelayInput = session.InputQueueBytes

// errRelayInputFull is Write's refusal when the queue is full.
func errRelayInputFull() *proto.Error {
	return proto.ErrLimitExceeded("inputQueue", "the node that owns the session has not taken the pending input; nothing was written")
}

// maxRelayErrors bounds the owner's errors kept for the writer; beyond it they are dropped
// (the client is told of the first ones; they repeat the same refusal).
const maxRelayErrors = 64

// resumeRetry is the pause between attempts to reach an owner restarting in place; maxResume
// bounds the whole resume. Meanwhile the owner keeps its heartbeat (its new image heartbeats
// before its directory is up), and a dial waits in its listen backlog until it serves; an owner
// that stops heartbeating is declared lost, which ends the resume at once.
const (
	resumeRetry = 50 * time.Millisecond
	maxResume   = 2 * time.Minute
)

func (r *relay) onServerError(e *proto.Error) {
	r.mu.Lock()
	if len(r.errs) < maxRelayErrors {
		r.errs = append(r.errs, e)
	}
	r.mu.Unlock()
	r.wakeWriter()
}

// wakeWriter tells the client socket's writer that the relay has something new.
func (r *relay) wakeWriter() {
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

// errNodeClosed refuses a relay started once the node is closing.
var errNodeClosed = errors.New("the cluster node is closing")

// startRelay completes r (made before the dial, for its error hook) and registers it. Once the
// node is closing it refuses it and closes c: close has taken its snapshot of the relays and
// may be waiting for its goroutines, so a new flusher could be neither closed nor counted.
func (n *Node) startRelay(r *relay, node, id string, b *binding) (*relay, error) {
	ch := b.ch
	r.node, r.id, r.cur = node, id, b
	r.wake, r.stopped, r.flushed = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	ch.SetNotify(r.notify)
	b.sock.bind(ch.ID, r)
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		b.c.Close() // the node closes: so do all its relays' sockets
		n.release(b.sock, ch.ID)
		return nil, fmt.Errorf("relay session %s to node %s: %w", id, node, errNodeClosed)
	}
	n.relays[r] = struct{}{}
	_, alive := n.aliveLocked(node)
	n.wg.Go(r.flusher) // under mu: close sets closed under it before its Wait
	n.mu.Unlock()
	if !alive {
		r.nodeLost()
	}
	return r, nil
}

func (r *relay) Session() string { return r.id }

// restarting reports whether c ended because its server restarts in place (close 1012).
func restarting(c *client.Client) bool {
	var ce *websocket.CloseError
	return errors.As(c.Err(), &ce) && ce.Code == websocket.CloseServiceRestart
}

// resumable: b's channel ended with its socket closing 1012 and no session.closed, and the
// relay goes on: the flusher resumes it.
func (r *relay) resumableLocked(b *binding) bool {
	return !r.lost && !r.closing && b.ch.Reason() == "" && restarting(b.c)
}

func (r *relay) Read(p []byte) (int, int64) {
	if len(p) == 0 {
		return 0, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.curOrDrainLocked()
	if b.ch.Buffered() == 0 {
		return 0, 0 // (a gap with no data behind it yet is reported with the data that follows)
	}
	// Only this goroutine reads: with data buffered, Read returns at once.
	before := b.ch.Offset()
	nr, _ := b.ch.Read(p)
	lost := b.ch.Offset() - before - int64(nr) + b.skip
	b.skip = 0
	b.read += nr
	return nr, lost
}

// curOrDrainLocked drops the drains that are empty (their socket ended: nothing more comes)
// and returns the oldest that is not, or cur.
func (r *relay) curOrDrainLocked() *binding {
	for len(r.drains) > 0 && r.drains[0].ch.Buffered() == 0 {
		r.drains[0] = nil
		r.drains = r.drains[1:]
	}
	if len(r.drains) > 0 {
		return r.drains[0]
	}
	return r.cur
}

func (r *relay) State() (bool, *proto.ExitInfo, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.curOrDrainLocked() != r.cur {
		return true, nil, ""
	}
	ch := r.cur.ch
	if ch.Buffered() > 0 {
		return true, ch.ExitInfo(), ""
	}
	select {
	case <-ch.Closed():
	default:
		return false, ch.ExitInfo(), ""
	}
	if r.resumableLocked(r.cur) {
		return false, ch.ExitInfo(), "" // the flusher is resuming it
	}
	reason := ch.Reason()
	if r.lost || reason == "" {
		reason = ReasonNodeLost // the owner's socket ended without session.closed
		if r.holdNodeLostLocked() {
			return false, ch.ExitInfo(), ""
		}
	}
	return false, ch.ExitInfo(), reason
}

// holdNodeLostLocked reports whether node_lost must not be answered yet: the owner may still
// take what cur's socket carries (its lease has not lapsed). It then has the writer woken when
// it may. r.mu must be held.
func (r *relay) holdNodeLostLocked() bool {
	wait := r.cur.fenceWait(time.Now())
	if wait <= 0 {
		return false
	}
	if r.fenceTimer == nil {
		r.fenceTimer = time.AfterFunc(wait, r.wakeWriter)
	} else {
		r.fenceTimer.Reset(wait)
	}
	return true
}

func (r *relay) Size() (int, int, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cols, rows, gen := r.cur.ch.SizeGen()
	return cols, rows, r.sizeBase + gen
}

// Ack queues n acknowledged bytes for the owner; it never blocks. Acks of output a binding that
// ended delivered are not passed on.
func (r *relay) Ack(n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	absorbed := min(n, r.ackDebt)
	r.ackDebt -= absorbed
	n -= absorbed
	r.ackDue += n
	r.cur.acked += n
	r.mu.Unlock()
	if n > 0 {
		r.kick()
	}
}

// Write queues input for the owner; it never blocks. Input that does not fit in the queue is
// refused whole (limit_exceeded inputQueue); input for a binding that ended gets
// session_closed with its reason. While the relay resumes, input waits in the queue.
func (r *relay) Write(p []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return proto.ErrSessionClosed(r.id, ReasonNodeLost)
	}
	ended := r.lost
	if !ended {
		select {
		case <-r.cur.ch.Closed():
			if !r.resumableLocked(r.cur) {
				if reason := r.cur.ch.Reason(); reason != "" {
					return proto.ErrSessionClosed(r.id, reason)
				}
				ended = true
			}
		default:
		}
	}
	// An owner that may still take what the socket carries is not answered node_lost yet:
	// this input waits with the rest, and none of it is sent.
	if ended && !r.holdNodeLostLocked() {
		return proto.ErrSessionClosed(r.id, ReasonNodeLost)
	}
	if r.inputBytes+r.cur.inFlightLocked()+len(p) > maxRelayInput {
		return errRelayInputFull()
	}
	r.input = append(r.input, append([]byte(nil), p...))
	r.inputBytes += len(p)
	r.kick()
	return nil
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
// When the owner restarts in place, it resumes the relay. It ends when the relay closes or its
// socket ends otherwise.
func (r *relay) flusher() {
	defer close(r.flushed)
	for {
		r.mu.Lock()
		cur := r.cur
		r.mu.Unlock()
		stop := false
		select {
		case <-r.wake:
		case <-r.stopped:
			stop = true // what was queued before Close still goes, ahead of the detach
		case <-cur.c.Done():
			r.mu.Lock()
			resume := r.resumableLocked(cur)
			r.mu.Unlock()
			if !resume || !r.resume(cur) {
				return
			}
			continue
		}
		r.flushQueue(cur)
		if stop {
			return
		}
	}
}

// flushQueue writes what is queued now to b.
func (r *relay) flushQueue(b *binding) {
	r.mu.Lock()
	ack, input := r.ackDue, r.input
	r.ackDue = 0
	r.mu.Unlock()
	if ack > 0 {
		if err := b.ch.Ack(ack); err != nil {
			r.n.log.Debug("relay: ack", "session", r.id, "err", err)
		}
	}
	for i, p := range input {
		if _, err := b.ch.Write(p); err != nil {
			r.n.log.Debug("relay: input", "session", r.id, "err", err, "frames_left", len(input)-i)
			r.mu.Lock()
			if !r.resumableLocked(b) {
				r.input, r.inputBytes = nil, 0 // the binding ended: so did its input
			}
			r.mu.Unlock()
			return // a resume writes what is left on the new binding
		}
		r.mu.Lock()
		r.input = r.input[1:]
		r.inputBytes -= len(p)
		b.written += int64(len(p))
		r.mu.Unlock()
	}
}

// resume re-attaches the relay to its owner, which closed old's socket with 1012 (an upgrade in
// place), from the offset old had received, retrying until the owner answers, the node is
// declared lost or a TTL has passed. It reports whether the relay goes on.
func (r *relay) resume(old *binding) bool {
	r.mu.Lock()           // Read moves bytes from Buffered to Offset under it
	from := old.ch.Next() // a paint's bytes still buffered have no offsets

	r.mu.Unlock()
	r.n.log.Info("relay: owner restarting; resuming", "owner", r.node, "session", r.id, "from", from)
	ctx, cancel := context.WithTimeout(r.n.ctx, maxResume)
	defer cancel()
	r.mu.Lock()
	if r.closing || r.lost { // Close or nodeLost ran before cancelResume was set: nothing cuts the dial short
		r.mu.Unlock()
		return false
	}
	r.cancelResume = cancel // nodeLost and Close cut it short
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.cancelResume = nil
		r.mu.Unlock()
	}()
	start := time.Now()
	fail := func(why string, err error) bool {
		r.n.log.Warn("relay: resume failed; the channel closes node_lost", "owner", r.node, "session", r.id, "why", why, "err", err)
		r.mu.Lock()
		r.lost = true
		r.mu.Unlock()
		r.wakeWriter()
		return false
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-r.stopped:
				return false
			case <-ctx.Done():
				return fail("the owner did not come back", ctx.Err())
			case <-time.After(resumeRetry):
			}
		}
		r.n.mu.Lock()
		url, alive := r.n.aliveLocked(r.node)
		r.n.mu.Unlock()
		if !alive {
			return fail("the owner is lost", nil)
		}
		sock, err := r.n.acquire(ctx, url, r.principal, r.readOnly)
		if err != nil {
			continue // not serving yet
		}
		c := sock.c
		ch, res, err := c.Attach(ctx, r.id, &from)
		if err != nil {
			r.n.release(sock, 0)
			var pe *proto.Error
			if errors.As(err, &pe) {
				return fail("the owner refused the attach", err) // the session did not cross the upgrade
			}
			continue
		}
		nb := &binding{c: c, sock: sock, ch: ch, skip: max(res.Offset-from, 0)}
		sock.bind(ch.ID, r)
		r.mu.Lock()
		if r.closing || r.lost {
			r.mu.Unlock()
			detachAndRelease(r.n, nb, false)
			return false
		}
		// The client will still acknowledge what old delivered and it did not acknowledge
		// yet; what old had queued for the owner is moot.
		r.ackDebt += old.read + old.ch.Buffered() - old.acked
		r.ackDue = 0
		_, _, gen := old.ch.SizeGen()
		r.sizeBase += gen + 1
		if old.ch.Buffered() > 0 {
			r.drains = append(r.drains, old)
		} else {
			nb.skip += old.skip // a gap old had no bytes to report with yet
		}
		r.cur = nb
		r.mu.Unlock()
		r.n.release(old.sock, old.ch.ID) // its socket ended; its buffered output stays readable
		ch.SetNotify(r.notify)
		r.n.log.Info("relay: resumed", "owner", r.node, "session", r.id, "from", from, "offset", res.Offset,
			"took", time.Since(start).Round(time.Millisecond), "attempts", attempt+1)
		r.wakeWriter()
		r.kick()
		return true
	}
}

func (r *relay) Resize(ctx context.Context, cols, rows int) (proto.ResizeResult, error) {
	r.mu.Lock()
	b := r.cur
	r.mu.Unlock()
	var res proto.ResizeResult
	err := b.c.Call(ctx, proto.MethodSessionResize, proto.ResizeParams{Channel: b.ch.ID, Cols: cols, Rows: rows}, &res)
	return res, err
}

func (r *relay) Signal(ctx context.Context, sig string) error {
	r.mu.Lock()
	b := r.cur
	r.mu.Unlock()
	return b.ch.Signal(ctx, sig)
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
	if r.cancelResume != nil {
		r.cancelResume()
	}
	if r.fenceTimer != nil {
		r.fenceTimer.Stop()
	}
	r.mu.Unlock()
	close(r.stopped)
	teardown := func() {
		<-r.flushed // input typed before the detach reaches the owner before it
		r.mu.Lock()
		b := r.cur
		r.mu.Unlock()
		detachAndRelease(r.n, b, !detach)
	}
	// Counted in the node's group unless the node's close is already waiting on it (an Add then
	// would be WaitGroup misuse): that close has cancelled n.ctx, which bounds the detach.
	r.n.mu.Lock()
	delete(r.n.relays, r)
	untracked := r.n.waiting
	if !untracked {
		r.n.wg.Go(teardown)
	}
	r.n.mu.Unlock()
	if untracked {
		go teardown()
	}
}

// detachAndRelease detaches b's channel from the owner unless the owner already ended it (the
// socket may carry other channels: closing it is not a detach), with hold as a client's socket
// that dropped (the owner's session holds its output for a resume), and lets b's socket go.
func detachAndRelease(n *Node, b *binding, hold bool) {
	select {
	case <-b.ch.Closed():
	default:
		ctx, cancel := context.WithTimeout(n.ctx, opTimeout) // Node.Close cuts it short
		if hold {
			_ = b.ch.DetachHolding(ctx)
		} else {
			_ = b.ch.Detach(ctx)
		}
		cancel()
	}
	n.release(b.sock, b.ch.ID)
}

// nodeLost ends the relay's socket: its client is told session.closed {reason: node_lost}
// once what was buffered is delivered.
func (r *relay) nodeLost() {
	r.mu.Lock()
	r.lost = true
	b := r.cur
	if r.cancelResume != nil {
		r.cancelResume()
	}
	r.mu.Unlock()
	b.c.Close()    // ends the channel: the notify wakes the writer
	r.wakeWriter() // (a resume in progress: the channel already ended)
}
