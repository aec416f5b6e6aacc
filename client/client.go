package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
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

// ErrClosed is the cause of a Client ended by Close.
var ErrClosed = errors.New("client closed")

// ErrConnectionLost is returned by a call whose request went out on a connection that ended
// before its response came back: whether the server acted on it is unknown.
var ErrConnectionLost = errors.New("connection lost before the response")

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

// Client speaks muxterm.v1 over one WebSocket at a time (a new one after each reconnect). Its
// methods are safe for concurrent use; each Channel's Read is meant for one goroutine at a
// time. On any error that ends the connection without Reconnect, the client is done: Done is
// closed and Err says why.
type Client struct {
	url  string
	opts DialOptions // immutable after Dial

	// wmu serialises writes to the current socket (gorilla allows one writer at a time). It is
	// taken before mu, and held across one socket write, which WriteTimeout bounds.
	wmu sync.Mutex

	// mu guards the fields below.
	mu       sync.Mutex
	cur      *link // the connection in use; nil while reconnecting
	up       chan struct{}
	init     proto.InitializeResult
	nextID   int64
	calls    map[string]*pending
	channels map[uint32]*Channel
	nextCh   uint32
	dialing  *link // a link a reconnect opened and has not made current yet
	closing  bool  // Close was called or the client ended
	closeErr error // why the client ended; set once, before done is closed

	done chan struct{} // closed when the client has ended for good

	// ackMu guards ackDue, the channels whose reader drained its buffer with bytes left
	// unacknowledged; ackLoop sends those acks, so they are never on the path of the output.
	ackMu   sync.Mutex
	ackDue  []*Channel
	ackWake chan struct{} // capacity 1
	ackDone chan struct{} // closed when ackLoop ends
	// readers counts readLoops (a reconnect runs on the reader of the link that ended, so it
	// is counted too); Close waits for it.
	readers sync.WaitGroup
}

// link is one WebSocket connection of a Client.
type link struct {
	ws   *websocket.Conn
	done chan struct{} // closed when its readLoop has ended
	// ended is set, under Client.mu, when its readLoop has stopped reading; err says why. A
	// link that ended is never made current.
	ended bool
	err   error
	// window is the flow.window of its initialize (the default before it); owned by readLoop.
	window int
}

// pending is a request sent and not yet answered.
type pending struct {
	c      *Client
	id     string
	method string
	on     *link
	res    chan response // capacity 1
	// apply, if set, runs on the reader goroutine with the response before the reader reads
	// the next message: it binds a channel before any of the channel's output is handled. It
	// is replaced by late (under Client.mu) when the caller stops waiting. An error it returns
	// (ErrProtocol) ends the connection.
	apply func(response) error
	// late, if set, takes over the response once the caller has stopped waiting (its ctx
	// ended): a binding the server made for nobody is undone instead of leaked.
	late func(response)
	// handedOff: wait gave up and late owns the response (set by the waiting goroutine only).
	handedOff bool
}

type response struct {
	Result json.RawMessage
	Err    *proto.Error
	lost   error // the connection ended first
	on     *link // the link the request went out on
}

// Dial connects, negotiates muxterm.v1 and calls initialize.
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
	initCall, err := c.sendOn(l, proto.MethodInitialize, c.initializeParams(), nil)
	if err != nil {
		c.abort(l, err)
		return nil, nil, fmt.Errorf("initialize: %w", c.endedBy(l, err))
	}
	ch := c.newChannel()
	openCall, err := c.sendOn(l, proto.MethodSessionOpen, o.params(ch.ID), ch.bindOpenSized(o))
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

// abort ends a client that never got a current link, closing l if it was dialed, and waits for
// its goroutines.
func (c *Client) abort(l *link, err error) {
	if l != nil {
		l.ws.Close()
	}
	c.finish(err)
	c.readers.Wait()
	<-c.ackDone
}

