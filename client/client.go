package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// DialOptions configure a Client.
type DialOptions struct {
	Token  string      // sent as Authorization: Bearer
	Origin string      // sent as Origin when set
	Header http.Header // extra headers
	Name   string      // client name sent with initialize (default "muxterm-go")
	// Dialer defaults to a copy of websocket.DefaultDialer with the subprotocol set.
	Dialer *websocket.Dialer
	// OnServerError, if set, receives each error the server sent without a request id (about a
	// binary frame or a message it could not parse; docs/protocol.md §5). It runs on the
	// client's reader goroutine and must not block.
	OnServerError func(*proto.Error)
}

// Client speaks muxterm.v1 over one WebSocket. Its methods are safe for concurrent use; each
// Channel's Read is meant for one goroutine.
type Client struct {
	ws   *websocket.Conn
	Init proto.InitializeResult

	// wmu serialises writes (gorilla allows one writer at a time).
	wmu sync.Mutex

	// mu guards the fields below.
	mu       sync.Mutex
	nextID   int64
	calls    map[string]chan response
	channels map[uint32]*Channel
	nextCh   uint32
	closeErr error

	onServerError func(*proto.Error) // DialOptions.OnServerError; set before readLoop starts

	done chan struct{} // closed when readLoop ends

	// ackMu guards ackDue, the channels whose reader drained its buffer with bytes left
	// unacknowledged; ackLoop sends those acks, so they are never on the path of the output.
	ackMu   sync.Mutex
	ackDue  []*Channel
	ackWake chan struct{} // capacity 1
	ackDone chan struct{} // closed when ackLoop ends
}

type response struct {
	Result json.RawMessage
	Err    *proto.Error
}

// Dial connects, negotiates muxterm.v1 and calls initialize.
func Dial(ctx context.Context, url string, opts DialOptions) (*Client, error) {
	c, err := connect(ctx, url, opts)
	if err != nil {
		return nil, err
	}
	if err := c.Call(ctx, "initialize", initializeParams(opts), &c.Init); err != nil {
		c.Close()
		return nil, fmt.Errorf("initialize: %w", err)
	}
	return c, nil
}

// DialOpen dials like Dial and opens a session like Client.Open, in one round trip instead of
// two: it sends session.open right behind initialize, without waiting for initialize's result
// (the server handles a socket's messages in order; see docs/protocol.md). On any error the
// client is closed.
func DialOpen(ctx context.Context, url string, opts DialOptions, o OpenOptions) (*Client, *Channel, error) {
	c, err := connect(ctx, url, opts)
	if err != nil {
		return nil, nil, err
	}
	initCall, err := c.send("initialize", initializeParams(opts))
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("initialize: %w", err)
	}
	ch := c.newChannel()
	openCall, err := c.send("session.open", o.params(ch.ID))
	if err != nil {
		initCall.forget()
		c.dropChannel(ch)
		c.Close()
		return nil, nil, err
	}
	if err := initCall.wait(ctx, &c.Init); err != nil {
		openCall.forget()
		c.dropChannel(ch)
		c.Close()
		return nil, nil, fmt.Errorf("initialize: %w", err)
	}
	// The channel was made before the flow parameters were known; nothing has read it yet.
	ch.mu.Lock()
	ch.ackEvery = max(c.Init.Flow.AckBytes, 1)
	ch.mu.Unlock()
	var res proto.OpenResult
	if err := openCall.wait(ctx, &res); err != nil {
		c.dropChannel(ch)
		c.Close()
		return nil, nil, err
	}
	ch.setBound(res.Session, res.Offset, res.Pid)
	return c, ch, nil
}

