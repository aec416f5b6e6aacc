package mux

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// Socket is the part of a WebSocket connection the multiplexer uses; *websocket.Conn
// implements it. At most one goroutine reads (NextReader) and one writes (WriteMessage);
// WriteControl and Close may be called from any goroutine.
type Socket interface {
	NextReader() (messageType int, r io.Reader, err error)
	WriteMessage(messageType int, data []byte) error
	WriteControl(messageType int, data []byte, deadline time.Time) error
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
	SetPongHandler(h func(appData string) error)
	SetReadLimit(limit int64)
	Close() error
}

// ErrShutdown is the cancel cause that makes Serve tell every channel `session.closed
// {reason: shutdown}` and close the socket with 1001.
var ErrShutdown = errors.New("gateway shutting down")

// ErrRestart is the cancel cause of an upgrade in place: Serve sends the `gateway.restart`
// notification and closes the socket with 1012; the channels' sessions stay, held for resume
// (restart.go).
var ErrRestart = errors.New("gateway restarting")

// Defaults for ServerOptions.
const (
	DefaultWindow          = 256 << 10
	DefaultMaxChannels     = 64
	DefaultMaxSessions     = 64
	DefaultMaxMessageBytes = 64 << 10
	DefaultMaxInputBytes   = 64 << 10
	DefaultPongWait        = 60 * time.Second
	DefaultWriteWait       = 10 * time.Second

	hardReadLimit   = 16 << 20 // beyond this a message closes the socket (1009)
	maxQueuedCtrl   = 1024     // responses a client may leave unread before it is dropped
	maxPending      = 16       // concurrent slow requests (open, kill) per socket
	killTimeout     = 30 * time.Second
	firstMsgTimeout = 30 * time.Second
	closeGrace      = time.Second // wait for the client's close reply after our close frame
	// closeLinger bounds the drain of a socket after our close frame (lingerAfterClose).
	closeLinger = 5 * time.Second
)

// ServerOptions configure one multiplexed connection.
type ServerOptions struct {
	Registry  *session.Registry // required
	Principal string            // owner of the sessions this socket opens and sees
	// ReadOnly principals receive output; their input, resize, signal, open, kill and lease
	// are refused (forbidden).
	ReadOnly bool
	// AllowCmd decides whether session.open may run argv (non-empty). Nil: only the shell.
	AllowCmd func(argv []string) bool
	// Window is the per-channel credit in bytes. Default: 256 KiB.
	Window int
	// MaxChannels bounds channels per socket (default 64); MaxSessions bounds the principal's
	// sessions (default 64).
	MaxChannels, MaxSessions int
	// MaxSockets is the gateway's bound on one principal's sockets, only reported in
	// initialize's limits (the gateway enforces it before the upgrade); 0: not reported.
	MaxSockets int
	// MaxMessageBytes bounds text messages (default 64 KiB); MaxInputBytes bounds one input
	// frame's payload (default 64 KiB).
	MaxMessageBytes, MaxInputBytes int
	// InputRate bounds input bytes per second per session (key: session id); OpenRate bounds
	// session.open calls per second per principal (key: Principal). Both are shared by every
	// socket of a gateway; nil means unlimited. See limits.go.
	InputRate, OpenRate *RateLimiter
	// PongWait: a socket silent this long is closed (default 60s). Pings go out every 5/12 of it
	// (25 s at the default), so two are sent before a silent socket is given up.
	// WriteWait bounds each write (default 10s).
	PongWait, WriteWait time.Duration
	// Version is reported by initialize.
	Version string
	Logger  *slog.Logger
	// Telemetry receives spans and metrics. Default: otel.Noop().
	Telemetry *otel.Telemetry
	// Remote, in a cluster, serves the sessions other nodes own (list, attach through a relay,
	// kill, lease, placement of opens); nil: this node alone. Node is this node's name, given
	// in the list entries of its own sessions when Remote is set.
	Remote Remote
	Node   string

	// testHookAfterSubscribe runs in the read loop after an attach subscribed and before its
	// reply is queued.
	testHookAfterSubscribe func()
	// initWait bounds the time from the upgrade to a successful initialize (default
	// firstMsgTimeout); tests shorten it.
	initWait time.Duration
	// testHookBeforeActivate runs in an open's goroutine after its reply is queued and before
	// the channel is published to the writer.
	testHookBeforeActivate func()
	// testHookBeforeStarve runs in the writer after it found a channel's output waiting with no
	// credit and before it marks the channel starved: where an ack can slip in.
	testHookBeforeStarve func(*channel)
	// testHookAfterClosed runs in the writer right after it wrote a channel's session.closed.
	testHookAfterClosed func(*conn, *channel)
}