func newClient(url string, opts DialOptions) *Client {
	c := &Client{url: url, opts: opts.withDefaults(), calls: make(map[string]*pending),
		channels: make(map[uint32]*Channel), up: make(chan struct{}), done: make(chan struct{}),
		ackWake: make(chan struct{}, 1), ackDone: make(chan struct{})}
	go c.ackLoop()
	return c
}

// connect dials a new link, initializes it and makes it current.
func (c *Client) connect(ctx context.Context) error {
	l, err := c.dialLink(ctx)
	if err != nil {
		return err
	}
	p, err := c.sendOn(l, proto.MethodInitialize, c.initializeParams(), nil)
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
	return fmt.Sprintf("upgrade refused: HTTP %d: %v", e.Status, e.Err)
}
func (e *DialError) Unwrap() error { return e.Err }

// Init returns the result of the current connection's initialize: the server, its limits and
// its flow control.
func (c *Client) Init() proto.InitializeResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.init
}

// Close closes the socket and ends the client; sessions keep running on the server. It does
// not detach: to the gateway this is a dropped socket, and it holds each read-write session's
// output for its resume hold (Init().Flow.ResumeHoldMs). Detach first when leaving for good.
// Close may be called more than once; every call returns the cause the client ended with,
// which is nil when Close itself ended it.
func (c *Client) Close() error {
	c.finish(ErrClosed)
	c.readers.Wait()
	<-c.ackDone
	if err := c.Err(); !errors.Is(err, ErrClosed) {
		return err
	}
	return nil
}

// finish ends the client with cause, unless it has ended already, and ends every channel.
// A reconnect in progress sees closing and stops.
func (c *Client) finish(cause error) {
	c.mu.Lock()
	if c.closeErr != nil {
		c.mu.Unlock()
		return
	}
	c.closing = true
	c.closeErr = cause
	links := []*link{c.cur, c.dialing}
	chs := make([]*Channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chs = append(chs, ch)
	}
	c.mu.Unlock()
	for _, l := range links {
		if l != nil {
			l.ws.Close()
		}
	}
	for _, ch := range chs {
		ch.end(&endedError{cause})
	}
	close(c.done)
}

// endedError is a Channel's Read error once its client ended: io.ErrUnexpectedEOF, which wraps
// the client's cause (ErrClosed, ErrProtocol, a lost connection).
type endedError struct{ cause error }

func (e *endedError) Error() string {
	if e.cause == nil {
		return io.ErrUnexpectedEOF.Error()
	}
	return "client ended: " + e.cause.Error()
}
func (e *endedError) Is(target error) bool { return target == io.ErrUnexpectedEOF }
func (e *endedError) Unwrap() error        { return e.cause }

// Done is closed when the client has ended for good; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the client ended: ErrClosed after Close, a *websocket.CloseError for a close
// frame, or the error that ended the connection (or the last reconnect attempt).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeErr
}

// queueAck has ackLoop acknowledge what ch's reader has consumed.
func (c *Client) queueAck(ch *Channel) {
	c.ackMu.Lock()
	c.ackDue = append(c.ackDue, ch)
	c.ackMu.Unlock()
	select {
	case c.ackWake <- struct{}{}:
	default:
	}
}

// ackLoop sends the acks queueAck asked for, until the client ends.
func (c *Client) ackLoop() {
	defer close(c.ackDone)
	for {
		select {
		case <-c.ackWake:
		case <-c.done:
			return
		}
		c.ackMu.Lock()
		due := c.ackDue
		c.ackDue = nil
		c.ackMu.Unlock()
		for _, ch := range due {
			ch.flushAck()
		}
	}
}

