package mux

import (
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/muxterm/muxterm/proto"
)

// channel is one binding of a channel number to a session on one socket: a viewer of a local
// session or a relay to another node's.
type channel struct {
	id     uint32
	credit *credit

	// b is what the channel is bound to (binding.go). It is set once before ready is stored
	// true; read it only after ready.Load() (or active.Load()).
	b binding

	// ready: b is set, so requests and input on the channel may use it. It is stored before
	// the open/attach reply is queued, so input a client sends once it has the reply always
	// finds the channel ready.
	ready    atomic.Bool
	active   atomic.Bool // bound and its attach/open reply is queued: the writer may serve it
	detached atomic.Bool // unbound; the writer skips it
	queued   atomic.Bool // in conn.ready
	// starved: the writer found output waiting and no credit, so the next ack re-queues the
	// channel. An ack for a channel that is not starved wakes nobody.
	starved atomic.Bool

	// owned by writeLoop once active (set before, by the goroutine that binds the channel):
	exitSent   bool
	closedSent bool
	// sizeGen is the session's size generation this channel's client last learned (in the
	// open/attach result or a session.size notification).
	sizeGen uint64
}

// detachAll unbinds every channel; called once both loops have ended.
func (c *conn) detachAll() {
	c.mu.Lock()
	chs := make([]*channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chs = append(chs, ch)
	}
	clear(c.channels)
	c.mu.Unlock()
	for _, ch := range chs {
		c.unbind(ch, true) // the socket ended under its bindings: their clients may come back
	}
}

// unbind marks ch detached and closes its binding (unsubscribe); lost says the client did not
// leave on purpose (see closeViewer). Never call with c.mu held.
func (c *conn) unbind(ch *channel, lost bool) {
	ch.detached.Store(true)
	if ch.active.Load() && ch.b != nil {
		closeViewer(ch, lost)
	}
}

// sessionID is the bound session's id.
func (ch *channel) sessionID() string { return ch.b.session() }

// closeViewer closes ch's binding. A client that may come back (lost) has consumed all but the
// bytes in flight.
func closeViewer(ch *channel, lost bool) {
	ch.b.close(lost, ch.credit.inflight.Load())
}

// reserve claims a free channel number, or replies with an error and returns nil.
func (c *conn) reserve(id json.RawMessage, num uint32) *channel {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, busy := c.channels[num]; busy {
		c.sendLocked(proto.MarshalResponse(id, nil, proto.ErrChannelInUse(num)))
		return nil
	}
	if len(c.channels) >= c.opts.MaxChannels {
		c.sendLocked(proto.MarshalResponse(id, nil, proto.ErrLimitExceeded("maxChannels",
			fmt.Sprintf("at most %d channels per socket", c.opts.MaxChannels))))
		return nil
	}
	ch := &channel{id: num, credit: newCredit(int64(c.opts.Window))}
	c.channels[num] = ch
	return ch
}

// release frees ch's number unless another channel holds it now: after a reservation that never
// became active, a detach, or the end of the channel's session.
func (c *conn) release(ch *channel) {
	c.mu.Lock()
	if c.channels[ch.id] == ch {
		delete(c.channels, ch.id)
	}
	c.mu.Unlock()
}

// bound returns the ready channel num, or replies unknown_channel and returns nil.
func (c *conn) bound(id json.RawMessage, num uint32) *channel {
	c.mu.Lock()
	ch := c.channels[num]
	c.mu.Unlock()
	if ch == nil || !ch.ready.Load() || ch.detached.Load() {
		c.replyErr(id, proto.ErrUnknownChannel(num))
		return nil
	}
	return ch
}

// boundWritable is bound for a request that a read-only principal may not make (what names it,
// in the forbidden error).
func (c *conn) boundWritable(id json.RawMessage, num uint32, what string) *channel {
	ch := c.bound(id, num)
	if ch != nil && c.opts.ReadOnly {
		c.replyErr(id, proto.ErrForbidden("read-only principal cannot "+what))
		return nil
	}
	return ch
}

// activate publishes a bound channel to the writer once its reply is queued, so no output
// frame can precede the reply. If the reply could not be queued, or the socket ended before the
// channel was published, the binding is undone: the viewer unsubscribes. For an attach
// (reattach true) it leaves a resume hold at the offset the client asked for, as a socket that
// ends under a bound channel does: the client may be reattaching over a flaky link.
func (c *conn) activate(ch *channel, queued, reattach bool) {
	if !queued {
		c.release(ch)
		closeViewer(ch, reattach)
		return
	}
	ch.active.Store(true)
	if ch.detached.Load() {
		closeViewer(ch, reattach)
		return
	}
	c.markReady(ch)
}