func (o ServerOptions) withDefaults() ServerOptions {
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.MaxChannels <= 0 {
		o.MaxChannels = DefaultMaxChannels
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.MaxInputBytes <= 0 {
		o.MaxInputBytes = DefaultMaxInputBytes
	}
	if o.PongWait <= 0 {
		o.PongWait = DefaultPongWait
	}
	if o.WriteWait <= 0 {
		o.WriteWait = DefaultWriteWait
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Telemetry == nil {
		o.Telemetry = otel.Noop()
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	return o
}

func (o ServerOptions) limits() proto.Limits {
	return proto.Limits{MaxMessageBytes: o.MaxMessageBytes, MaxInputBytes: o.MaxInputBytes,
		MaxChannels: o.MaxChannels, MaxSessions: o.MaxSessions, MaxCols: session.MaxCols,
		MaxRows: session.MaxRows, MaxOutputFrameBytes: proto.MaxOutputPayload,
		InputRate: int(o.InputRate.Rate()), InputBurst: int(o.InputRate.Burst()),
		OpenRate: o.OpenRate.Rate(), OpenBurst: int(o.OpenRate.Burst()),
		PendingRequests: maxPending, MaxUnreadResponses: maxQueuedCtrl,
		InputQueueBytes: session.InputQueueBytes, MaxWireMessageBytes: hardReadLimit,
		MaxSockets: o.MaxSockets}
}

// channel is one binding of a channel number to a session viewer on one socket.
type channel struct {
	id     uint32
	credit *credit

	// set once before ready is stored true; read only after ready.Load() (or active.Load()):
	sess *session.Session
	v    *session.Viewer
	// relay replaces sess and v for a channel bound to a session another node owns.
	relay Relay

	// ready: sess and v are set, so requests and input on the channel may use them. It is
	// stored before the open/attach reply is queued, so input a client sends once it has the
	// reply always finds the channel ready.
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

// conn is the multiplexer of one socket.
type conn struct {
	// immutable after Serve starts:
	ws     Socket
	opts   ServerOptions
	reg    *session.Registry
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelCauseFunc
	// wake tells writeLoop there is work (capacity 1; sends never block).
	wake       chan struct{}
	writerDone chan struct{}
	readDone   chan struct{} // closed when readLoop has returned
	pending    chan struct{} // semaphore for slow requests

	// mu guards channels, ctrl, closeAfter, closeWhy and lingerUntil. Nothing is taken under it, and it is
	// never taken with a session lock held (the viewer wake callbacks take only readyMu), so
	// never call into session or registry while holding mu.
	mu       sync.Mutex
	channels map[uint32]*channel
	ctrl     [][]byte // queued text messages, written ahead of data
	// closeAfter, when set, is the close frame the writer sends once ctrl is written, and
	// closeWhy the connection's end cause then.
	closeAfter []byte
	closeWhy   error
	// lingerUntil, once set by lingerAfterClose, is when the drain after our close frame ends.
	lingerUntil time.Time

	// readyMu guards ready, the channels that may have data, in round-robin order. It is taken
	// from viewer wake callbacks with a session.mu held; nothing else is taken under it.
	readyMu sync.Mutex
	ready   []*channel

	// wg counts slow-request goroutines.
	wg sync.WaitGroup

	tel *otel.Telemetry

	// owned by readLoop:
	initialized bool
}

// Serve runs the multiplexer over ws until the socket fails, the client leaves, or ctx ends.
// It returns after every goroutine it started has ended and every channel is detached; the
// sessions keep running. A ctx cancelled with cause ErrShutdown closes the socket with 1001
// after telling each channel `session.closed {reason: shutdown}`.
func Serve(ctx context.Context, ws Socket, opts ServerOptions) error {
	opts = opts.withDefaults()
	c := &conn{
		ws: ws, opts: opts, reg: opts.Registry, log: opts.Logger,
		wake: make(chan struct{}, 1), writerDone: make(chan struct{}), readDone: make(chan struct{}),
		pending: make(chan struct{}, maxPending), channels: make(map[uint32]*channel),
	}
	tel := opts.Telemetry
	// ws.connection lives as long as the socket; the gateway's HTTP tracing skips /ws.
	ctx, span := tel.Tracer.Start(ctx, otel.SpanWSConnection, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	tel.Instruments.Sockets.Add(ctx, 1)
	defer tel.Instruments.Sockets.Add(context.Background(), -1)
	c.tel = tel
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	if err := boundUnsent(ws); err != nil {
		c.log.Warn("socket: TCP_NOTSENT_LOWAT not set: replies may queue behind output on a slow link", "err", err)
	}
	go c.writeLoop()
	err := c.readLoop()
	close(c.readDone)
	c.cancel(err)
	if cause := context.Cause(c.ctx); errors.Is(cause, ErrShutdown) || errors.Is(cause, ErrRestart) {
		// Let the writer tell every channel and send 1001 (1012) before the socket goes.
		waitAtMost(c.writerDone, closeGrace+c.opts.WriteWait)
	}
	c.closeSocket() // unblocks a writer stuck in a write
	<-c.writerDone
	c.wg.Wait()
	c.detachAll()
	if cause := context.Cause(c.ctx); errors.Is(cause, ErrShutdown) || errors.Is(cause, ErrRestart) {
		return nil
	}
	if isNormalClose(err) {
		return nil
	}
	return err
}

func isNormalClose(err error) bool {
	return err == nil || websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway, websocket.CloseNoStatusReceived)
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

// unbind marks ch detached and closes its viewer (unsubscribe); lost says the client did not
// leave on purpose (see closeViewer). Never call with c.mu held.
func (c *conn) unbind(ch *channel, lost bool) {
	ch.detached.Store(true)
	if ch.active.Load() && (ch.v != nil || ch.relay != nil) {
		closeViewer(ch, lost)
	}
}

// sessionID is the bound session's id.
func (ch *channel) sessionID() string {
	if ch.relay != nil {
		return ch.relay.Session()
	}
	return ch.sess.ID()
}

// closeViewer unsubscribes ch's viewer. For a client that may come back (lost) the session holds
// its output from what the client acknowledged: the viewer's offset less the bytes in flight.
func closeViewer(ch *channel, lost bool) {
	if ch.relay != nil {
		ch.relay.Close(!lost) // the owner keeps its own resume hold when the relay's socket ends
		return
	}
	if lost {
		ch.v.CloseHolding(ch.credit.inflight.Load())
	} else {
		ch.v.Close()
	}
}

// markReady queues ch for the writer unless it is queued already. It never blocks and may be
// called with a session.mu held.
func (c *conn) markReady(ch *channel) {
	if !ch.queued.CompareAndSwap(false, true) {
		return
	}
	c.readyMu.Lock()
	c.ready = append(c.ready, ch)
	c.readyMu.Unlock()
	notify(c.wake)
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// send queues a text message for the writer. A client that lets maxQueuedCtrl messages pile
// up unread is dropped (1008). It reports whether the message was queued.
func (c *conn) send(msg []byte) bool {
	c.mu.Lock()
	if len(c.ctrl) >= maxQueuedCtrl {
		c.mu.Unlock()
		c.closeWith(websocket.ClosePolicyViolation, "too many responses left unread")
		return false
	}
	if c.ctx.Err() != nil {
		c.mu.Unlock()
		return false
	}
	c.ctrl = append(c.ctrl, msg)
	c.mu.Unlock()
	notify(c.wake)
	return true
}

func (c *conn) reply(id json.RawMessage, result any) bool {
	return c.send(proto.MarshalResponse(id, result, nil))
}

func (c *conn) replyErr(id json.RawMessage, e *proto.Error) bool {
	return c.send(proto.MarshalResponse(id, nil, e))
}

// closeAfterQueued has the writer send a close frame once every response queued so far is
// written, then close the socket; both loops then end. The reader reads on until then.
func (c *conn) closeAfterQueued(code int, text string) {
	c.mu.Lock()
	if c.closeAfter == nil {
		c.closeAfter = websocket.FormatCloseMessage(code, text)
		c.closeWhy = fmt.Errorf("closed with %d: %s", code, text)
	}
	c.mu.Unlock()
	notify(c.wake)
}

// closing reports whether closeAfterQueued decided the socket's close.
func (c *conn) closing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeAfter != nil
}

// closeWith sends a close frame and ends the socket at once (lingerAfterClose: no more is
// written, what the client sends is drained); both loops then end.
func (c *conn) closeWith(code int, text string) {
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text),
		time.Now().Add(c.opts.WriteWait))
	c.cancel(fmt.Errorf("closed with %d: %s", code, text))
	c.lingerAfterClose()
}

// lingerAfterClose follows a close frame of ours: it shuts down our side of the TCP connection
// (FIN after everything written so far; a writer stuck in a write fails at once) and bounds the
// reads to closeLinger from now. closeSocket then drains what the client still sends before it
// closes: closing a socket with unread input resets the connection, and a reset can discard the
// close frame and the responses before it at the client (it saw 1006 instead of 1008). For a
// socket that is not TCP it closes it.
func (c *conn) lingerAfterClose() {
	tc := tcpConn(c.ws)
	if tc == nil {
		c.ws.Close()
		return
	}
	c.mu.Lock()
	first := c.lingerUntil.IsZero()
	if first {
		c.lingerUntil = time.Now().Add(closeLinger)
	}
	until := c.lingerUntil
	c.mu.Unlock()
	if first {
		_ = tc.CloseWrite()
		_ = tc.SetReadDeadline(until)
	}
}

// readDeadline is the read deadline after a message or a pong: PongWait from now, but never
// past the linger that follows a close frame of ours, so a client that goes on sending after
// our close is let go when the linger ends (protocol.md §6), whatever it sends.
func (c *conn) readDeadline() time.Time {
	d := time.Now().Add(c.opts.PongWait)
	c.mu.Lock()
	until := c.lingerUntil
	c.mu.Unlock()
	if !until.IsZero() && until.Before(d) {
		return until
	}
	return d
}

// closeSocket closes the socket; after lingerAfterClose it first reads and discards what the
// client sends until it closes its side or the linger ends.
func (c *conn) closeSocket() {
	c.mu.Lock()
	until := c.lingerUntil
	c.mu.Unlock()
	if tc := tcpConn(c.ws); tc != nil && !until.IsZero() {
		_ = tc.SetReadDeadline(until) // the read loop moved it after each message
		_, _ = io.Copy(io.Discard, tc)
	}
	c.ws.Close()
}

// writeLoop is the only goroutine that writes messages to the socket. Each turn it writes
// every queued control message first, then serves the ready channels round-robin, one frame
// per channel per round, writing queued control messages ahead of every frame. A channel
// with output and no credit is marked starved and skipped, so it never delays another; an
// ack for it, or the writer's second look at its credit, re-queues it. It
// owns the ping ticker and sets a write deadline on every write. It ends when a write fails or
// the connection's context ends.
func (c *conn) writeLoop() {
	defer close(c.writerDone)
	ping := time.NewTicker(c.opts.PongWait * 5 / 12) // 25 s at the default; must be < PongWait
	defer ping.Stop()
	buf := make([]byte, proto.HeaderLen+proto.MaxOutputPayload)
	for {
		if err := c.flushControl(); err != nil {
			c.fail(err)
			return
		}
		progressed, err := c.serveRound(buf)
		if err != nil {
			c.fail(err)
			return
		}
		if progressed {
			continue
		}
		select {
		case <-c.wake:
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.opts.WriteWait)); err != nil {
				c.fail(fmt.Errorf("ping: %w", err))
				return
			}
		case <-c.ctx.Done():
			if cause := context.Cause(c.ctx); errors.Is(cause, ErrShutdown) || errors.Is(cause, ErrRestart) {
				if errors.Is(cause, ErrRestart) {
					c.restartFlush()
				} else {
					c.shutdownFlush()
				}
				// Give the client a moment to answer the close frame: closing with its acks
				// unread would reset the connection and could discard what we just sent.
				waitAtMost(c.readDone, closeGrace)
				c.ws.Close()
			}
			return
		}
	}
}

// waitAtMost waits until done is closed or d has passed.
func waitAtMost(done <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// fail ends the connection after a write error. After a close frame of ours the socket is
// lingering (its reads end by the linger's deadline) and Serve closes it.
func (c *conn) fail(err error) {
	c.cancel(err)
	c.mu.Lock()
	lingering := !c.lingerUntil.IsZero()
	c.mu.Unlock()
	if !lingering {
		c.ws.Close()
	}
}

// shutdownFlush tells every bound channel it is closed for shutdown, then closes with 1001.
func (c *conn) shutdownFlush() {
	c.mu.Lock()
	chs := make([]*channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chs = append(chs, ch)
	}
	c.mu.Unlock()
	slices.SortFunc(chs, func(a, b *channel) int { return int(int64(a.id) - int64(b.id)) })
	_ = c.flushControl()
	for _, ch := range chs {
		if ch.active.Load() && !ch.closedSent {
			ch.closedSent = true
			_ = c.write(websocket.TextMessage, closedNote(ch, session.ReasonShutdown))
		}
	}
	_ = c.ws.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseGoingAway, "gateway shutting down"),
		time.Now().Add(c.opts.WriteWait))
}

