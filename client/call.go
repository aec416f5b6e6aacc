package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// ErrConnectionLost is returned by a call whose request went out on a connection that ended
// before its response came back: whether the server acted on it is unknown.
var ErrConnectionLost = errors.New("connection lost before the response")

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
