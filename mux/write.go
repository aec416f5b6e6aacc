package mux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

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

// ctrlMsg is one queued text message: msg, or a refusal marshalled when it is written (its
// counts may still grow while it waits, refuse.go).
type ctrlMsg struct {
	msg []byte
	ref *refusal
}

// send queues a text message for the writer. A client that lets maxQueuedCtrl messages pile
// up unread is dropped (1008). It reports whether the message was queued.
func (c *conn) send(msg []byte) bool {
	return c.enqueue(ctrlMsg{msg: msg}, nil)
}

// enqueue is send for a message or a refusal; key, when not nil, registers the refusal in
// c.refusals so that later refusals of its kind join it until the writer takes it.
func (c *conn) enqueue(m ctrlMsg, key *refusalKey) bool {
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
	c.ctrl = append(c.ctrl, m)
	if key != nil {
		if c.refusals == nil {
			c.refusals = make(map[refusalKey]*refusal)
		}
		c.refusals[*key] = m.ref
	}
	c.mu.Unlock()
	notify(c.wake)
	return true
}

// sendLocked is send for a caller that holds c.mu: it queues msg unless maxQueuedCtrl messages
// wait already, in which case it drops msg instead of closing the socket (closing takes c.mu).
// It skips send's check of the connection's context: a message queued after the end is never
// written, which is harmless.
func (c *conn) sendLocked(msg []byte) {
	if len(c.ctrl) < maxQueuedCtrl {
		c.ctrl = append(c.ctrl, ctrlMsg{msg: msg})
		notify(c.wake)
	}
}

func (c *conn) reply(id json.RawMessage, result any) bool {
	return c.send(proto.MarshalResponse(id, result, nil))
}