func (c *conn) write(typ int, b []byte) error {
	if err := c.ws.SetWriteDeadline(time.Now().Add(c.opts.WriteWait)); err != nil {
		return err
	}
	return c.ws.WriteMessage(typ, b)
}

// flushControl writes every queued control message, then the close frame closeAfterQueued
// asked for, if any (the loop then ends).
func (c *conn) flushControl() error {
	for {
		c.mu.Lock()
		msgs := c.ctrl
		c.ctrl = nil
		closing := c.closeAfter
		c.mu.Unlock()
		if len(msgs) == 0 && closing != nil {
			_ = c.ws.WriteControl(websocket.CloseMessage, closing, time.Now().Add(c.opts.WriteWait))
			c.lingerAfterClose()
			// Give the client a moment to read and answer: closing with its messages unread
			// would reset the connection and could discard the responses and the close frame.
			waitAtMost(c.readDone, closeGrace)
			c.mu.Lock()
			err := c.closeWhy
			c.mu.Unlock()
			return err
		}
		if len(msgs) == 0 {
			return nil
		}
		for _, m := range msgs {
			if err := c.write(websocket.TextMessage, m); err != nil {
				return fmt.Errorf("write control: %w", err)
			}
		}
	}
}

func (c *conn) ctrlPending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ctrl) > 0
}