// link waits for a current connection, or ctx or the client's end.
func (c *Client) link(ctx context.Context) (*link, error) {
	for {
		c.mu.Lock()
		l, up, err := c.cur, c.up, c.closeErr
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if l != nil {
			return l, nil
		}
		select {
		case <-up:
		case <-c.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// writeOn sends one message on l, bounded by WriteTimeout; a failed write ends l (its reader
// then ends, and a reconnect starts if configured).
func (c *Client) writeOn(l *link, typ int, b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeOnLocked(l, typ, b)
}

// writeOnLocked is writeOn with c.wmu held.
func (c *Client) writeOnLocked(l *link, typ int, b []byte) error {
	if err := l.ws.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout)); err != nil {
		l.ws.Close()
		return err
	}
	if err := l.ws.WriteMessage(typ, b); err != nil {
		l.ws.Close()
		return err
	}
	return nil
}

// Call sends a request and decodes its result into out (if non-nil). A JSON-RPC error is
// returned as *proto.Error. While the client reconnects, Call waits for the new connection
// (or ctx).
func (c *Client) Call(ctx context.Context, method string, params any, out any) error {
	return c.call(ctx, method, params, out, nil)
}

func (c *Client) call(ctx context.Context, method string, params any, out any, apply func(response) error) error {
	err, _ := c.callLate(ctx, method, params, out, apply, nil)
	return err
}

// callLate is call with a handler for a response that comes after ctx ended (pending.late). It
// reports whether late took the response over: then the caller leaves the cleanup to it.
func (c *Client) callLate(ctx context.Context, method string, params any, out any, apply func(response) error, late func(response)) (error, bool) {
	l, err := c.link(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", method, err), false
	}
	p, err := c.sendOn(l, method, withTraceMeta(ctx, params), apply)
	if err != nil {
		return err, false
	}
	p.late = late
	err = p.wait(ctx, out)
	return err, p.handedOff
}

// sendOn sends a request on l without waiting for its response; wait collects it.
func (c *Client) sendOn(l *link, method string, params any, apply func(response) error) (*pending, error) {
	c.mu.Lock()
	if c.closeErr != nil {
		err := c.closeErr
		c.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	c.nextID++
	id := c.nextID
	p := &pending{c: c, id: strconv.FormatInt(id, 10), method: method, on: l,
		res: make(chan response, 1), apply: apply}
	c.calls[p.id] = p
	c.mu.Unlock()
	msg, err := proto.MarshalRequest(id, method, params)
	if err == nil {
		err = c.writeOn(l, websocket.TextMessage, msg)
	}
	if err != nil {
		p.forget()
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	return p, nil
}

func (p *pending) forget() {
	p.c.mu.Lock()
	delete(p.c.calls, p.id)
	p.c.mu.Unlock()
}

// wait waits for p's response and decodes its result into out (if non-nil).
func (p *pending) wait(ctx context.Context, out any) error {
	select {
	case r := <-p.res:
		p.forget()
		if r.lost != nil {
			return fmt.Errorf("%s: %w: %w", p.method, ErrConnectionLost, r.lost)
		}
		if r.Err != nil {
			return r.Err
		}
		if out != nil {
			if err := json.Unmarshal(r.Result, out); err != nil {
				return fmt.Errorf("%s: decode result: %w", p.method, err)
			}
		}
		return nil
	case <-ctx.Done():
		p.giveUp()
		return fmt.Errorf("%s: %w", p.method, ctx.Err())
	}
}

// giveUp is wait's end when its ctx ended first. Without a late handler the call is forgotten
// (a response is dropped). With one, the call stays registered and the handler gets the
// response when it comes, or the connection's end; a response the reader delivered meanwhile
// is handed over at once.
func (p *pending) giveUp() {
	if p.late == nil {
		p.forget()
		return
	}
	p.handedOff = true
	p.c.mu.Lock()
	bind := p.apply
	p.apply = func(r response) error {
		var err error
		if bind != nil {
			err = bind(r)
		}
		p.forget()
		p.late(r)
		return err
	}
	p.c.mu.Unlock()
	select {
	case r := <-p.res:
		p.forget()
		p.late(r)
	default:
	}
}

// readMessage reads the next message from ws. A binary message is read into scratch, so its
// bytes are valid until the next call; one longer than scratch (than any output frame) is a
// protocol violation, refused before the rest of it is read. A text message gets a buffer of its
// own, which the socket's read limit bounds.
func readMessage(ws *websocket.Conn, scratch []byte, limit int64) (int, []byte, error) {
	typ, r, err := ws.NextReader()
	if err != nil {
		return typ, nil, err
	}
	if typ != websocket.BinaryMessage {
		b, err := readText(r, limit)
		return typ, b, err
	}
	n := 0
	for {
		m, err := r.Read(scratch[n:])
		n += m
		if err == io.EOF {
			return typ, scratch[:n], nil
		}
		if err != nil {
			return typ, nil, err
		}
		if n == len(scratch) {
			var one [1]byte
			if m, _ := io.ReadFull(r, one[:]); m > 0 {
				return typ, nil, violation("a binary message longer than %d bytes (an output frame's header and payload)", len(scratch))
			}
			return typ, scratch[:n], nil
		}
	}
}

// readText reads a text message, whose length the socket's read limit bounds, into a buffer
// that doubles up to limit: what a refused message costs is twice the limit at most, not the
// five times io.ReadAll's growth by a quarter allocates on the way to it.
func readText(r io.Reader, limit int64) ([]byte, error) {
	buf := make([]byte, 0, 4<<10)
	for {
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), max(min(2*int64(cap(buf)), limit+1), int64(cap(buf))+1))
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// newChannel picks a free channel number and registers it before the request that binds it,
// so no output frame can arrive for an unknown channel.
func (c *Client) newChannel() *Channel {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		c.nextCh++
		if c.nextCh == 0 {
			c.nextCh = 1
		}
		if _, used := c.channels[c.nextCh]; !used {
			break
		}
	}
	ch := &Channel{c: c, ID: c.nextCh, exited: make(chan struct{}), closed: make(chan struct{}),
		sized: make(chan struct{}, 1)}
	ch.cond = sync.NewCond(&ch.mu)
	c.channels[ch.ID] = ch
	return ch
}

func (c *Client) dropChannel(ch *Channel) {
	c.mu.Lock()
	if c.channels[ch.ID] == ch {
		delete(c.channels, ch.ID)
	}
	c.mu.Unlock()
}

// ackEvery is how many consumed bytes a channel acknowledges at once.
func (c *Client) ackEvery() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.init.Flow.AckBytes, 1)
}

