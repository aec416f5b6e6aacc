package mux

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/trace"

	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// binding is what a channel is bound to: a viewer of a session this node runs (localBinding)
// or a relay to the node that owns the session (relayBinding). The reader, the writer and the
// handlers use a channel's binding only through these methods, so they treat both alike; what
// differs between the two is here. sizeChanged, errors, maxFrame, read and state run on the
// writer; ack and write on the read loop, and never block; the rest on any goroutine.
type binding interface {
	// session is the bound session's id.
	session() string
	// sizeChanged returns the session's size and its generation when the generation is not last
	// (the one the channel's client last learned); ok false: no change.
	sizeChanged(last uint64) (size session.Size, gen uint64, ok bool)
	// errors returns, and forgets, the errors about this channel to pass on to the client
	// without a request id (a relay's: input the owner refused).
	errors() []*proto.Error
	// maxFrame bounds the payload of the channel's next output frame.
	maxFrame() int
	// read copies up to len(p) bytes of output without waiting, of one stream; lost is the
	// bytes lost (session.gap) before them. session.ErrViewerClosed: the binding was closed.
	read(p []byte) (n int, lost int64, stream session.Stream, err error)
	// state is what is left to deliver, read after a read that returned nothing.
	state() bindingState
	// ack passes on n bytes the client acknowledged.
	ack(n int)
	// write writes input, or refuses all of it.
	write(p []byte) error
	resize(ctx context.Context, cols, rows int) (proto.ResizeResult, error)
	// signal sends the signal named name (one of proto.Signals).
	signal(ctx context.Context, name string) error
	closeStdin() error
	// wireError is the reply for an error of the methods above.
	wireError(err error) *proto.Error
	// do runs fn, a request's work on the binding, and ends span after it: inline for a local
	// binding, on a slow-request goroutine for a relayed one (it waits on the owner); refused
	// (limit_exceeded), it ends span at once.
	do(c *conn, id json.RawMessage, span trace.Span, fn func())
	// close unbinds. lost: the client did not leave on purpose and may come back, having
	// consumed all but unconfirmed of the bytes handed to it.
	close(lost bool, unconfirmed int64)
}

// bindingState is what a binding has left to deliver.
type bindingState struct {
	// pending: output is retained that read has not returned.
	pending bool
	// exit is the session's exit, to notify once nothing is pending; nil before, and for a
	// session killed or shut down (its session.closed tells).
	exit *proto.ExitInfo
	// closed is why the binding ended, once nothing is pending; "" while it goes on.
	closed session.Reason
}

// localBinding binds a channel to a viewer of a session of this node's registry.
type localBinding struct {
	s *session.Session
	v *session.Viewer
}

func newLocalBinding(v *session.Viewer) *localBinding {
	return &localBinding{s: v.Session(), v: v}
}

func (l *localBinding) session() string { return l.s.ID() }

func (l *localBinding) sizeChanged(last uint64) (session.Size, uint64, bool) {
	if l.s.SizeGen() == last { // an atomic: no session lock for the common case
		return session.Size{}, last, false
	}
	size, gen := l.s.Size()
	return size, gen, true
}

func (l *localBinding) errors() []*proto.Error { return nil }

func (l *localBinding) maxFrame() int {
	if l.s.Held() {
		return heldFrame // another session awaits an echo: small frames ahead of it
	}
	return proto.MaxOutputPayload
}

func (l *localBinding) read(p []byte) (int, int64, session.Stream, error) {
	return l.v.ReadStream(p)
}

func (l *localBinding) state() bindingState {
	st := l.v.State()
	out := bindingState{pending: st.Pending > 0}
	if st.Exit != nil && st.Closing != session.ReasonKilled && st.Closing != session.ReasonShutdown {
		out.exit = exitInfo(st.Exit)
	}
	if st.EOF {
		out.closed = st.Closing
	}
	return out
}

func (l *localBinding) ack(int) {}

func (l *localBinding) write(p []byte) error {
	_, err := l.v.Write(p)
	return err
}

func (l *localBinding) resize(_ context.Context, cols, rows int) (proto.ResizeResult, error) {
	size, err := l.v.Resize(cols, rows)
	if err != nil {
		return proto.ResizeResult{}, err
	}
	return proto.ResizeResult{Cols: size.Cols, Rows: size.Rows}, nil
}

func (l *localBinding) signal(_ context.Context, name string) error {
	return l.s.Signal(signals[name])
}

func (l *localBinding) closeStdin() error { return l.s.CloseStdin() }

func (l *localBinding) wireError(err error) *proto.Error { return sessionError(err, l.s.ID()) }

// do runs fn on the read loop: a local session answers without waiting.
func (l *localBinding) do(_ *conn, _ json.RawMessage, span trace.Span, fn func()) {
	defer span.End()
	fn()
}

// close unsubscribes the viewer. For a client that may come back (lost) the session holds its
// output from what the client acknowledged: the viewer's offset less unconfirmed.
func (l *localBinding) close(lost bool, unconfirmed int64) {
	if lost {
		l.v.CloseHolding(unconfirmed)
	} else {
		l.v.Close()
	}
}

// relayBinding binds a channel to a session another node owns, through a Relay (remote.go).
type relayBinding struct {
	r Relay
}

func (b relayBinding) session() string { return b.r.Session() }

// sizeChanged compares the count of session.size notifications the relay received.
func (b relayBinding) sizeChanged(last uint64) (session.Size, uint64, bool) {
	cols, rows, gen := b.r.Size()
	return session.Size{Cols: cols, Rows: rows}, gen, gen != last
}

func (b relayBinding) errors() []*proto.Error { return b.r.Errors() }

func (b relayBinding) maxFrame() int { return proto.MaxOutputPayload }

// read reads the relay's buffer: a relay carries no stderr frames (pipe sessions are not
// relayed).
func (b relayBinding) read(p []byte) (int, int64, session.Stream, error) {
	n, lost := b.r.Read(p)
	return n, lost, session.Stdout, nil
}

func (b relayBinding) state() bindingState {
	pending, exit, closed := b.r.State()
	return bindingState{pending: pending, exit: exit, closed: session.Reason(closed)}
}

// ack passes the client's ack on end to end: the owner learns what this client consumed.
func (b relayBinding) ack(n int) { b.r.Ack(n) }

func (b relayBinding) write(p []byte) error { return b.r.Write(p) }

func (b relayBinding) resize(ctx context.Context, cols, rows int) (proto.ResizeResult, error) {
	return b.r.Resize(ctx, cols, rows)
}

func (b relayBinding) signal(ctx context.Context, name string) error { return b.r.Signal(ctx, name) }

func (b relayBinding) closeStdin() error {
	return proto.ErrInvalidRequest("session.closeStdin is not relayed to another node")
}

func (b relayBinding) wireError(err error) *proto.Error { return remoteError(err, b.r.Session()) }

// do runs fn on a slow-request goroutine: the relay waits for the owner's answer.
func (b relayBinding) do(c *conn, id json.RawMessage, span trace.Span, fn func()) {
	c.slowSpan(id, span, fn)
}

// close ends the relay; the owner keeps its own resume hold when the relay's socket ends.
func (b relayBinding) close(lost bool, _ int64) { b.r.Close(!lost) }