// serveRound serves each channel that was ready at its start once.
func (c *conn) serveRound(buf []byte) (progressed bool, err error) {
	c.readyMu.Lock()
	round := c.ready
	c.ready = nil
	c.readyMu.Unlock()
	for _, ch := range round {
		ch.queued.Store(false)
		if c.ctrlPending() {
			if err := c.flushControl(); err != nil {
				return false, err
			}
		}
		wrote, err := c.serveChannel(ch, buf)
		if err != nil {
			return false, err
		}
		progressed = progressed || wrote
	}
	return progressed, nil
}

// serveChannel writes at most one output frame for ch, preceded by a gap notification if the
// viewer fell behind the ring, and followed by exit and closed notifications once the output
// they follow has been written.
func (c *conn) serveChannel(ch *channel, buf []byte) (bool, error) {
	if !ch.active.Load() || ch.detached.Load() || ch.closedSent {
		return false, nil
	}
	if ch.relay != nil {
		return c.serveRelay(ch, buf)
	}
	if ch.sess.SizeGen() != ch.sizeGen {
		// The applied size changed: a control message, never held back by credit.
		size, gen := ch.sess.Size()
		ch.sizeGen = gen
		if err := c.write(websocket.TextMessage, sizeNote(ch, size)); err != nil {
			return false, fmt.Errorf("write size: %w", err)
		}
	}
	// A read within no credit still moves a viewer that fell behind past its gap and tells
	// what is left: notifications are never held back by credit, only output is.
	n := int(min(max(ch.credit.available(), 0), proto.MaxOutputPayload))
	nr, lost, err := ch.v.Read(buf[proto.HeaderLen : proto.HeaderLen+n])
	if errors.Is(err, session.ErrViewerClosed) {
		return false, nil
	}
	// The viewer has moved past these bytes: count them in flight before any write can fail, so
	// a socket that ends here leaves its resume hold where the client will resume.
	ch.credit.take(int64(nr))
	if wrote, err := c.writeOutput(ch, buf, nr, lost); wrote || err != nil {
		return wrote, err
	}
	st := ch.v.State()
	if st.Pending > 0 {
		// Output waits for credit and the next ack re-queues the channel. starved is published
		// before the credit is looked at again, so an ack given in between is never missed:
		// either it sees starved, or this check sees its credit.
		if h := c.opts.testHookBeforeStarve; h != nil {
			h(ch)
		}
		ch.starved.Store(true)
		if ch.credit.available() > 0 && ch.starved.CompareAndSwap(true, false) {
			c.markReady(ch)
		}
		return lost > 0, nil
	}
	// Everything retained was delivered: the notifications that follow the output.
	if st.Exit != nil && !ch.exitSent {
		ch.exitSent = true
		if st.Closing != session.ReasonKilled && st.Closing != session.ReasonShutdown {
			if err := c.write(websocket.TextMessage, exitNote(ch, *st.Exit)); err != nil {
				return false, fmt.Errorf("write exit: %w", err)
			}
		}
	}
	if st.EOF && st.Closing != "" {
		ch.closedSent = true
		// The number is free before the client can learn it is: a client that reuses it the
		// instant session.closed arrives must not get channel_in_use.
		c.mu.Lock()
		if c.channels[ch.id] == ch {
			delete(c.channels, ch.id)
		}
		c.mu.Unlock()
		c.unbind(ch, false)
		if err := c.write(websocket.TextMessage, closedNote(ch, st.Closing)); err != nil {
			return false, fmt.Errorf("write closed: %w", err)
		}
		if h := c.opts.testHookAfterClosed; h != nil {
			h(c, ch)
		}
		return true, nil
	}
	return lost > 0, nil
}

// serveRelay is serveChannel for a relayed channel: the same credit, gap, exit and closed
// order, with the relay's buffer in place of the viewer.
func (c *conn) serveRelay(ch *channel, buf []byte) (bool, error) {
	if cols, rows, gen := ch.relay.Size(); gen != ch.sizeGen {
		ch.sizeGen = gen // the relay's count of the owner's session.size: a control message
		if err := c.write(websocket.TextMessage, sizeNote(ch, session.Size{Cols: cols, Rows: rows})); err != nil {
			return false, fmt.Errorf("write size: %w", err)
		}
	}
	for _, e := range ch.relay.Errors() {
		if err := c.write(websocket.TextMessage, proto.MarshalResponse(nullID, nil, withChannel(e, ch.id))); err != nil {
			return false, fmt.Errorf("write relayed error: %w", err)
		}
	}
	n := int(min(max(ch.credit.available(), 0), proto.MaxOutputPayload))
	nr, lost := ch.relay.Read(buf[proto.HeaderLen : proto.HeaderLen+n])
	ch.credit.take(int64(nr))
	if wrote, err := c.writeOutput(ch, buf, nr, lost); wrote || err != nil {
		return wrote, err
	}
	pending, exit, closed := ch.relay.State()
	if pending {
		ch.starved.Store(true) // as in serveChannel: published before the second look
		if ch.credit.available() > 0 && ch.starved.CompareAndSwap(true, false) {
			c.markReady(ch)
		}
		return lost > 0, nil
	}
	if exit != nil && !ch.exitSent {
		ch.exitSent = true
		if err := c.write(websocket.TextMessage, proto.MarshalNotification("session.exit", map[string]any{
			"channel": ch.id, "session": ch.sessionID(), "code": exit.Code, "signal": exit.Signal})); err != nil {
			return false, fmt.Errorf("write exit: %w", err)
		}
	}
	if closed != "" {
		ch.closedSent = true
		// The number is free before the client can learn it is (as in serveChannel).
		c.mu.Lock()
		if c.channels[ch.id] == ch {
			delete(c.channels, ch.id)
		}
		c.mu.Unlock()
		c.unbind(ch, false)
		if err := c.write(websocket.TextMessage, closedNote(ch, session.Reason(closed))); err != nil {
			return false, fmt.Errorf("write closed: %w", err)
		}
		return true, nil
	}
	return lost > 0, nil
}

