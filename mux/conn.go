package mux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"go.opentelemetry.io/otel/attribute"
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

// ErrRevoked is the cancel cause of a socket whose share link was revoked or expired: Serve
// closes it with 4003 and the reason (protocol.md §4, "Share links").
var ErrRevoked = errors.New("share link revoked or expired")

// CloseRevoked is the close code of a socket whose share link ended.
const CloseRevoked = 4003

// Shares serves the share.* methods for a read-write principal (the gateway's share links).
type Shares interface {
	Create(owner string, p proto.ShareCreateParams) (proto.ShareInfo, *proto.Error)
	List(owner, session string) (proto.ShareListResult, *proto.Error)
	Revoke(owner, share string) (proto.ShareRevokeResult, *proto.Error)
}

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
	maxPending      = 16       // concurrent slow requests (those that may wait: doc.go) per socket
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
	// Admin principals may list and read every principal's recordings.
	Admin bool
	// Session, when set, confines the socket to that one session (a share link's): session.list
	// shows only it, attaching or capturing another is unknown_session, and session.open,
	// session.kill, session.lease and share.* are refused (forbidden).
	Session string
	// Shares serves share.create, share.list and share.revoke; nil: they are refused.
	Shares Shares
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
	// Closing, if set, is called once, on the goroutine that decides it, when the server decides
	// to close the socket for the client's fault (1007, 1008), before the close frame is
	// written; the close and up to closeLinger of draining the client follow, and Serve
	// returns after them. The gateway stops counting the socket against the principal's
	// --max-sockets there.
	Closing func()
	// Remote, in a cluster, serves the sessions other nodes own (list, attach through a relay,
	// kill, lease, placement of opens); nil: this node alone. Node is this node's name, given
	// in the list entries of its own sessions when Remote is set.
	Remote Remote
	Node   string
	// RelayLease, for a relay's socket that asked for it (proto.HeaderRelayLease), is the
	// lease its input is taken under (lease.go, docs/protocol.md §1 "At most once"); 0: none.
	// Within MinRelayLease … MaxRelayLease.
	RelayLease time.Duration

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
	// testHookOutputFrame runs in the writer right after it wrote an output frame of n bytes.
	testHookOutputFrame func(ch *channel, n int)
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

	// mu guards channels, ctrl, refusals, closeAfter, closeWhy and lingerUntil. Nothing is taken under it, and it is
	// never taken with a session lock held (the viewer wake callbacks take only readyMu), so
	// never call into session or registry while holding mu.
	mu       sync.Mutex
	channels map[uint32]*channel
	ctrl     []ctrlMsg // queued text messages, written ahead of data
	// refusals maps each kind of frame refusal that waits in ctrl to its message, so that the
	// next refusal of that kind joins it (refuse.go); emptied when the writer takes ctrl.
	refusals map[refusalKey]*refusal
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
	// closingOnce runs opts.Closing once.
	closingOnce sync.Once

	tel *otel.Telemetry
	// lease, for a relay's socket that asked for one, fences what it sends (lease.go); nil
	// otherwise. Set before the loops start.
	lease *lease

	// owned by readLoop:
	initialized bool
	screens     bool // the client's initialize declared capabilities.screen
	pipes       bool // the client's initialize declared capabilities.pipes: stderr frames
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
	ctx, span := tel.Tracer.Start(ctx, otel.SpanWSConnection, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(peerAttrs(ws)...))
	defer span.End()
	tel.Instruments.Sockets.Add(ctx, 1)
	defer tel.Instruments.Sockets.Add(context.Background(), -1)
	c.tel = tel
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	if err := boundUnsent(ws); err != nil {
		c.log.Warn("socket: TCP_NOTSENT_LOWAT not set: replies may queue behind output on a slow link", "err", err)
	}
	if opts.RelayLease > 0 {
		// The first lease ping goes before anything else, so the relay's pong precedes every
		// request it sends after initialize's result.
		c.lease = newLease(min(max(opts.RelayLease, MinRelayLease), MaxRelayLease))
		if err := c.leasePing(); err != nil {
			ws.Close()
			return fmt.Errorf("lease ping: %w", err)
		}
		c.wg.Go(c.leaseLoop)
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

// closeAfterQueued has the writer send a close frame once every response queued so far is
// written, then close the socket; both loops then end. The reader reads on until then.
func (c *conn) closeAfterQueued(code int, text string) {
	c.mu.Lock()
	first := c.closeAfter == nil
	if first {
		c.closeAfter = websocket.FormatCloseMessage(code, text)
		c.closeWhy = fmt.Errorf("closed with %d: %s", code, text)
	}
	c.mu.Unlock()
	if first {
		c.decidedClose()
	}
	notify(c.wake)
}

// decidedClose tells opts.Closing, once, that the server has decided to close the socket.
func (c *conn) decidedClose() {
	if c.opts.Closing != nil {
		c.closingOnce.Do(c.opts.Closing)
	}
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
	c.decidedClose()
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

// waitAtMost waits until done is closed or d has passed.
func waitAtMost(done <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// resumeHoldMs is what initialize reports as flow.resumeHoldMs: a read-only principal's channels
// are passive and never leave a hold.
func (c *conn) resumeHoldMs() int64 {
	if c.opts.ReadOnly {
		return 0
	}
	return c.reg.Options().ResumeHold.Milliseconds()
}

// peerAttrs are ws.connection's network attributes (semantic conventions: network.*), from the
// socket's addresses when it has them (a gorilla *websocket.Conn does).
func peerAttrs(ws Socket) []attribute.KeyValue {
	attrs := []attribute.KeyValue{semconv.NetworkProtocolName("websocket")}
	a, ok := ws.(interface{ RemoteAddr() net.Addr })
	if !ok {
		return attrs
	}
	tcp, ok := a.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return attrs
	}
	return append(attrs, semconv.NetworkTransportTCP, semconv.NetworkPeerAddress(tcp.IP.String()),
		semconv.NetworkPeerPort(tcp.Port))
}