// connect opens the socket and starts the client's goroutines; the caller initializes.
func connect(ctx context.Context, url string, opts DialOptions) (*Client, error) {
	d := websocket.DefaultDialer
	if opts.Dialer != nil {
		d = opts.Dialer
	}
	dd := *d
	dd.Subprotocols = []string{proto.Subprotocol}
	h := http.Header{}
	for k, v := range opts.Header {
		h[k] = v
	}
	if opts.Token != "" {
		h.Set("Authorization", "Bearer "+opts.Token)
	}
	if opts.Origin != "" {
		h.Set("Origin", opts.Origin)
	}
	ws, resp, err := dd.DialContext(ctx, url, h)
	if err != nil {
		if resp != nil {
			return nil, &DialError{Status: resp.StatusCode, Err: err}
		}
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	c := &Client{ws: ws, calls: make(map[string]chan response), channels: make(map[uint32]*Channel),
		done: make(chan struct{}), ackWake: make(chan struct{}, 1), ackDone: make(chan struct{}),
		onServerError: opts.OnServerError}
	go c.readLoop()
	go c.ackLoop()
	return c, nil
}

func initializeParams(opts DialOptions) map[string]any {
	name := opts.Name
	if name == "" {
		name = "muxterm-go"
	}
	return map[string]any{"client": map[string]any{"name": name, "version": "1"}, "capabilities": map[string]any{}}
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

// Close closes the socket; sessions keep running on the server. It does not detach: to the
// gateway this is a dropped socket, and it holds each read-write session's output for its
// resume hold (InitializeResult.Flow.ResumeHoldMs). Detach first when leaving for good.
func (c *Client) Close() error {
	err := c.ws.Close()
	<-c.done
	<-c.ackDone
	return err
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

// ackLoop sends the acks queueAck asked for, until the connection ends.
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

// Done is closed when the connection has ended; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended (a *websocket.CloseError for a close frame).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeErr
}

// writeMessage sends one WebSocket message.
func (c *Client) writeMessage(typ int, b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.ws.WriteMessage(typ, b)
}

// Call sends a request and decodes its result into out (if non-nil). A JSON-RPC error is
// returned as *Error.
func (c *Client) Call(ctx context.Context, method string, params any, out any) error {
	p, err := c.send(method, params)
	if err != nil {
		return err
	}
	return p.wait(ctx, out)
}

// pending is a request sent and not yet answered.
type pending struct {
	c      *Client
	id     string
	method string
	res    chan response
}

// send sends a request without waiting for its response; wait collects it.
func (c *Client) send(method string, params any) (*pending, error) {
	c.mu.Lock()
	if c.closeErr != nil {
		err := c.closeErr
		c.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	c.nextID++
	p := &pending{c: c, id: strconv.FormatInt(c.nextID, 10), method: method, res: make(chan response, 1)}
	c.calls[p.id] = p.res
	c.mu.Unlock()
	msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(p.id), "method": method, "params": params})
	if err == nil {
		err = c.writeMessage(websocket.TextMessage, msg)
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
	defer p.forget()
	select {
	case r := <-p.res:
		if r.Err != nil {
			return r.Err
		}
		if out != nil {
			if err := json.Unmarshal(r.Result, out); err != nil {
				return fmt.Errorf("%s: decode result: %w", p.method, err)
			}
		}
		return nil
	case <-p.c.done:
		// The reader delivers a response before it ends: one that came just before the close
		// (an initialize error ahead of a 1008) is the answer, not the close.
		select {
		case r := <-p.res:
			if r.Err != nil {
				return r.Err
			}
		default:
		}
		return fmt.Errorf("%s: %w", p.method, p.c.Err())
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", p.method, ctx.Err())
	}
}

// readMessage reads the next message. A binary message is read into scratch (and only grows
// past it if the server sent a frame longer than any output frame), so its bytes are valid until
// the next call; a text message gets a buffer of its own.
func (c *Client) readMessage(scratch []byte) (int, []byte, error) {
	typ, r, err := c.ws.NextReader()
	if err != nil {
		return typ, nil, err
	}
	if typ != websocket.BinaryMessage {
		b, err := io.ReadAll(r)
		return typ, b, err
	}
	n := 0
	for n < len(scratch) {
		m, err := r.Read(scratch[n:])
		n += m
		if err == io.EOF {
			return typ, scratch[:n], nil
		}
		if err != nil {
			return typ, nil, err
		}
	}
	rest, err := io.ReadAll(r)
	return typ, append(scratch[:n:n], rest...), err
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
	ch := &Channel{c: c, ID: c.nextCh, ackEvery: max(c.Init.Flow.AckBytes, 1),
		exited: make(chan struct{}), closed: make(chan struct{})}
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

// OpenOptions are session.open's params other than the channel.
type OpenOptions struct {
	Cmd  []string
	Cwd  string
	Env  map[string]string
	Cols int
	Rows int
	Name string
}

// params are session.open's params for o on channel.
func (o OpenOptions) params(channel uint32) proto.OpenParams {
	return proto.OpenParams{Channel: channel, Cmd: o.Cmd, Cwd: o.Cwd, Env: o.Env, Cols: o.Cols, Rows: o.Rows, Name: o.Name}
}

// Open starts a session and returns its channel.
func (c *Client) Open(ctx context.Context, o OpenOptions) (*Channel, error) {
	ch := c.newChannel()
	var res proto.OpenResult
	if err := c.Call(ctx, "session.open", o.params(ch.ID), &res); err != nil {
		c.dropChannel(ch)
		return nil, err
	}
	ch.setBound(res.Session, res.Offset, res.Pid)
	return ch, nil
}

// Attach binds a new channel to session id, replaying from from (nil: the oldest retained byte).
func (c *Client) Attach(ctx context.Context, id string, from *int64) (*Channel, proto.AttachResult, error) {
	ch := c.newChannel()
	params := map[string]any{"channel": ch.ID, "session": id}
	if from != nil {
		params["from"] = *from
	}
	var res proto.AttachResult
	if err := c.Call(ctx, "session.attach", params, &res); err != nil {
		c.dropChannel(ch)
		return nil, res, err
	}
	ch.setBound(res.Session, res.Offset, res.Pid)
	return ch, res, nil
}

// Kill kills session id.
func (c *Client) Kill(ctx context.Context, id string) (proto.KillResult, error) {
	var res proto.KillResult
	err := c.Call(ctx, "session.kill", map[string]any{"session": id}, &res)
	return res, err
}

// List lists the caller's sessions.
func (c *Client) List(ctx context.Context) ([]proto.SessionInfo, error) {
	var res proto.ListResult
	err := c.Call(ctx, "session.list", map[string]any{}, &res)
	return res.Sessions, err
}

// readLoop is the client's only reader. It routes responses to callers and output and
// notifications to channels, in order.
func (c *Client) readLoop() {
	defer close(c.done)
	// Output frames are read into one reused buffer and copied once, into their channel.
	scratch := make([]byte, proto.HeaderLen+proto.MaxOutputPayload)
	for {
		typ, b, err := c.readMessage(scratch)
		if err != nil {
			c.mu.Lock()
			c.closeErr = err
			chs := make([]*Channel, 0, len(c.channels))
			for _, ch := range c.channels {
				chs = append(chs, ch)
			}
			c.mu.Unlock()
			for _, ch := range chs {
				ch.end(io.ErrUnexpectedEOF)
			}
			return
		}
		if typ == websocket.BinaryMessage {
			f, err := proto.ParseFrame(b)
			if err != nil || f.Type != proto.FrameOutput {
				continue
			}
			c.mu.Lock()
			ch := c.channels[f.Channel]
			c.mu.Unlock()
			if ch != nil {
				ch.push(f.Payload)
			}
			continue
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
			Error  *proto.Error    `json:"error"`
		}
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		if m.Method != "" {
			c.notification(m.Method, m.Params)
			continue
		}
		if len(m.ID) == 0 || string(m.ID) == "null" {
			if m.Error != nil && c.onServerError != nil {
				c.onServerError(m.Error)
			}
			continue
		}
		c.mu.Lock()
		call := c.calls[string(m.ID)]
		c.mu.Unlock()
		if call != nil {
			call <- response{Result: m.Result, Err: m.Error}
		}
	}
}

func (c *Client) notification(method string, raw json.RawMessage) {
	var p struct {
		Channel uint32  `json:"channel"`
		Lost    int64   `json:"lost"`
		Code    int     `json:"code"`
		Signal  *string `json:"signal"`
		Reason  string  `json:"reason"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return
	}
	c.mu.Lock()
	ch := c.channels[p.Channel]
	c.mu.Unlock()
	if ch == nil {
		return
	}
	switch method {
	case "session.gap":
		ch.gap(p.Lost)
	case "session.exit":
		ch.setExit(proto.ExitInfo{Code: p.Code, Signal: p.Signal})
	case "session.closed":
		c.dropChannel(ch)
		ch.setClosed(p.Reason)
	}
}

// Channel is one bound channel. Read returns its output in order and acknowledges what it
// returns (see Read for when); a Channel that is not read stops receiving once the server's
// window is full.
type Channel struct {
	c        *Client
	ID       uint32
	ackEvery int // from initialize's flow; DialOpen sets it once the result is in, before returning

	exited chan struct{} // closed on session.exit
	closed chan struct{} // closed on session.closed or connection end

	// mu guards the fields below; cond signals new data or the end.
	mu      sync.Mutex
	cond    *sync.Cond
	session string
	pid     int
	// offset is the resume offset: the attach offset plus the bytes Read returned plus the
	// gaps Read passed. Bytes received but not yet read do not count: a client resumes from
	// what it consumed.
	offset int64
	segs   []segment // received, not yet read, in order
	// unacked counts bytes Read returned and not yet acknowledged. Read acknowledges them
	// itself once they reach ackEvery; when it drains the buffer with fewer, the client's
	// ackLoop acknowledges them right after Read returns, so the ack is not on the path of the
	// output it follows (an echo). Read also acknowledges anything left before it waits.
	unacked int
	// ackQueued: queued in Client.ackDue and not flushed since. A flush by Read's idle path
	// clears it with the channel still queued; that stale entry later sends nothing.
	ackQueued bool
	detaching bool // Detach is sending its request: no more acks
	lost      int64
	exit      *proto.ExitInfo
	reason    string
	endErr    error
}

// segment is received output, or a gap of lost bytes, in stream order.
type segment struct {
	gap  int64
	data []byte
}

func (ch *Channel) setBound(id string, offset int64, pid int) {
	ch.mu.Lock()
	ch.session, ch.pid = id, pid
	// Output may already have arrived; Read counts it from here.
	ch.offset = offset
	ch.mu.Unlock()
}

// Session returns the session id.
func (ch *Channel) Session() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.session
}

// Pid returns the session's process id.
func (ch *Channel) Pid() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.pid
}

// Offset is where a new attach resumes so that nothing already received repeats.
func (ch *Channel) Offset() int64 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.offset
}

// Lost returns the bytes announced lost by session.gap.
func (ch *Channel) Lost() int64 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.lost
}

// Exited is closed when the session's process exited; ExitInfo then holds its status.
func (ch *Channel) Exited() <-chan struct{} { return ch.exited }

// ExitInfo returns the exit, or nil.
func (ch *Channel) ExitInfo() *proto.ExitInfo {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.exit
}

// Closed is closed on session.closed or when the connection ends; Reason says which.
func (ch *Channel) Closed() <-chan struct{} { return ch.closed }

// Reason returns the session.closed reason, or "" if the connection ended instead.
func (ch *Channel) Reason() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.reason
}

func (ch *Channel) push(p []byte) {
	ch.mu.Lock()
	if n := len(ch.segs); n > 0 && ch.segs[n-1].gap == 0 {
		ch.segs[n-1].data = append(ch.segs[n-1].data, p...)
	} else {
		ch.segs = append(ch.segs, segment{data: append([]byte(nil), p...)})
	}
	ch.cond.Broadcast()
	ch.mu.Unlock()
}

func (ch *Channel) gap(n int64) {
	ch.mu.Lock()
	ch.lost += n
	ch.segs = append(ch.segs, segment{gap: n})
	ch.cond.Broadcast()
	ch.mu.Unlock()
}

// Buffered returns the bytes received and not yet returned by Read.
func (ch *Channel) Buffered() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.bufferedLocked()
}

// bufferedLocked returns the bytes received and not yet read. ch.mu must be held.
func (ch *Channel) bufferedLocked() int {
	n := 0
	for _, s := range ch.segs {
		n += len(s.data)
	}
	return n
}

func (ch *Channel) setExit(e proto.ExitInfo) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.exit == nil {
		ch.exit = &e
		close(ch.exited)
	}
}

func (ch *Channel) setClosed(reason string) {
	ch.mu.Lock()
	ch.reason = reason
	ch.mu.Unlock()
	ch.end(io.EOF)
}

func (ch *Channel) end(err error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.endErr == nil {
		ch.endErr = err
		close(ch.closed)
		ch.cond.Broadcast()
	}
}

// Read returns buffered output, waiting for some; it returns io.EOF after session.closed and
// io.ErrUnexpectedEOF when the connection ended. Bytes returned are acknowledged: in the same
// call once flow.ackBytes have accumulated, else as soon as Read has drained the buffer (by the
// client's ack goroutine, right after Read returns).
func (ch *Channel) Read(p []byte) (int, error) {
	ch.mu.Lock()
	for {
		// Pass gaps at the head: they advance the offset.
		for len(ch.segs) > 0 && ch.segs[0].gap > 0 {
			ch.offset += ch.segs[0].gap
			ch.segs = ch.segs[1:]
		}
		if len(ch.segs) > 0 || ch.endErr != nil {
			break
		}
		if ch.unacked > 0 && !ch.detaching {
			// Idle before the ack goroutine got to it: acknowledge before waiting.
			ch.mu.Unlock()
			ch.flushAck()
			ch.mu.Lock()
			continue
		}
		ch.cond.Wait()
	}
	if len(ch.segs) == 0 {
		err := ch.endErr
		ch.mu.Unlock()
		return 0, err
	}
	n := copy(p, ch.segs[0].data)
	ch.segs[0].data = ch.segs[0].data[n:]
	if len(ch.segs[0].data) == 0 {
		ch.segs = ch.segs[1:]
	}
	ch.offset += int64(n)
	ch.unacked += n
	flush, queue := false, false
	switch {
	case ch.detaching:
	case ch.unacked >= ch.ackEvery:
		flush = true
	case ch.bufferedLocked() == 0 && !ch.ackQueued:
		ch.ackQueued, queue = true, true
	}
	ch.mu.Unlock()
	if flush {
		ch.flushAck()
	}
	if queue {
		ch.c.queueAck(ch)
	}
	return n, nil
}

// flushAck acknowledges every byte Read has returned and not yet acknowledged, unless the
// binding is ending: detached, or closed by the server (which no longer knows the channel).
// It takes the count under the client's write lock, which Detach's request also needs, so an
// ack either goes out before the detach request or sees detaching and sends nothing.
func (ch *Channel) flushAck() {
	ch.c.wmu.Lock()
	defer ch.c.wmu.Unlock()
	ch.mu.Lock()
	ack := ch.unacked
	if ch.detaching || ch.endErr != nil {
		ack = 0
	}
	ch.unacked, ch.ackQueued = 0, false
	ch.mu.Unlock()
	if ack > 0 {
		_ = ch.c.ws.WriteMessage(websocket.BinaryMessage, proto.AppendAck(nil, ch.ID, uint32(ack)))
	}
}

// Write sends input.
func (ch *Channel) Write(p []byte) (int, error) {
	if err := ch.c.writeMessage(websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameInput, ch.ID, p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Resize resizes the terminal.
func (ch *Channel) Resize(ctx context.Context, cols, rows int) error {
	return ch.c.Call(ctx, "session.resize", map[string]any{"channel": ch.ID, "cols": cols, "rows": rows}, nil)
}

// Signal sends a signal ("INT", ...) to the foreground process group.
func (ch *Channel) Signal(ctx context.Context, sig string) error {
	return ch.c.Call(ctx, "session.signal", map[string]any{"channel": ch.ID, "signal": sig}, nil)
}

// Detach unbinds the channel; the session keeps running.
func (ch *Channel) Detach(ctx context.Context) error {
	ch.mu.Lock()
	ch.detaching = true // from here on flushAck sends nothing (see there)
	ch.mu.Unlock()
	err := ch.c.Call(ctx, "session.detach", map[string]any{"channel": ch.ID}, nil)
	ch.c.dropChannel(ch)
	ch.end(io.EOF)
	return err
}

// ReadUntil reads until the accumulated output contains want, or ctx ends. It returns all
// that was read.
func (ch *Channel) ReadUntil(ctx context.Context, want string) (string, error) {
	var out []byte
	buf := make([]byte, 32<<10)
	type result struct {
		n   int
		err error
	}
	for {
		res := make(chan result, 1)
		go func() {
			n, err := ch.Read(buf)
			res <- result{n, err}
		}()
		select {
		case r := <-res:
			out = append(out, buf[:r.n]...)
			if bytes.Contains(out, []byte(want)) {
				return string(out), nil
			}
			if r.err != nil {
				return string(out), fmt.Errorf("read until %q: %w", want, r.err)
			}
		case <-ctx.Done():
			// Unblock the pending Read; the channel is unusable afterwards.
			ch.end(ctx.Err())
			<-res
			return string(out), fmt.Errorf("read until %q: %w (got %q)", want, ctx.Err(), tail(out))
		}
	}
}

func tail(b []byte) string {
	if len(b) > 200 {
		b = b[len(b)-200:]
	}
	return string(b)
}

// Wait waits for the channel to close or ctx to end.
func (ch *Channel) Wait(ctx context.Context) error {
	select {
	case <-ch.closed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