// maxInput is the largest input payload one frame may carry.
func (c *Client) maxInput() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.init.Limits.MaxInputBytes; n > 0 {
		return n
	}
	return 64 << 10
}

// OpenOptions are session.open's params other than the channel.
type OpenOptions struct {
	Cmd  []string
	Cwd  string
	Env  map[string]string
	Cols int
	Rows int
	Name string
	// Record asks for a recording of the session (a gateway started with --record
	// --record-on-request; with --record alone every session is recorded anyway).
	Record bool
	// Pipes runs the program without a terminal (session.open's tty false): its stdin, stdout
	// and stderr are pipes, Channel.ReadStream tells stderr from stdout, and Channel.CloseStdin
	// ends its input. Cols and Rows may then be 0.
	Pipes bool
}

// params are session.open's params for o on channel.
func (o OpenOptions) params(channel uint32) proto.OpenParams {
	p := proto.OpenParams{Channel: channel, Cmd: o.Cmd, Cwd: o.Cwd, Env: o.Env, Cols: o.Cols, Rows: o.Rows, Name: o.Name, Record: o.Record}
	if o.Pipes {
		p.TTY = new(bool) // false
	}
	return p
}

// Open starts a session and returns its channel. If ctx ends after the request went out, a
// session the gateway opens anyway is killed when its result arrives, and the channel number
// stays reserved until then.
func (c *Client) Open(ctx context.Context, o OpenOptions) (*Channel, error) {
	ch := c.newChannel()
	err, handedOff := c.callLate(ctx, proto.MethodSessionOpen, o.params(ch.ID), nil, ch.bindOpenSized(o), c.undo(ch, proto.MethodSessionKill))
	if err != nil {
		if !handedOff {
			c.dropChannel(ch)
		}
		return nil, err
	}
	return ch, nil
}

