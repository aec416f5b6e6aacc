package mux

import (
	"context"
	"errors"
	"time"

	"github.com/muxterm/muxterm/proto"
)

// ErrNotRemote is what a Remote returns for a session no other node owns: the request then
// gets the error a single node gives.
var ErrNotRemote = errors.New("no other node owns the session")

// Remote is the rest of a cluster: the sessions other gateway nodes own (package cluster
// implements it). ServerOptions.Remote nil is one node alone. Every method may block on the
// network: the multiplexer calls them off its read loop. An error that is a *proto.Error is
// replied as is (the owner's own error, e.g. unknown_session for another principal).
type Remote interface {
	// List returns principal's sessions on other nodes, each with its Node.
	List(principal string) []proto.SessionInfo
	// Attach binds a relay to session p.Session on its owner, on behalf of principal (a
	// read-only one attaches passively there), replaying from p.From. notify is called, never
	// blocking, whenever the relay has something new for Read or State.
	Attach(ctx context.Context, principal string, readOnly bool, p proto.AttachParams, notify func()) (Relay, proto.AttachResult, error)
	// Open opens a session on another node when placement sends it there; ok false: open it
	// here.
	Open(ctx context.Context, principal string, p proto.OpenParams, notify func()) (r Relay, res proto.OpenResult, ok bool, err error)
	// Kill, Lease and Capture act on the owner, on behalf of principal.
	Kill(ctx context.Context, principal, id string) (proto.KillResult, error)
	Lease(ctx context.Context, principal, id string, ttlMs int64) (proto.LeaseResult, error)
	// Published returns once the other nodes can learn of this node's sessions queued so far
	// (the cluster: their announcements reached NATS; later ones may be out too), or when ctx
	// ends, with its error; an open's result waits for it.
	Published(ctx context.Context) error
	// Capture reads the screen there, for a read-only principal as one.
	Capture(ctx context.Context, principal string, readOnly bool, p proto.CaptureParams) (proto.CaptureResult, error)
	// Recordings lists the recordings of the rest of the cluster that principal may see (every
	// one for an admin): those stored for the cluster and those being written on other live
	// nodes; only session's when session is not "". recording.list merges them with the local
	// ones.
	Recordings(ctx context.Context, principal string, admin bool, session string) ([]proto.RecordingInfo, error)
	// ReadRecording reads a recording this node's directory does not hold, for principal (any
	// for an admin): relayed to its owner while it is being written, else from the cluster's
	// store. ErrNotRemote: no such recording, or another principal's.
	ReadRecording(ctx context.Context, principal string, admin bool, p proto.RecordingReadParams) (proto.RecordingReadResult, error)
}

// Relay is one channel relayed to the node that owns its session. Read, State and Ack are
// called by one goroutine at a time each; the rest from any.
type Relay interface {
	// Session is the session's id.
	Session() string
	// Read copies up to len(p) bytes of output without waiting; lost is the bytes announced
	// lost (session.gap) before them.
	Read(p []byte) (n int, lost int64)
	// State: output is buffered (pending), the exit once it arrived, and the reason the
	// binding closed ("" while bound; "node_lost" when the owner went away).
	State() (pending bool, exit *proto.ExitInfo, closed string)
	// Size is the session's size from the owner's latest session.size, and how many the relay
	// received (0: none since the attach).
	Size() (cols, rows int, changes uint64)
	// Ack passes on n bytes the client acknowledged. Ack and Write run on the client socket's
	// read loop and never block on the owner (invariant 4): they queue, and the relay writes
	// upstream on its own goroutine.
	Ack(n int)
	// Errors returns, and forgets, the errors the owner sent about this channel without a
	// request id (input refused: a full input queue, a rate limit); they are passed on to the
	// client with this socket's channel number.
	Errors() []*proto.Error
	// Write sends input, or refuses all of it with a *proto.Error: limit_exceeded inputQueue
	// when the input the owner has not taken yet would pass the bound a session's own input
	// queue has, session_closed when the binding ended.
	Write(p []byte) error
	Resize(ctx context.Context, cols, rows int) (proto.ResizeResult, error)
	Signal(ctx context.Context, sig string) error
	// Close ends the relay: with detach the owner's viewer is detached, else the owner's
	// socket just ends (it keeps a resume hold, as for any lost socket).
	Close(detach bool)
}

// publishWait bounds how long session.open's result waits for Remote.Published.
const publishWait = 2 * time.Second

// remoteError maps a Remote's error to the reply.
func remoteError(err error, id string) *proto.Error {
	var pe *proto.Error
	switch {
	case errors.As(err, &pe):
		return pe
	case errors.Is(err, ErrNotRemote):
		return proto.ErrUnknownSession(id)
	}
	return proto.ErrInternal(err.Error())
}

// attachRemote binds ch to a session another node owns, through a relay. It runs on a
// slow-request goroutine (the relay dials the owner): the local registry did not know the id.
// ctx carries the attach's span, whose trace context the relay passes on.
func (c *conn) attachRemote(ctx context.Context, req *proto.Request, p *proto.AttachParams, ch *channel) {
	r, res, err := c.opts.Remote.Attach(ctx, c.opts.Principal, c.opts.ReadOnly, *p, func() { c.markReady(ch) })
	if err != nil {
		c.release(ch)
		c.replyErr(req.ID, remoteError(err, p.Session))
		return
	}
	ch.b = relayBinding{r}
	ch.ready.Store(true)
	res.Channel = ch.id
	c.activate(ch, c.reply(req.ID, res), true)
}

// openRemote opens the session on the node placement chose, if not this one; false: open it
// here. It runs on the open's slow-request goroutine; ctx carries the open's span, whose trace
// context the relay passes on.
func (c *conn) openRemote(ctx context.Context, req *proto.Request, p *proto.OpenParams, ch *channel) bool {
	r, res, ok, err := c.opts.Remote.Open(ctx, c.opts.Principal, *p, func() { c.markReady(ch) })
	if !ok {
		return false
	}
	if err != nil {
		c.release(ch)
		c.replyErr(req.ID, remoteError(err, ""))
		return true
	}
	ch.b = relayBinding{r}
	ch.ready.Store(true)
	res.Channel = ch.id
	c.activate(ch, c.reply(req.ID, res), false)
	return true
}
