package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// ReconnectOptions configure how a Client survives a dropped connection (DialOptions.Reconnect).
type ReconnectOptions struct {
	// Within bounds how long the client keeps trying after a drop. Zero means the gateway's
	// resume hold (initialize's flow.resumeHoldMs) or 30 s, whichever is longer: past the hold
	// the gateway may have dropped output a channel had not received.
	Within time.Duration
	// MinDelay and MaxDelay bound the jittered exponential backoff between attempts (defaults
	// 50 ms and 2 s). The first attempt is immediate.
	MinDelay, MaxDelay time.Duration
	// OnEvent, if set, is told of each drop (Err set, Resumed false) and each completed resume
	// (Resumed true). It runs on the client's reader goroutine and must not block.
	OnEvent func(ReconnectEvent)
}

// ReconnectEvent is a drop or a completed resume.
type ReconnectEvent struct {
	Resumed  bool  // false: the connection dropped; true: every channel is bound again
	Err      error // why the connection dropped
	Attempts int   // dial attempts until the resume
	// Ended lists the channels whose session was gone at the resume; each has ended.
	Ended []uint32
}

func (o ReconnectOptions) withDefaults(holdMs int64) ReconnectOptions {
	if o.Within <= 0 {
		o.Within = max(time.Duration(holdMs)*time.Millisecond, 30*time.Second)
	}
	if o.MinDelay <= 0 {
		o.MinDelay = 50 * time.Millisecond
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 2 * time.Second
	}
	return o
}

// closeShareEnded is the close code of a socket whose share link was revoked or expired
// (protocol.md §4, "Share links").
const closeShareEnded = 4003

// retryable reports whether a connection that ended with err may be resumed: not after a close
// that says the client itself is at fault (protocol.md §6), which a new connection would repeat,
// nor after the server broke the protocol.
func retryable(err error) bool {
	if errors.Is(err, ErrProtocol) {
		return false // the server broke the protocol: it would again
	}
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		switch ce.Code {
		case websocket.CloseNormalClosure, websocket.CloseProtocolError, websocket.CloseUnsupportedData,
			websocket.CloseInvalidFramePayloadData, websocket.ClosePolicyViolation,
			websocket.CloseMessageTooBig, websocket.CloseMandatoryExtension,
			closeShareEnded: // the share link ended: it authenticates no more
			return false
		}
	}
	return true
}

// permanent reports whether a failed attempt would fail the same way again: the gateway is
// there and refuses this client.
func permanent(err error) bool {
	var de *DialError
	if errors.As(err, &de) {
		switch de.Status {
		case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
			return true
		}
	}
	var pe *proto.Error
	return errors.As(err, &pe) // initialize refused
}

// reconnect redials until every bound channel is attached again on a new link, or gives up and
// ends the client. It runs on the reader goroutine of the link that ended (cause).
func (c *Client) reconnect(cause error) {
	o := c.opts.Reconnect.withDefaults(c.Init().Flow.ResumeHoldMs)
	if o.OnEvent != nil {
		o.OnEvent(ReconnectEvent{Err: cause})
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Within)
	defer cancel()
	go func() { // Close ends the attempts at once
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	delay, last := o.MinDelay, cause
	for attempt := 1; ; attempt++ {
		ended, err := c.resume(ctx)
		if err == nil {
			if o.OnEvent != nil {
				o.OnEvent(ReconnectEvent{Resumed: true, Attempts: attempt, Ended: ended})
			}
			return
		}
		last = err
		if permanent(err) || ctx.Err() != nil {
			break
		}
		// Backoff between attempts, not synchronization: jittered to [delay/2, delay).
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			break
		}
		delay = min(delay*2, o.MaxDelay)
	}
	c.finish(fmt.Errorf("reconnect after %v: %w", cause, last))
}

// resume makes one attempt: dial, initialize, and re-attach every resumable channel from the
// offset it has received up to (pipelined, in one round trip), then make the link current.
// It returns the channels whose session was gone; each is ended.
func (c *Client) resume(ctx context.Context) ([]uint32, error) {
	l, err := c.dialLink(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		l.ws.Close()
		<-l.done
		return nil, ErrClosed
	}
	c.dialing = l
	chs := make([]*Channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chs = append(chs, ch)
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.dialing = nil
		c.mu.Unlock()
	}()
	fail := func(err error) ([]uint32, error) {
		l.ws.Close()
		<-l.done
		return nil, err
	}
	initCall, err := c.sendOn(l, proto.MethodInitialize, c.initializeParams(), nil)
	if err != nil {
		return fail(err)
	}
	type resumeCall struct {
		ch *Channel
		p  *pending
	}
	var calls []resumeCall
	for _, ch := range chs {
		id, from, screen, ok := ch.resumable()
		if !ok {
			continue
		}
		params := proto.AttachParams{Channel: ch.ID, Session: id, From: &from, Screen: screen}
		p, err := c.sendOn(l, proto.MethodSessionAttach, params, ch.bindResume(from))
		if err != nil {
			return fail(err)
		}
		calls = append(calls, resumeCall{ch, p})
	}
	var init proto.InitializeResult
	if err := initCall.wait(ctx, &init); err != nil {
		return fail(fmt.Errorf("initialize: %w", err))
	}
	var ended []uint32
	for _, rc := range calls {
		err := rc.p.wait(ctx, nil)
		var pe *proto.Error
		switch {
		case err == nil:
		case errors.As(err, &pe):
			// The session is gone (killed, reaped, or the gateway restarted without it), or
			// refuses this client now: the channel ends with the reason.
			c.dropChannel(rc.ch)
			rc.ch.end(fmt.Errorf("resume session %s: %w", rc.ch.Session(), err))
			ended = append(ended, rc.ch.ID)
		default:
			return fail(err)
		}
	}
	if err := c.setUp(l, init); err != nil {
		return fail(err)
	}
	for _, rc := range calls {
		c.queueAck(rc.ch) // what was consumed while the link was down
	}
	return ended, nil
}
