package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// Defaults for DialOptions.
const (
	DefaultWriteTimeout    = 10 * time.Second
	DefaultMaxMessageBytes = 16 << 20
)

// DialOptions configure a Client.
type DialOptions struct {
	Token  string      // sent as Authorization: Bearer
	Origin string      // sent as Origin when set
	Header http.Header // extra headers
	Name   string      // client name sent with initialize (default "muxterm-go")
	// Dialer defaults to a copy of websocket.DefaultDialer with the subprotocol set.
	Dialer *websocket.Dialer
	// WriteTimeout bounds each write to the socket (default DefaultWriteTimeout). A write that
	// times out ends the connection: a peer that stops reading cannot block a writer for ever.
	WriteTimeout time.Duration
	// MaxMessageBytes bounds each message read from the server (default
	// DefaultMaxMessageBytes); a larger one ends the connection.
	MaxMessageBytes int64
	// OnServerError, if set, receives each error the server sent without a request id (about a
	// binary frame or a message it could not parse; docs/protocol.md §5). It runs on the
	// client's reader goroutine and must not block.
	OnServerError func(*proto.Error)
	// OnPing, if set, is called with the payload of each ping the server sends, as it is read
	// and before its pong is written; OnNotification with each notification whose method the
	// client does not handle itself. Both run on the client's reader goroutine and must not
	// block. A cluster's relay uses them for its lease (docs/protocol.md §1, "At most once").
	OnPing         func(data string)
	OnNotification func(method string, params json.RawMessage)
	// Reconnect, if set, makes the client survive a dropped connection: it redials, calls
	// initialize and re-attaches every bound channel from the offset it received up to, so a
	// Channel's Read goes on byte-exact (or with a gap it reports, if the gateway no longer had
	// the bytes). Without it, a dropped connection ends the client and every channel.
	Reconnect *ReconnectOptions
	// ManualAck: Read acknowledges nothing; the caller acknowledges with Channel.Ack what its
	// own consumer consumed. A relay that forwards output to another client passes that
	// client's acks on, so the window bounds the bytes in flight end to end. It cannot be
	// combined with Reconnect (Dial refuses).
	ManualAck bool
}

// check refuses options that do not work together: with ManualAck the caller's acks are
// counts of bytes it read, which after a reconnect may belong to the binding before it, and the
// client cannot tell which to credit.
func (o DialOptions) check() error {
	if o.ManualAck && o.Reconnect != nil {
		return errors.New("dial: ManualAck and Reconnect cannot be combined")
	}
	return nil
}

func (o DialOptions) withDefaults() DialOptions {
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.Name == "" {
		o.Name = "muxterm-go"
	}
	return o
}

// Dial connects, negotiates muxterm.v1 and calls initialize (with ctx's trace context, if
// proto.ContextWithMeta gave it one, as every request made with a ctx sends it).
func Dial(ctx context.Context, url string, opts DialOptions) (*Client, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	c := newClient(url, opts)
	if err := c.connect(ctx); err != nil {
		c.abort(nil, err)
		return nil, err
	}
	return c, nil
}