func (c *conn) replyErr(id json.RawMessage, e *proto.Error) bool {
	return c.send(proto.MarshalResponse(id, nil, e))
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
			if errors.Is(context.Cause(c.ctx), ErrRevoked) {
				c.closeWith(CloseRevoked, ErrRevoked.Error())
				return
			}
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
		clear(c.refusals) // taken: a refusal from now on is a new message
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
			b := m.msg
			if m.ref != nil {
				b = m.ref.message()
			}
			if err := c.write(websocket.TextMessage, b); err != nil {
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

// serveChannel writes at most one output frame for ch, preceded by a session.size when the
// session's size changed, by the errors its binding passes on and by a gap notification if it
// fell behind, and followed by exit and closed notifications once the output they follow has
// been written.
func (c *conn) serveChannel(ch *channel, buf []byte) (bool, error) {
	if !ch.active.Load() || ch.detached.Load() || ch.closedSent {
		return false, nil
	}
	if size, gen, changed := ch.b.sizeChanged(ch.sizeGen); changed {
		// The applied size changed: a control message, never held back by credit.
		ch.sizeGen = gen
		if err := c.write(websocket.TextMessage, sizeNote(ch, size)); err != nil {
			return false, fmt.Errorf("write size: %w", err)
		}
	}
	for _, e := range ch.b.errors() {
		if err := c.write(websocket.TextMessage, proto.MarshalResponse(nullID, nil, withChannel(e, ch.id))); err != nil {
			return false, fmt.Errorf("write the binding's error: %w", err)
		}
	}
	// A read within no credit still moves a viewer that fell behind past its gap and tells
	// what is left: notifications are never held back by credit, only output is.
	n := int(min(max(ch.credit.available(), 0), int64(ch.b.maxFrame())))
	nr, lost, stream, err := ch.b.read(buf[proto.HeaderLen : proto.HeaderLen+n])
	if errors.Is(err, session.ErrViewerClosed) {
		return false, nil
	}
	// The binding has moved past these bytes: count them in flight before any write can fail,
	// so a socket that ends here leaves its resume hold where the client will resume.
	ch.credit.take(int64(nr))
	typ := proto.FrameOutput
	if stream == session.Stderr && c.pipes {
		typ = proto.FrameStderr // a client without the capability gets stderr as output
	}
	if wrote, err := c.writeOutput(ch, buf, typ, nr, lost); wrote || err != nil {
		return wrote, err
	}
	st := ch.b.state()
	if st.pending {
		c.starve(ch)
		return lost > 0, nil
	}
	// Everything retained was delivered: the notifications that follow the output.
	if st.exit != nil && !ch.exitSent {
		ch.exitSent = true
		if err := c.write(websocket.TextMessage, exitNote(ch, st.exit)); err != nil {
			return false, fmt.Errorf("write exit: %w", err)
		}
	}
	if st.closed != "" {
		return true, c.writeClosed(ch, st.closed)
	}
	return lost > 0, nil
}

// heldFrame bounds the output frames of a session held for another session's echo
// (session.Held).
const heldFrame = 4 << 10

// starve marks ch starved: its output waits for credit and the next ack re-queues the channel.
// starved is published before the credit is looked at again, so an ack given in between is
// never missed: either it sees starved, or this check sees its credit.
func (c *conn) starve(ch *channel) {
	if h := c.opts.testHookBeforeStarve; h != nil {
		h(ch)
	}
	ch.starved.Store(true)
	if ch.credit.available() > 0 && ch.starved.CompareAndSwap(true, false) {
		c.markReady(ch)
	}
}

// writeClosed ends ch once its output and exit are written: it frees the number, unbinds the
// channel and writes session.closed. The number is free before the client can learn it is: a
// client that reuses it the instant session.closed arrives must not get channel_in_use.
func (c *conn) writeClosed(ch *channel, reason session.Reason) error {
	ch.closedSent = true
	c.release(ch)
	c.unbind(ch, false)
	if err := c.write(websocket.TextMessage, closedNote(ch, reason)); err != nil {
		return fmt.Errorf("write closed: %w", err)
	}
	if h := c.opts.testHookAfterClosed; h != nil {
		h(c, ch)
	}
	return nil
}

func sizeNote(ch *channel, size session.Size) []byte {
	return proto.MarshalNotification(proto.MethodSessionSize, proto.SessionSizeParams{
		Channel: ch.id, Session: ch.sessionID(), Cols: size.Cols, Rows: size.Rows})
}

// exitNote is a channel's session.exit; e.Signal nil is sent as null.
func exitNote(ch *channel, e *proto.ExitInfo) []byte {
	return proto.MarshalNotification(proto.MethodSessionExit, proto.SessionExitParams{
		Channel: ch.id, Session: ch.sessionID(), Code: e.Code, Signal: e.Signal})
}

// writeOutput writes what a channel's read gave: the gap notification for lost bytes, then the
// nr bytes already read into buf after the frame header, in a frame of type typ (output, or a
// pipe session's stderr). It reports whether it wrote a frame;
// the channel is then marked ready again, since there may be more.
func (c *conn) writeOutput(ch *channel, buf []byte, typ byte, nr int, lost int64) (bool, error) {
	if lost > 0 {
		c.tel.Instruments.GapBytes.Add(c.ctx, lost)
		if err := c.write(websocket.TextMessage, proto.MarshalNotification(proto.MethodSessionGap,
			proto.SessionGapParams{Channel: ch.id, Lost: lost})); err != nil {
			return false, fmt.Errorf("write gap: %w", err)
		}
	}
	if nr == 0 {
		return false, nil
	}
	frame := proto.AppendFrame(buf[:0], typ, ch.id, nil)
	frame = frame[:proto.HeaderLen+nr]
	if err := c.write(websocket.BinaryMessage, frame); err != nil {
		return false, fmt.Errorf("write output: %w", err)
	}
	if h := c.opts.testHookOutputFrame; h != nil {
		h(ch, nr)
	}
	c.markReady(ch)
	return true, nil
}

func closedNote(ch *channel, reason session.Reason) []byte {
	return proto.MarshalNotification(proto.MethodSessionClosed, proto.SessionClosedParams{
		Channel: ch.id, Session: ch.sessionID(), Reason: string(reason)})
}
