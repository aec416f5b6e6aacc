package client

import (
	"errors"
	"io"
	"sync"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// ErrClosed is the cause of a Client ended by Close.
var ErrClosed = errors.New("client closed")

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