// DialOpen dials like Dial and opens a session like Client.Open, in one round trip instead of
// two: it sends session.open right behind initialize, without waiting for initialize's result
// (the server handles a socket's messages in order; see docs/protocol.md). On any error the
// client is closed.
//
// A ctx that ends while DialOpen connects ends it at once. One that ends after session.open went
// out makes DialOpen wait up to openCleanupWait more for the open's answer and kill the session
// it started, if any, before it returns ctx's error; an answer later than that, or one a dropped
// connection lost, leaves the session to the gateway's reaper.
func DialOpen(ctx context.Context, url string, opts DialOptions, o OpenOptions) (*Client, *Channel, error) {
	if err := opts.check(); err != nil {
		return nil, nil, err
	}
	c := newClient(url, opts)
	l, err := c.dialLink(ctx)
	if err != nil {
		c.abort(nil, err)
		return nil, nil, err
	}
	initCall, err := c.sendOn(l, proto.MethodInitialize, withTraceMeta(ctx, c.initializeParams()),
		nil)
	if err != nil {
		c.abort(l, err)
		return nil, nil, fmt.Errorf("initialize: %w", c.endedBy(l, err))
	}
	ch := c.newChannel()
	openCall, err := c.sendOn(l, proto.MethodSessionOpen, withTraceMeta(ctx, o.params(ch.ID)),
		ch.bindOpenSized(o))
	if err != nil {
		c.abort(l, err)
		return nil, nil, c.endedBy(l, err)
	}
	// session.open is out: the answers are awaited until openCleanupWait after ctx's end, so that
	// a session started by an open that ctx gave up on is known, and killed below.
	wctx, release := graceAfter(ctx, openCleanupWait)
	defer release()
	var init proto.InitializeResult
	if err := initCall.wait(wctx, &init); err != nil {
		c.abort(l, err)
		return nil, nil, fmt.Errorf("initialize: %w", orEnded(ctx, err))
	}
	if err := c.setUp(l, init); err != nil {
		c.abort(l, err)
		return nil, nil, err
	}
	err = openCall.wait(wctx, nil)
	if ctx.Err() != nil {
		if err == nil {
			// Opened, but the caller gave up: no session may outlive that.
			if _, kerr := c.Kill(wctx, ch.Session()); kerr != nil {
				err = fmt.Errorf("kill the session opened after the caller gave up: %w", afterGrace(wctx, kerr))
			}
		} else {
			err = afterGrace(wctx, err)
		}
		c.Close()
		return nil, nil, errors.Join(fmt.Errorf("session.open: %w", ctx.Err()), err)
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, ch, nil
}

// openCleanupWait is how long DialOpen waits for session.open's answer after its ctx ended, to
// kill the session it may have started.
const openCleanupWait = 2 * time.Second

// graceAfter returns a context that ends grace after ctx ends (not when it does), and its
// release, which also stops the grace's timer.
func graceAfter(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	w, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu       sync.Mutex // guards timer and released
		timer    *time.Timer
		released bool
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !released {
			timer = time.AfterFunc(grace, cancel)
		}
	})
	return w, func() {
		stop()
		mu.Lock()
		released = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// afterGrace is err, or, when the grace context w ended, an error that says so without
// wrapping w's cancellation (which is not the caller's).
func afterGrace(w context.Context, err error) error {
	if w.Err() != nil {
		return fmt.Errorf("no answer within %v after the caller gave up", openCleanupWait)
	}
	return err
}

// orEnded is err, or ctx's error when ctx has ended: a wait that outlived ctx failed because
// the caller gave up.
func orEnded(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// endedBy is err, a failed write on l, or, when l's reader ended it for a protocol violation
// (the write failed because the reader closed l), that violation. l's reader has ended.
func (c *Client) endedBy(l *link, err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.ended && errors.Is(l.err, ErrProtocol) {
		return l.err
	}
	return err
}

// connect dials a new link, initializes it and makes it current.
func (c *Client) connect(ctx context.Context) error {
	l, err := c.dialLink(ctx)
	if err != nil {
		return err
	}
	p, err := c.sendOn(l, proto.MethodInitialize, withTraceMeta(ctx, c.initializeParams()),
		nil)
	if err != nil {
		l.ws.Close()
		<-l.done
		return fmt.Errorf("initialize: %w", c.endedBy(l, err))
	}
	var init proto.InitializeResult
	if err := p.wait(ctx, &init); err != nil {
		l.ws.Close()
		<-l.done
		return fmt.Errorf("initialize: %w", err)
	}
	if err := c.setUp(l, init); err != nil {
		l.ws.Close()
		<-l.done
		return err
	}
	return nil
}

// setUp makes l the current link; calls and writes waiting for one go on. It fails, changing
// nothing, if the client has ended or l has ended meanwhile: the caller closes l.
func (c *Client) setUp(l *link, init proto.InitializeResult) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closing:
		return ErrClosed
	case l.ended:
		return fmt.Errorf("connection ended after initialize: %w", l.err)
	}
	c.cur, c.init = l, init
	close(c.up)
	return nil
}