// AttachOptions are session.attach's params other than the channel and the session.
type AttachOptions struct {
	// From is the offset to replay from; nil means the oldest retained byte.
	From *int64
	// Cols and Rows declare this viewer's size (both or neither): with the gateway's
	// --window-size policy they may size the session (docs/protocol.md §3).
	Cols, Rows int
	// Screen is proto.ScreenAuto (also when empty), proto.ScreenAlways or proto.ScreenNever:
	// whether the channel starts with a paint of the session's screen (docs/protocol.md §4
	// session.attach). The paint's bytes are read from the channel first; they have no offsets.
	Screen string
	// ResumeScreen is the screen mode of the re-attach after a reconnect: empty for Screen's
	// (and a whole paint whatever Screen says when a paint was cut short by the drop);
	// proto.ScreenNever keeps the channel a byte stream across reconnects, with gaps for what
	// the ring lost, as a relay that forwards bytes needs.
	ResumeScreen string
}

// Attach binds a new channel to session id, replaying from from (nil: the oldest retained byte).
func (c *Client) Attach(ctx context.Context, id string, from *int64) (*Channel, proto.AttachResult, error) {
	return c.AttachWith(ctx, id, AttachOptions{From: from})
}

// AttachWith is Attach with every option. If ctx ends after the request went out, a binding
// the gateway makes anyway is detached when its result arrives, and the channel number stays
// reserved until then.
func (c *Client) AttachWith(ctx context.Context, id string, o AttachOptions) (*Channel, proto.AttachResult, error) {
	ch := c.newChannel()
	params := proto.AttachParams{Channel: ch.ID, Session: id, From: o.From, Cols: o.Cols, Rows: o.Rows, Screen: o.Screen}
	var res proto.AttachResult
	err, handedOff := c.callLate(ctx, proto.MethodSessionAttach, params, &res, ch.bindAttach(o.From, cmp.Or(o.ResumeScreen, o.Screen)), c.undo(ch, proto.MethodSessionDetach))
	if err != nil {
		if !handedOff {
			c.dropChannel(ch)
		}
		return nil, res, err
	}
	return ch, res, nil
}

// undo returns the late handler of an open or attach whose caller gave up: if the gateway bound
// ch after all, method (proto.MethodSessionKill for an open, proto.MethodSessionDetach for an attach) undoes it;
// then ch's number is free again. It runs on the reader goroutine, so the request goes out from
// a goroutine of its own, bounded by WriteTimeout.
func (c *Client) undo(ch *Channel, method string) func(response) {
	return func(r response) {
		if r.Err != nil || r.lost != nil {
			c.dropChannel(ch)
			ch.end(io.EOF)
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), c.opts.WriteTimeout)
			defer cancel()
			var params any = proto.DetachParams{Channel: ch.ID}
			if method == proto.MethodSessionKill {
				params = proto.KillParams{Session: ch.Session()}
			}
			_ = c.Call(ctx, method, params, nil)
			c.dropChannel(ch)
			ch.end(io.EOF)
		}()
	}
}

// Kill kills session id.
func (c *Client) Kill(ctx context.Context, id string) (proto.KillResult, error) {
	var res proto.KillResult
	err := c.Call(ctx, proto.MethodSessionKill, proto.KillParams{Session: id}, &res)
	return res, err
}

// CaptureOptions are session.capture's params other than the session.
type CaptureOptions struct {
	// ANSI asks for a paint of the screen instead of its text.
	ANSI bool
	// Scrollback is the lines of history above the screen to include.
	Scrollback int
}

// Capture returns what is on session id's screen (docs/protocol.md §4 session.capture).
func (c *Client) Capture(ctx context.Context, id string, o CaptureOptions) (proto.CaptureResult, error) {
	params := proto.CaptureParams{Session: id, Format: proto.CaptureText, Scrollback: max(o.Scrollback, 0)}
	if o.ANSI {
		params.Format = proto.CaptureANSI
	}
	var res proto.CaptureResult
	err := c.Call(ctx, proto.MethodSessionCapture, params, &res)
	return res, err
}