func sizeNote(ch *channel, size session.Size) []byte {
	return proto.MarshalNotification("session.size", map[string]any{
		"channel": ch.id, "session": ch.sessionID(), "cols": size.Cols, "rows": size.Rows})
}

func exitNote(ch *channel, e session.ExitStatus) []byte {
	return proto.MarshalNotification("session.exit", map[string]any{
		"channel": ch.id, "session": ch.sessionID(), "code": e.Code, "signal": signalOrNil(e)})
}

// writeOutput writes what a channel's read gave: the gap notification for lost bytes, then the
// nr bytes already read into buf after the frame header. It reports whether it wrote a frame;
// the channel is then marked ready again, since there may be more.
func (c *conn) writeOutput(ch *channel, buf []byte, nr int, lost int64) (bool, error) {
	if lost > 0 {
		c.tel.Instruments.GapBytes.Add(c.ctx, lost)
		if err := c.write(websocket.TextMessage, proto.MarshalNotification("session.gap",
			map[string]any{"channel": ch.id, "lost": lost})); err != nil {
			return false, fmt.Errorf("write gap: %w", err)
		}
	}
	if nr == 0 {
		return false, nil
	}
	frame := proto.AppendFrame(buf[:0], proto.FrameOutput, ch.id, nil)
	frame = frame[:proto.HeaderLen+nr]
	if err := c.write(websocket.BinaryMessage, frame); err != nil {
		return false, fmt.Errorf("write output: %w", err)
	}
	c.markReady(ch)
	return true, nil
}

func closedNote(ch *channel, reason session.Reason) []byte {
	return proto.MarshalNotification("session.closed", map[string]any{
		"channel": ch.id, "session": ch.sessionID(), "reason": string(reason)})
}

func signalOrNil(e session.ExitStatus) any {
	if n := e.SignalName(); n != "" {
		return n
	}
	return nil
}

// readLoop is the only goroutine that reads from the socket. It bounds every message, pushes
// the read deadline on every message and pong, and dispatches: fast requests inline, slow ones
// (open, kill) on their own goroutines so that no request delays acks or input of other
// channels. It returns the error that ended the connection.
func (c *conn) readLoop() error {
	c.ws.SetReadLimit(hardReadLimit)
	// Until initialize succeeds the deadline stays where it was set at the start: neither a pong
	// (a browser answers pings by itself) nor a failed initialize may keep an uninitialized
	// socket open.
	initWait := c.opts.initWait
	if initWait <= 0 {
		initWait = firstMsgTimeout
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(min(c.opts.PongWait, initWait)))
	c.ws.SetPongHandler(func(string) error {
		if !c.initialized { // the handler runs in this goroutine, inside NextReader
			return nil
		}
		return c.ws.SetReadDeadline(c.readDeadline())
	})
	var msg bytes.Buffer
	for {
		typ, r, err := c.ws.NextReader()
		if err != nil {
			if c.ctx.Err() != nil {
				return context.Cause(c.ctx) // why we closed it, rather than the read that failed
			}
			return err
		}
		if c.initialized {
			_ = c.ws.SetReadDeadline(c.readDeadline())
		}
		limit := c.opts.MaxMessageBytes
		if typ == websocket.BinaryMessage {
			limit = proto.HeaderLen + c.opts.MaxInputBytes
		}
		msg.Reset()
		if _, err := msg.ReadFrom(io.LimitReader(r, int64(limit)+1)); err != nil {
			return err
		}
		over := msg.Len() > limit
		if over {
			if _, err := io.Copy(io.Discard, r); err != nil {
				return err
			}
		}
		if typ == websocket.TextMessage && !over && !utf8.Valid(msg.Bytes()) {
			// RFC 6455 §8.1: a text message that is not UTF-8 fails the connection (1007). It
			// is never parsed, so no part of it (an id, a method) can be echoed back in a text
			// frame that would not be UTF-8 either.
			c.closeAfterQueued(websocket.CloseInvalidFramePayloadData, "text message is not valid UTF-8")
			continue
		}
		if !c.initialized {
			c.handleFirst(typ, msg.Bytes(), over)
			continue
		}
		if c.closing() {
			continue // the close is decided: nothing behind it starts work
		}
		switch {
		case typ == websocket.TextMessage && over:
			c.replyErr(nullID, proto.ErrLimitExceeded("maxMessageBytes",
				fmt.Sprintf("message larger than %d bytes", c.opts.MaxMessageBytes)))
		case typ == websocket.TextMessage:
			c.handleText(msg.Bytes())
		case over:
			e := proto.ErrLimitExceeded("maxInputBytes",
				fmt.Sprintf("input frame payload larger than %d bytes; nothing was written", c.opts.MaxInputBytes))
			if f, err := proto.ParseFrame(msg.Bytes()[:proto.HeaderLen]); err == nil {
				e = withChannel(e, f.Channel)
			}
			c.replyErr(nullID, e)
		default:
			c.handleBinary(msg.Bytes())
		}
		if c.ctx.Err() != nil {
			return context.Cause(c.ctx)
		}
	}
}

var nullID = json.RawMessage("null")

