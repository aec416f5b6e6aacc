package mux

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/proto"
)

// readLoop is the only goroutine that reads from the socket. It bounds every message, pushes
// the read deadline on every message and pong, and dispatches: fast requests inline, those that
// may wait (doc.go lists them) on their own goroutines so that no request delays acks or input of
// other channels. It returns the error that ended the connection.
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
	c.ws.SetPongHandler(func(data string) error {
		if c.lease != nil {
			c.lease.renew(data, time.Now())
		}
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
		size := int64(msg.Len()) // the message's whole length, its discarded part included
		if over {
			n, err := io.Copy(io.Discard, r)
			if err != nil {
				return err
			}
			size += n
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
		if c.fenced() {
			return context.Cause(c.ctx)
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
			c.refuseFrame(msg.Bytes(), int(size)-proto.HeaderLen, e)
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
	if perr != nil || req.Method != proto.MethodInitialize || req.IsNotification() {
		c.closeAfterQueued(websocket.ClosePolicyViolation, why)
		return
	}
	ip, e := proto.DecodeInitialize(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	_, span := c.startSpan(otel.SpanInitialize, proto.MethodInitialize, ip.Meta, 0)
	defer span.End()
	c.initialized = true
	c.screens = ip.Capabilities[proto.CapabilityScreen] == true
	c.pipes = ip.Capabilities[proto.CapabilityPipes] == true
	c.reply(req.ID, proto.InitializeResult{
		Server:   proto.ServerInfo{Name: "muxterm", Version: c.opts.Version},
		Protocol: proto.Subprotocol,
		Limits:   c.opts.limits(),
		Flow: proto.Flow{Window: c.opts.Window, AckBytes: ackBytes(c.opts.Window),
			ResumeHoldMs: c.resumeHoldMs()},
		Capabilities: proto.ServerCapabilities{Screen: c.reg.Screens(), Pipes: true},
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
	case proto.MethodInitialize:
		c.replyErr(req.ID, proto.ErrInvalidRequest("initialize was already called"))
	case proto.MethodSessionOpen:
		c.handleOpen(req)
	case proto.MethodSessionAttach:
		c.handleAttach(req)
	case proto.MethodSessionDetach:
		c.handleDetach(req)
	case proto.MethodSessionCloseStdin:
		c.handleCloseStdin(req)
	case proto.MethodSessionResize:
		c.handleResize(req)
	case proto.MethodSessionSignal:
		c.handleSignal(req)
	case proto.MethodSessionKill:
		c.handleKill(req)
	case proto.MethodSessionList:
		c.handleList(req)
	case proto.MethodSessionLease:
		c.handleLease(req)
	case proto.MethodSessionCapture:
		c.handleCapture(req)
	case proto.MethodRecordingList:
		c.handleRecordingList(req)
	case proto.MethodRecordingRead:
		c.handleRecordingRead(req)
	case proto.MethodShareCreate, proto.MethodShareList, proto.MethodShareRevoke:
		c.handleShare(req)
	default:
		c.replyErr(req.ID, proto.ErrMethodNotFound(req.Method))
	}
}

// handleBinary handles input and ack frames.
func (c *conn) handleBinary(b []byte) {
	payload := max(len(b)-proto.HeaderLen, 0)
	f, err := proto.ParseFrame(b)
	if err != nil {
		c.refuseFrame(b, payload, c.onKnownChannel(proto.ErrBadFrame(err.Error()), b))
		return
	}
	if f.Type == proto.FrameOutput || f.Type == proto.FrameStderr {
		c.refuseFrame(b, payload, c.onKnownChannel(proto.ErrBadFrame("output frames go from server to client"), b))
		return
	}
	c.mu.Lock()
	ch := c.channels[f.Channel]
	c.mu.Unlock()
	if ch == nil || !ch.ready.Load() || ch.detached.Load() {
		c.refuseFrame(b, payload, proto.ErrUnknownChannel(f.Channel))
		return
	}
	switch f.Type {
	case proto.FrameAck:
		if err := ch.credit.give(int64(f.AckCount())); err != nil {
			c.refuseFrame(b, payload, withChannel(proto.ErrBadFrame(fmt.Sprintf("channel %d: %v", f.Channel, err)), f.Channel))
			return
		}
		ch.b.ack(int(f.AckCount()))
		if ch.starved.Swap(false) {
			c.markReady(ch)
		}
	case proto.FrameInput:
		defer c.tookInput(f.Channel, len(f.Payload)) // whatever became of it
		if c.opts.ReadOnly {
			c.refuseFrame(b, payload, withChannel(proto.ErrForbidden("read-only principal: input dropped"), f.Channel))
			return
		}
		if !c.opts.InputRate.Allow(ch.sessionID(), float64(len(f.Payload))) {
			c.refuseFrame(b, payload, withChannel(errInputRate(c.opts.InputRate), f.Channel))
			return
		}
		c.tel.Instruments.BytesIn.Add(c.ctx, int64(len(f.Payload)))
		if err := ch.b.write(f.Payload); err != nil {
			c.refuseFrame(b, payload, withChannel(ch.b.wireError(err), f.Channel))
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