// List lists the caller's sessions.
func (c *Client) List(ctx context.Context) ([]proto.SessionInfo, error) {
	var res proto.ListResult
	err := c.Call(ctx, proto.MethodSessionList, proto.ListParams{}, &res)
	return res.Sessions, err
}

// ShareCreate makes a share link to one of the caller's sessions for ttl: read-only unless
// write. The result holds the link's token, which no later answer shows again.
func (c *Client) ShareCreate(ctx context.Context, session string, ttl time.Duration, write bool) (proto.ShareInfo, error) {
	var res proto.ShareInfo
	err := c.Call(ctx, proto.MethodShareCreate, proto.ShareCreateParams{Session: session, TTLMs: ttl.Milliseconds(), Write: write}, &res)
	return res, err
}

// ShareList lists the live share links to one of the caller's sessions.
func (c *Client) ShareList(ctx context.Context, session string) ([]proto.ShareInfo, error) {
	var res proto.ShareListResult
	err := c.Call(ctx, proto.MethodShareList, proto.ShareListParams{Session: session}, &res)
	return res.Shares, err
}

// ShareRevoke ends a share link of the caller's; the sockets open with it close (4003).
func (c *Client) ShareRevoke(ctx context.Context, share string) (proto.ShareRevokeResult, error) {
	var res proto.ShareRevokeResult
	err := c.Call(ctx, proto.MethodShareRevoke, proto.ShareRevokeParams{Share: share}, &res)
	return res, err
}

// readLoop is l's only reader. It routes responses to callers and output and notifications to
// channels, in order. When l ends it fails l's pending calls and either starts a reconnect or
// ends the client. A message that breaks the protocol ends l with an ErrProtocol error.
func (c *Client) readLoop(l *link) {
	defer c.readers.Done()
	// Output frames are read into one reused buffer and copied once, into their channel.
	scratch := make([]byte, proto.HeaderLen+proto.MaxOutputPayload)
	var err error
	for {
		var typ int
		var b []byte
		if typ, b, err = readMessage(l.ws, scratch, c.opts.MaxMessageBytes); err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				err = fmt.Errorf("%w: %w", ErrProtocol, err)
			}
			break
		}
		if typ == websocket.BinaryMessage {
			if err = c.handleBinary(l, b); err != nil {
				break
			}
			continue
		}
		if err = c.handleText(l, b); err != nil {
			break
		}
	}
	if errors.Is(err, ErrProtocol) {
		// Tell the server why, if its socket takes a frame at once; the close follows anyway.
		_ = l.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseProtocolError, "protocol violation"),
			time.Now().Add(100*time.Millisecond))
	}
	l.ws.Close()
	c.linkEnded(l, err)
}

// handleBinary hands an output or stderr frame to its channel. The server sends no other.
func (c *Client) handleBinary(l *link, b []byte) error {
	f, err := proto.ParseFrame(b)
	if err != nil {
		return violation("binary message: %v", err)
	}
	if f.Type != proto.FrameOutput && f.Type != proto.FrameStderr {
		return violation("a frame of type %d from the server", f.Type)
	}
	c.mu.Lock()
	ch := c.channels[f.Channel]
	c.mu.Unlock()
	if ch == nil {
		return nil // a binding undone meanwhile (a given-up open or attach)
	}
	return ch.push(f.Payload, l.window, f.Type == proto.FrameStderr)
}