// handleFirst accepts only initialize. Once the socket is closing for a message that was not,
// it ignores whatever follows: the close is decided, and nothing behind it may start work.
func (c *conn) handleFirst(typ int, b []byte, over bool) {
	if c.closing() {
		return
	}
	// The close waits for responses already queued: an initialize that failed, then a request
	// pipelined behind it, still gets the initialize's error before the close.
	const why = "initialize must be the first request"
	if typ != websocket.TextMessage || over {
		c.closeAfterQueued(websocket.ClosePolicyViolation, why)
		return
	}
	req, perr := proto.ParseRequest(b)
	if perr != nil || req.Method != "initialize" || req.IsNotification() {
		c.closeAfterQueued(websocket.ClosePolicyViolation, why)
		return
	}
	if _, e := proto.DecodeInitialize(req.Params); e != nil {
		c.replyErr(req.ID, e)
		return
	}
	c.initialized = true
	c.reply(req.ID, proto.InitializeResult{
		Server:   proto.ServerInfo{Name: "muxterm", Version: c.opts.Version},
		Protocol: proto.Subprotocol,
		Limits:   c.opts.limits(),
		Flow: proto.Flow{Window: c.opts.Window, AckBytes: ackBytes(c.opts.Window),
			ResumeHoldMs: c.resumeHoldMs()},
	})
}

func ackBytes(window int) int { return max(window/4, 1) }

func (c *conn) handleText(b []byte) {
	req, perr := proto.ParseRequest(b)
	if perr != nil {
		id := nullID
		if req != nil && len(req.ID) > 0 {
			id = req.ID
		}
		c.replyErr(id, perr)
		return
	}
	if req.IsNotification() {
		return // JSON-RPC: notifications get no reply; we define none from clients
	}
	switch req.Method {
	case "initialize":
		c.replyErr(req.ID, proto.ErrInvalidRequest("initialize was already called"))
	case "session.open":
		c.handleOpen(req)
	case "session.attach":
		c.handleAttach(req)
	case "session.detach":
		c.handleDetach(req)
	case "session.resize":
		c.handleResize(req)
	case "session.signal":
		c.handleSignal(req)
	case "session.kill":
		c.handleKill(req)
	case "session.list":
		c.handleList(req)
	case "session.lease":
		c.handleLease(req)
	default:
		c.replyErr(req.ID, proto.ErrMethodNotFound(req.Method))
	}
}

// reserve claims a free channel number, or replies with an error and returns nil.
func (c *conn) reserve(id json.RawMessage, num uint32) *channel {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, busy := c.channels[num]; busy {
		c.send0(proto.MarshalResponse(id, nil, proto.ErrChannelInUse(num)))
		return nil
	}
	if len(c.channels) >= c.opts.MaxChannels {
		c.send0(proto.MarshalResponse(id, nil, proto.ErrLimitExceeded("maxChannels",
			fmt.Sprintf("at most %d channels per socket", c.opts.MaxChannels))))
		return nil
	}
	ch := &channel{id: num, credit: newCredit(int64(c.opts.Window))}
	c.channels[num] = ch
	return ch
}

// send0 is send for a caller that holds c.mu: it queues msg unless maxQueuedCtrl messages wait
// already, in which case it drops msg instead of closing the socket (closing takes c.mu). It
// skips send's check of the connection's context: a message queued after the end is never
// written, which is harmless.
func (c *conn) send0(msg []byte) {
	if len(c.ctrl) < maxQueuedCtrl {
		c.ctrl = append(c.ctrl, msg)
		notify(c.wake)
	}
}

// release forgets a reservation that never became active.
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

// resumeHoldMs is what initialize reports as flow.resumeHoldMs: a read-only principal's channels
// are passive and never leave a hold.
func (c *conn) resumeHoldMs() int64 {
	if c.opts.ReadOnly {
		return 0
	}
	return c.reg.Options().ResumeHold.Milliseconds()
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

// slow runs fn on its own goroutine, at most maxPending at once per socket; beyond that it
// replies limit_exceeded and returns false.
func (c *conn) slow(id json.RawMessage, fn func()) bool {
	select {
	case c.pending <- struct{}{}:
	default:
		c.replyErr(id, proto.ErrLimitExceeded("pendingRequests",
			fmt.Sprintf("at most %d opens, kills and relayed requests in flight per socket", maxPending)))
		return false
	}
	c.wg.Go(func() {
		defer func() { <-c.pending }()
		fn()
	})
	return true
}

func (c *conn) handleOpen(req *proto.Request) {
	p, e := proto.DecodeOpen(req.Params, c.opts.limits())
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	if c.opts.ReadOnly {
		c.replyErr(req.ID, proto.ErrForbidden("read-only principal cannot open sessions"))
		return
	}
	if len(p.Cmd) > 0 && (c.opts.AllowCmd == nil || !c.opts.AllowCmd(p.Cmd)) {
		c.replyErr(req.ID, proto.ErrForbidden(fmt.Sprintf("command %q is not allowed", p.Cmd[0])))
		return
	}
	if !c.opts.OpenRate.Allow(c.opts.Principal, 1) {
		c.replyErr(req.ID, errOpenRate(c.opts.OpenRate))
		return
	}
	ch := c.reserve(req.ID, p.Channel)
	if ch == nil {
		return
	}
	env := make([]string, 0, len(p.Env))
	for k, v := range p.Env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	spec := session.Spec{Argv: p.Cmd, Dir: p.Cwd, Env: env, Cols: p.Cols, Rows: p.Rows,
		Name: p.Name, Owner: c.opts.Principal}
	started := c.slow(req.ID, func() {
		_, span := c.startSpan(otel.SpanSessionOpen, "session.open", p.Meta, ch.id)
		defer span.End()
		spec.Trace = span.SpanContext()
		if c.opts.Remote != nil && c.openRemote(req, &p, ch) {
			return
		}
		s, v, err := c.reg.Open(spec, c.opts.MaxSessions, func() { c.markReady(ch) })
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			c.release(ch)
			c.replyErr(req.ID, sessionError(err, ""))
			return
		}
		span.SetAttributes(attribute.String(otel.AttrSessionID, s.ID()), semconv.ProcessPID(s.Pid()))
		ch.sess, ch.v = s, v
		_, ch.sizeGen = s.Size() // the opener's own size, which it knows
		ch.ready.Store(true)
		queued := c.reply(req.ID, proto.OpenResult{Session: s.ID(), Channel: ch.id, Pid: s.Pid()})
		if h := c.opts.testHookBeforeActivate; h != nil {
			h()
		}
		c.activate(ch, queued, false)
	})
	if !started {
		c.release(ch) // refused: the channel number is free again
	}
}

