package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

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