// handleText handles one text message: a response or a notification.
func (c *Client) handleText(l *link, b []byte) error {
	var m proto.Message
	if err := json.Unmarshal(b, &m); err != nil {
		return violation("a text message that is not a JSON-RPC message: %v", err)
	}
	if m.IsNotification() {
		return c.notification(m.Method, m.Params)
	}
	if !m.HasID() {
		if m.Error != nil && c.opts.OnServerError != nil {
			c.opts.OnServerError(m.Error)
		}
		return nil
	}
	c.mu.Lock()
	p := c.calls[string(m.ID)]
	var apply func(response) error
	if p != nil {
		apply = p.apply
	}
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	if m.Error == nil {
		if err := checkResult(p.method, m.Result); err != nil {
			return err
		}
		if p.method == proto.MethodInitialize && p.on == l {
			var init proto.InitializeResult
			_ = json.Unmarshal(m.Result, &init) // checked above
			l.window, _ = windowOf(init)
		}
	}
	r := response{Result: m.Result, Err: m.Error, on: p.on}
	if apply != nil {
		if err := apply(r); err != nil {
			return err
		}
	}
	select {
	case p.res <- r:
	default: // a second response with the same id: the first stands
	}
	return nil
}

// linkEnded fails the calls that went out on l; if l was the current link, it reconnects or
// ends the client. A link that never became current (a reconnect attempt) ends alone: its
// initialize fails and the attempt handles that.
func (c *Client) linkEnded(l *link, err error) {
	defer close(l.done)
	c.mu.Lock()
	l.ended, l.err = true, err
	var lost []*pending
	var applies []func(response) error
	for _, p := range c.calls {
		if p.on == l {
			lost, applies = append(lost, p), append(applies, p.apply)
		}
	}
	current := c.cur == l
	if current {
		c.cur, c.up = nil, make(chan struct{})
	}
	retry := current && !c.closing && c.opts.Reconnect != nil && retryable(err)
	c.mu.Unlock()
	for i, p := range lost {
		r := response{lost: err, on: l}
		if applies[i] != nil {
			_ = applies[i](r) // a binder ignores it; a late handler frees its channel
		}
		select {
		case p.res <- r:
		default:
		}
	}
	switch {
	case !current:
	case retry:
		c.reconnect(err)
	default:
		c.finish(err)
	}
}

// notification hands a notification to its channel. A known notification whose params have
// the wrong type or range is a protocol violation; an unknown one is ignored (a newer server's).
func (c *Client) notification(method string, raw json.RawMessage) error {
	switch method {
	default:
		if c.opts.OnNotification != nil {
			c.opts.OnNotification(method, raw)
		}
	case proto.MethodSessionSize:
		var p proto.SessionSizeParams
		ch, err := c.noteChannel(method, raw, &p, &p.Channel)
		if ch == nil {
			return err
		}
		if p.Cols < 1 || p.Rows < 1 || p.Cols > maxTermSize || p.Rows > maxTermSize {
			return violation("session.size: %dx%d out of range 1 … %d", p.Cols, p.Rows, maxTermSize)
		}
		ch.noteSize(p.Cols, p.Rows)
	case proto.MethodSessionGap:
		var p proto.SessionGapParams
		ch, err := c.noteChannel(method, raw, &p, &p.Channel)
		if ch == nil {
			return err
		}
		return ch.gap(p.Lost)
	case proto.MethodSessionExit:
		var p proto.SessionExitParams
		ch, err := c.noteChannel(method, raw, &p, &p.Channel)
		if ch == nil {
			return err
		}
		ch.setExit(proto.ExitInfo{Code: p.Code, Signal: p.Signal})
	case proto.MethodSessionClosed:
		var p proto.SessionClosedParams
		ch, err := c.noteChannel(method, raw, &p, &p.Channel)
		if ch == nil {
			return err
		}
		c.dropChannel(ch)
		ch.setClosed(p.Reason)
	}
	return nil
}

// noteChannel decodes a notification's params into p, whose channel member is *num, and
// returns the channel they name: nil with a protocol violation for params of the wrong shape,
// nil alone for a channel not bound here (one unbound meanwhile).
func (c *Client) noteChannel(method string, raw json.RawMessage, p any, num *uint32) (*Channel, error) {
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	if err := json.Unmarshal(raw, p); err != nil {
		return nil, violation("%s: params: %v", method, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.channels[*num], nil
}

// maxTermSize is the largest terminal dimension a PTY takes (a u16).
const maxTermSize = 1<<16 - 1