func (c *conn) handleAttach(req *proto.Request) {
	p, e := proto.DecodeAttach(req.Params, c.opts.limits())
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	ch := c.reserve(req.ID, p.Channel)
	if ch == nil {
		return
	}
	from := int64(-1)
	if p.From != nil {
		from = *p.From
	}
	_, span := c.startSpan(otel.SpanSessionAttach, "session.attach", p.Meta, ch.id)
	defer span.End()
	span.SetAttributes(attribute.String(otel.AttrSessionID, p.Session))
	attach := c.reg.Attach
	if c.opts.ReadOnly {
		attach = c.reg.AttachPassive // a read-only viewer never holds the owner's program back
	}
	v, info, err := attach(p.Session, c.opts.Principal, from, func() { c.markReady(ch) })
	if errors.Is(err, session.ErrUnknownSession) && c.opts.Remote != nil {
		// Perhaps another node's: the relay dials it, off the read loop.
		if !c.slow(req.ID, func() { c.attachRemote(req, &p, ch) }) {
			c.release(ch)
		}
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		c.release(ch)
		c.replyErr(req.ID, sessionError(err, p.Session))
		return
	}
	ch.sess, ch.v = v.Session(), v
	if p.Cols > 0 && !c.opts.ReadOnly {
		// The viewer's own size counts for the window-size policy; a read-only viewer's is
		// ignored. A failure is the session closing, which the viewer learns from its binding.
		_, _ = v.Resize(p.Cols, p.Rows)
	}
	size, gen := ch.sess.Size()
	ch.sizeGen = gen
	ch.ready.Store(true)
	if h := c.opts.testHookAfterSubscribe; h != nil {
		h()
	}
	in := ch.sess.Info()
	// Live is where the attach took effect: bytes below it were in the ring then (printed
	// before the attach), every later byte was read from the PTY after it.
	queued := c.reply(req.ID, proto.AttachResult{Session: ch.sess.ID(), Channel: ch.id,
		Offset: info.Offset, Live: info.End, Lost: info.Lost, End: info.End, Pid: in.Pid,
		Cols: size.Cols, Rows: size.Rows, Exit: exitInfo(in.Exit)})
	c.activate(ch, queued, true)
}