// dialLink opens a socket and starts its reader; the caller initializes it.
func (c *Client) dialLink(ctx context.Context) (*link, error) {
	d := websocket.DefaultDialer
	if c.opts.Dialer != nil {
		d = c.opts.Dialer
	}
	dd := *d
	dd.Subprotocols = []string{proto.Subprotocol}
	h := http.Header{}
	for k, v := range c.opts.Header {
		h[k] = v
	}
	if c.opts.Token != "" {
		h.Set("Authorization", "Bearer "+c.opts.Token)
	}
	if c.opts.Origin != "" {
		h.Set("Origin", c.opts.Origin)
	}
	// gorilla's DialContext honours only ctx's deadline once connected: a ctx cancelled during
	// the upgrade (a server that accepts and never answers) ends it here, by closing the
	// connection.
	var conns netConns
	dd.NetDialContext, dd.NetDialTLSContext = conns.wrap(dd.NetDialContext, dd.NetDial), conns.wrapTLS(dd.NetDialTLSContext)
	stop := context.AfterFunc(ctx, conns.expire)
	ws, resp, err := dd.DialContext(ctx, c.url, h)
	if !stop() && err == nil {
		ws.Close() // ctx ended as the upgrade completed; its connection may be closed
		err = ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("dial %s: %w", c.url, ctx.Err())
		}
		if resp != nil {
			return nil, &DialError{Status: resp.StatusCode, Err: err}
		}
		return nil, fmt.Errorf("dial %s: %w", c.url, err)
	}
	ws.SetReadLimit(c.opts.MaxMessageBytes)
	if on := c.opts.OnPing; on != nil {
		ws.SetPingHandler(func(data string) error {
			on(data)
			return pong(ws, data)
		})
	}
	l := &link{ws: ws, done: make(chan struct{}), window: defaultWindow}
	c.readers.Add(1)
	go c.readLoop(l)
	return l, nil
}

// pong answers a ping as gorilla's default handler does: a pong that cannot be written because
// the connection is closing or broken is not the reader's error.
func pong(ws *websocket.Conn, data string) error {
	err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	var ne net.Error
	if errors.Is(err, websocket.ErrCloseSent) || errors.As(err, &ne) {
		return nil
	}
	return err
}

// errDialGivenUp is a dial's connection closed because its ctx ended meanwhile.
var errDialGivenUp = errors.New("dial given up")

// netConns records the connections a dial made, so that a cancelled ctx can close them.
type netConns struct {
	mu      sync.Mutex // guards conns and expired
	conns   []net.Conn
	expired bool
}

// add records conn, or closes it and reports false when the dial was given up meanwhile.
func (n *netConns) add(conn net.Conn) bool {
	n.mu.Lock()
	expired := n.expired
	if !expired {
		n.conns = append(n.conns, conn)
	}
	n.mu.Unlock()
	if expired {
		_ = conn.Close()
	}
	return !expired
}

// expire closes every connection made, and those to come: the caller gave up on the dial. A
// close, unlike a deadline, cannot be undone by the deadline gorilla sets after dialing.
func (n *netConns) expire() {
	n.mu.Lock()
	n.expired = true
	conns := n.conns
	n.mu.Unlock()
	for _, conn := range conns {
		_ = conn.Close()
	}
}

type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// wrap returns the dialer's NetDialContext (else NetDial, else a net.Dialer's) recording what
// it dials.
func (n *netConns) wrap(dial dialFunc, legacy func(network, addr string) (net.Conn, error)) dialFunc {
	if dial == nil && legacy != nil {
		dial = func(_ context.Context, network, addr string) (net.Conn, error) { return legacy(network, addr) }
	}
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	return n.recording(dial)
}

// wrapTLS is wrap for NetDialTLSContext, which stays unset when it was.
func (n *netConns) wrapTLS(dial dialFunc) dialFunc {
	if dial == nil {
		return nil
	}
	return n.recording(dial)
}

func (n *netConns) recording(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err == nil && !n.add(conn) {
			return nil, errDialGivenUp
		}
		return conn, err
	}
}

func (c *Client) initializeParams() proto.InitializeParams {
	return proto.InitializeParams{Client: proto.ClientInfo{Name: c.opts.Name, Version: "1"},
		Capabilities: map[string]any{proto.CapabilityScreen: true, proto.CapabilityPipes: true}}
}

// DialError is a refused upgrade.
type DialError struct {
	Status int
	Err    error
}

func (e *DialError) Error() string {
	return fmt.Sprintf("websocket refused: HTTP %d: %v", e.Status, e.Err)
}
func (e *DialError) Unwrap() error { return e.Err }