func (c *conn) handleDetach(req *proto.Request) {
	p, e := proto.DecodeDetach(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	ch := c.bound(req.ID, p.Channel)
	if ch == nil {
		return
	}
	_, span := c.startSpan(otel.SpanSessionDetach, "session.detach", p.Meta, ch.id)
	defer span.End()
	span.SetAttributes(attribute.String(otel.AttrSessionID, ch.sessionID()))
	c.release(ch)
	c.unbind(ch, false)
	c.reply(req.ID, proto.DetachResult{Session: ch.sessionID(), Channel: ch.id})
}

func (c *conn) handleResize(req *proto.Request) {
	p, e := proto.DecodeResize(req.Params, c.opts.limits())
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	ch := c.bound(req.ID, p.Channel)
	if ch == nil {
		return
	}
	if c.opts.ReadOnly {
		c.replyErr(req.ID, proto.ErrForbidden("read-only principal cannot resize"))
		return
	}
	if ch.relay != nil {
		c.slow(req.ID, func() {
			res, err := ch.relay.Resize(c.ctx, p.Cols, p.Rows)
			if err != nil {
				c.replyErr(req.ID, remoteError(err, ch.sessionID()))
				return
			}
			c.reply(req.ID, res)
		})
		return
	}
	size, err := ch.v.Resize(p.Cols, p.Rows)
	if err != nil {
		c.replyErr(req.ID, sessionError(err, ch.sess.ID()))
		return
	}
	c.reply(req.ID, proto.ResizeResult{Cols: size.Cols, Rows: size.Rows})
}

func (c *conn) handleSignal(req *proto.Request) {
	p, name, e := proto.DecodeSignal(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	sig := signals[name]
	ch := c.bound(req.ID, p.Channel)
	if ch == nil {
		return
	}
	if c.opts.ReadOnly {
		c.replyErr(req.ID, proto.ErrForbidden("read-only principal cannot signal"))
		return
	}
	if ch.relay != nil {
		c.slow(req.ID, func() {
			if err := ch.relay.Signal(c.ctx, name); err != nil {
				c.replyErr(req.ID, remoteError(err, ch.sessionID()))
				return
			}
			c.reply(req.ID, struct{}{})
		})
		return
	}
	if err := ch.sess.Signal(sig); err != nil {
		c.replyErr(req.ID, sessionError(err, ch.sess.ID()))
		return
	}
	c.reply(req.ID, struct{}{})
}

func (c *conn) handleKill(req *proto.Request) {
	p, e := proto.DecodeKill(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	if c.opts.ReadOnly {
		c.replyErr(req.ID, proto.ErrForbidden("read-only principal cannot kill"))
		return
	}
	c.slow(req.ID, func() {
		// The kill finishes even if the socket goes away meanwhile.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.parentCtx(p.Meta)), killTimeout)
		defer cancel()
		res, err := c.reg.Kill(ctx, p.Session, c.opts.Principal)
		if errors.Is(err, session.ErrUnknownSession) && c.opts.Remote != nil {
			rres, rerr := c.opts.Remote.Kill(ctx, c.opts.Principal, p.Session)
			if rerr != nil {
				c.replyErr(req.ID, remoteError(rerr, p.Session))
				return
			}
			c.reply(req.ID, rres)
			return
		}
		if err != nil {
			c.replyErr(req.ID, sessionError(err, p.Session))
			return
		}
		c.reply(req.ID, killResult(p.Session, res))
	})
}

func (c *conn) handleList(req *proto.Request) {
	if _, e := proto.DecodeList(req.Params); e != nil {
		c.replyErr(req.ID, e)
		return
	}
	infos := c.reg.List(c.opts.Principal)
	out := proto.ListResult{Sessions: make([]proto.SessionInfo, 0, len(infos))}
	for _, in := range infos {
		si := sessionInfo(in)
		if c.opts.Remote != nil {
			si.Node = c.opts.Node
		}
		out.Sessions = append(out.Sessions, si)
	}
	if c.opts.Remote != nil {
		out.Sessions = append(out.Sessions, c.opts.Remote.List(c.opts.Principal)...)
	}
	c.reply(req.ID, out)
}

func (c *conn) handleLease(req *proto.Request) {
	p, e := proto.DecodeLease(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	if c.opts.ReadOnly {
		c.replyErr(req.ID, proto.ErrForbidden("read-only principal cannot lease"))
		return
	}
	until, err := c.reg.Lease(p.Session, c.opts.Principal, time.Duration(p.TTLMs)*time.Millisecond)
	if errors.Is(err, session.ErrUnknownSession) && c.opts.Remote != nil {
		c.slow(req.ID, func() {
			res, err := c.opts.Remote.Lease(c.ctx, c.opts.Principal, p.Session, p.TTLMs)
			if err != nil {
				c.replyErr(req.ID, remoteError(err, p.Session))
				return
			}
			c.reply(req.ID, res)
		})
		return
	}
	if err != nil {
		c.replyErr(req.ID, sessionError(err, p.Session))
		return
	}
	c.reply(req.ID, proto.LeaseResult{Session: p.Session, Until: until.UTC().Format(time.RFC3339Nano)})
}

// handleBinary handles input and ack frames.
func (c *conn) handleBinary(b []byte) {
	f, err := proto.ParseFrame(b)
	if err != nil {
		c.replyErr(nullID, c.onKnownChannel(proto.ErrBadFrame(err.Error()), b))
		return
	}
	if f.Type == proto.FrameOutput {
		c.replyErr(nullID, c.onKnownChannel(proto.ErrBadFrame("output frames go from server to client"), b))
		return
	}
	c.mu.Lock()
	ch := c.channels[f.Channel]
	c.mu.Unlock()
	if ch == nil || !ch.ready.Load() || ch.detached.Load() {
		c.replyErr(nullID, proto.ErrUnknownChannel(f.Channel))
		return
	}
	switch f.Type {
	case proto.FrameAck:
		if err := ch.credit.give(int64(f.AckCount())); err != nil {
			c.replyErr(nullID, withChannel(proto.ErrBadFrame(fmt.Sprintf("channel %d: %v", f.Channel, err)), f.Channel))
			return
		}
		if ch.relay != nil {
			ch.relay.Ack(int(f.AckCount())) // end to end: the owner learns what this client consumed
		}
		if ch.starved.Swap(false) {
			c.markReady(ch)
		}
	case proto.FrameInput:
		if c.opts.ReadOnly {
			c.replyErr(nullID, withChannel(proto.ErrForbidden("read-only principal: input dropped"), f.Channel))
			return
		}
		if !c.opts.InputRate.Allow(ch.sessionID(), float64(len(f.Payload))) {
			c.replyErr(nullID, withChannel(errInputRate(c.opts.InputRate), f.Channel))
			return
		}
		c.tel.Instruments.BytesIn.Add(c.ctx, int64(len(f.Payload)))
		if ch.relay != nil {
			if err := ch.relay.Write(f.Payload); err != nil {
				c.replyErr(nullID, withChannel(remoteError(err, ch.sessionID()), f.Channel))
			}
			return
		}
		if _, err := ch.v.Write(f.Payload); err != nil {
			// sessionError builds a new *Error, which is not shared yet: adding to its Data here
			// is part of building it (withChannel copies, for errors that may be shared).
			e := sessionError(err, ch.sess.ID())
			if e.Data == nil {
				e.Data = map[string]any{}
			}
			e.Data["channel"] = f.Channel
			c.replyErr(nullID, e)
		}
	}
}

// onKnownChannel adds data.channel to e, an error about frame b, when b's header is whole and
// names a channel bound on this socket (protocol.md §2: every error about a frame of a known
// channel carries it), so an unknown type or a malformed ack is still tied to its channel.
func (c *conn) onKnownChannel(e *proto.Error, b []byte) *proto.Error {
	if len(b) < proto.HeaderLen {
		return e
	}
	num := binary.BigEndian.Uint32(b[1:proto.HeaderLen])
	c.mu.Lock()
	ch := c.channels[num]
	c.mu.Unlock()
	if num == 0 || ch == nil || !ch.ready.Load() {
		return e
	}
	return withChannel(e, num)
}

// sessionError maps session errors to protocol errors.
func sessionError(err error, id string) *proto.Error {
	var ce *session.ClosedError
	switch {
	case errors.As(err, &ce):
		return proto.ErrSessionClosed(ce.ID, string(ce.Reason))
	case errors.Is(err, session.ErrUnknownSession):
		return proto.ErrUnknownSession(id)
	case errors.Is(err, session.ErrInputFull):
		return proto.ErrLimitExceeded("inputQueue", "the program has not read its pending input; nothing was written")
	case errors.Is(err, session.ErrTooMany):
		return proto.ErrLimitExceeded("maxSessions", err.Error())
	case errors.Is(err, session.ErrBadOffset):
		return proto.ErrInvalidParams("from", err.Error())
	case errors.Is(err, session.ErrBadSize):
		return proto.ErrInvalidParams("cols", err.Error())
	case errors.Is(err, session.ErrShuttingDown):
		return proto.ErrSessionClosed(id, string(session.ReasonShutdown))
	case errors.Is(err, session.ErrSpawn):
		return proto.ErrSpawnFailed(err.Error())
	}
	return proto.ErrInternal(err.Error())
}

// parentCtx is the context a request's spans descend from: the client's W3C trace context
// from params._meta when it sent one, else the socket's ws.connection span.
func (c *conn) parentCtx(m *proto.Meta) context.Context {
	if m == nil || m.Traceparent == "" {
		return c.ctx
	}
	carrier := propagation.MapCarrier{"traceparent": m.Traceparent}
	if m.Tracestate != "" {
		carrier["tracestate"] = m.Tracestate
	}
	ctx := propagation.TraceContext{}.Extract(c.ctx, carrier)
	if !trace.SpanContextFromContext(ctx).IsRemote() {
		return c.ctx // malformed traceparent: ignored
	}
	return ctx
}

// startSpan starts a request span under parentCtx.
func (c *conn) startSpan(name, method string, m *proto.Meta, ch uint32) (context.Context, trace.Span) {
	return c.tel.Tracer.Start(c.parentCtx(m), name, trace.WithAttributes(
		semconv.RPCMethod(method), attribute.Int64(otel.AttrChannel, int64(ch))))
}
