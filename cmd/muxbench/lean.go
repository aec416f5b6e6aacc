package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// leanClient is a muxterm.v1 client (docs/protocol.md) that does everything in the goroutine
// that calls it: it reads the socket itself, so an echo measured through it reaches the
// measuring goroutine without the Go client's hand-off (client's readLoop → Channel.Read through
// a sync.Cond). It exists to measure how much of the echo's time is that hand-off: the
// pass-through's harness also reads its socket in the measuring goroutine.
//
// It is a whole protocol client, not a shortcut: it initializes, opens sessions with
// session.open, sends input frames, acknowledges every output byte it consumes, counts gaps,
// follows session.closed, reports the gateway's id-less errors, and kills its sessions at the
// end. Output it reads while waiting for something else is consumed (counted and acknowledged)
// and dropped. It spells none of the protocol itself: the frame codec, the method and
// notification names, the params, the results and the message it reads (proto.Message) are
// proto's, so a change to the wire reaches it through the compiler.
//
// Acks follow the protocol's idle rule as closely as the Go client does next to a stream (its
// reader drains its buffer on nearly every Read, and acks whenever it does): each output frame
// of a channel other than hold is acknowledged as soon as it is consumed, as the probe client
// does; hold's (the echo's channel) at flow.ackBytes and when the client goes idle (idle: the
// echo came), off the clock.
//
// Not safe for concurrent use: one goroutine owns every field but cancelled. Only the context's
// AfterFunc touches the connection from elsewhere: it closes it.
type leanClient struct {
	ws       leanSocket
	url      string               // where it dialled, with token: kill's fresh connection
	token    string               //
	ackBytes int                  // from initialize's flow
	nextID   int64                // the last request id used
	nextCh   uint32               // the last channel number used
	chans    map[uint32]*leanChan // bound channels (and killed ones until their session.closed)
	replies  map[int64]leanReply  // responses that came while waiting for something else
	rbuf     []byte               // the message being read
	wbuf     []byte               // the frame being written
	stop     func() bool          // ends the context's AfterFunc
	ctx      context.Context      // the client's context (nil in the tests' fakes)
	hold     *leanChan            // the echo's channel: acknowledged at ackBytes and on idle only
	acks     int64                // ack frames sent

	cancelled atomic.Bool // the context ended: the AfterFunc closed the connection
}

// leanSocket is what leanClient needs of a *websocket.Conn (a fake in the tests).
type leanSocket interface {
	NextReader() (int, io.Reader, error)
	WriteMessage(messageType int, data []byte) error
	Close() error
}

// leanChan is one channel's accounting.
type leanChan struct {
	id      uint32
	session string
	recv    int64 // output payload bytes received (each consumed as it is read)
	unacked int   // of those, not yet acknowledged
	lost    int64 // bytes session.gap reported skipped (fatal on hold)
	killed  bool  // session.kill was sent: an ack racing its session.closed may be refused
	closed  bool  // session.closed arrived: the channel is free
	exited  bool  // session.exit arrived
}

// leanReply is one response: its result or its error.
type leanReply struct {
	result json.RawMessage
	err    *proto.Error
}

// dialLean connects to url with token, initializes, and takes the flow parameters. ctx bounds
// the dial and, for the client's whole life, every read and write: when it ends, the AfterFunc
// closes the socket's net.Conn, which ends every blocked read and write (a deadline set on the
// net.Conn would not bound writes: gorilla sets the write deadline again on every data write).
func dialLean(ctx context.Context, url, token string) (*leanClient, error) {
	ws, err := dialRaw(ctx, url, token)
	if err != nil {
		return nil, fmt.Errorf("lean client: %w", err)
	}
	l := newLean(ws)
	l.url, l.token, l.ctx = url, token, ctx
	l.stop = context.AfterFunc(ctx, func() {
		l.cancelled.Store(true)
		_ = ws.NetConn().Close()
	})
	var res proto.InitializeResult
	if err := l.call(proto.MethodInitialize, proto.InitializeParams{Client: proto.ClientInfo{Name: "muxbench-lean", Version: "1"}}, &res); err != nil {
		l.close()
		return nil, fmt.Errorf("lean client: %w", err)
	}
	if res.Protocol != proto.Subprotocol {
		l.close()
		return nil, fmt.Errorf("lean client: initialize: protocol %q", res.Protocol)
	}
	l.ackBytes = max(res.Flow.AckBytes, 1)
	return l, nil
}

func newLean(ws leanSocket) *leanClient {
	return &leanClient{ws: ws, ackBytes: 1, chans: map[uint32]*leanChan{}, replies: map[int64]leanReply{},
		rbuf: make([]byte, 0, proto.HeaderLen+proto.MaxOutputPayload)}
}

// within bounds the socket's reads and writes by d until the returned func is called, through
// gorilla's own deadlines (it applies its write deadline to every write); it reports false (and
// bounds nothing) once the context has ended.
func (l *leanClient) within(d time.Duration) (end func(), ok bool) {
	if l.cancelled.Load() {
		return func() {}, false
	}
	ws, isWS := l.ws.(*websocket.Conn)
	if !isWS {
		return func() {}, true
	}
	t := time.Now().Add(d)
	_ = ws.SetReadDeadline(t)
	_ = ws.SetWriteDeadline(t)
	return func() {
		_ = ws.SetReadDeadline(time.Time{})
		_ = ws.SetWriteDeadline(time.Time{})
	}, true
}

// close closes the socket (sessions left open are the gateway's to keep or reap: call kill
// first).
func (l *leanClient) close() {
	if l.stop != nil {
		l.stop()
	}
	if ws, ok := l.ws.(*websocket.Conn); ok {
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
			time.Now().Add(time.Second))
	}
	_ = l.ws.Close()
}

// readMessage reads one whole message into l.rbuf, which it reuses.
func (l *leanClient) readMessage() (int, []byte, error) {
	typ, r, err := l.ws.NextReader()
	if err != nil {
		return 0, nil, fmt.Errorf("read: %w", err)
	}
	b := l.rbuf[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			l.rbuf = b
			return typ, b, nil
		}
		if err != nil {
			return 0, nil, fmt.Errorf("read: %w", err)
		}
	}
}

// step reads and handles one message. For an output frame it returns the channel and the
// payload (valid until the next step); the bytes count as consumed, and are acknowledged here:
// at once, or for hold once ackBytes of them are unacknowledged.
func (l *leanClient) step() (*leanChan, []byte, error) {
	typ, b, err := l.readMessage()
	if err != nil {
		return nil, nil, err
	}
	switch typ {
	case websocket.BinaryMessage:
		return l.output(b)
	case websocket.TextMessage:
		return nil, nil, l.text(b)
	}
	return nil, nil, fmt.Errorf("unexpected message type %d", typ)
}

// output accounts for one binary message from the gateway, which sends only output frames.
func (l *leanClient) output(b []byte) (*leanChan, []byte, error) {
	f, err := proto.ParseFrame(b)
	if err != nil {
		return nil, nil, fmt.Errorf("frame from the gateway: %w", err)
	}
	if f.Type != proto.FrameOutput {
		return nil, nil, fmt.Errorf("frame of type %d from the gateway", f.Type)
	}
	if len(f.Payload) > proto.MaxOutputPayload {
		return nil, nil, fmt.Errorf("output frame of %d bytes on channel %d", len(f.Payload), f.Channel)
	}
	ch := l.chans[f.Channel]
	if ch == nil || ch.closed {
		return nil, nil, fmt.Errorf("output on channel %d, which is not bound", f.Channel)
	}
	ch.recv += int64(len(f.Payload))
	ch.unacked += len(f.Payload)
	if ch != l.hold || ch.unacked >= l.ackBytes {
		if err := l.ack(ch); err != nil {
			return nil, nil, err
		}
	}
	return ch, f.Payload, nil
}

// ack acknowledges what ch has consumed and not acknowledged.
func (l *leanClient) ack(ch *leanChan) error {
	if ch.unacked == 0 || ch.closed {
		return nil
	}
	l.wbuf = proto.AppendAck(l.wbuf[:0], ch.id, uint32(ch.unacked))
	if err := l.ws.WriteMessage(websocket.BinaryMessage, l.wbuf); err != nil {
		return fmt.Errorf("ack %d bytes on channel %d: %w", ch.unacked, ch.id, err)
	}
	ch.unacked = 0
	l.acks++
	return nil
}

// idle acknowledges everything consumed and not yet acknowledged, on every channel (in effect
// hold's: the others are acknowledged frame by frame). Call it when the client stops reading
// (an echo came).
func (l *leanClient) idle() error {
	for _, ch := range l.chans {
		if err := l.ack(ch); err != nil {
			return err
		}
	}
	return nil
}

// text handles a response or a notification.
func (l *leanClient) text(b []byte) error {
	var m proto.Message
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("text message from the gateway: %w", err)
	}
	if m.IsNotification() {
		return l.notification(m.Method, m.Params)
	}
	if !m.HasID() {
		if m.Error == nil {
			return fmt.Errorf("response without id: %.200s", b)
		}
		// An ack that crossed its channel's session.closed after a kill is refused; nothing
		// else about a frame is expected.
		if m.Error.Kind() == proto.KindUnknownChannel {
			if c, ok := m.Error.Channel(); ok {
				if ch := l.chans[c]; ch != nil && ch.killed {
					return nil
				}
			}
		}
		return fmt.Errorf("gateway: %w", m.Error)
	}
	id, err := strconv.ParseInt(string(m.ID), 10, 64)
	if err != nil {
		return fmt.Errorf("response with id %s, which was never sent", m.ID)
	}
	l.replies[id] = leanReply{result: m.Result, err: m.Error}
	return nil
}

func (l *leanClient) notification(method string, raw json.RawMessage) error {
	switch method {
	case proto.MethodSessionGap:
		var p proto.SessionGapParams
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
		if ch := l.chans[p.Channel]; ch != nil {
			ch.lost += p.Lost
			if ch == l.hold {
				return fmt.Errorf("channel %d (session %s): a gap of %d bytes in the echo", ch.id, ch.session, p.Lost)
			}
		}
	case proto.MethodSessionExit:
		var p proto.SessionExitParams
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
		if ch := l.chans[p.Channel]; ch != nil {
			ch.exited = true
		}
	case proto.MethodSessionClosed:
		var p proto.SessionClosedParams
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
		if ch := l.chans[p.Channel]; ch != nil {
			ch.closed = true
			ch.unacked = 0
			if !ch.killed {
				return fmt.Errorf("channel %d (session %s) closed: %s", ch.id, ch.session, p.Reason)
			}
		}
	case proto.MethodRestart:
		return errors.New("the gateway is restarting in place")
	}
	// session.size and notifications this client does not know need nothing.
	return nil
}

// send writes a request and returns its id.
func (l *leanClient) send(method string, params any) (int64, error) {
	l.nextID++
	msg, err := proto.MarshalRequest(l.nextID, method, params)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", method, err)
	}
	if err := l.ws.WriteMessage(websocket.TextMessage, msg); err != nil {
		return 0, fmt.Errorf("%s: %w", method, err)
	}
	return l.nextID, nil
}

// wait reads until the response to id has come and decodes its result into out (if not nil).
func (l *leanClient) wait(method string, id int64, out any) error {
	for {
		if r, ok := l.replies[id]; ok {
			delete(l.replies, id)
			if r.err != nil {
				return fmt.Errorf("%s: %w", method, r.err)
			}
			if out != nil {
				if err := json.Unmarshal(r.result, out); err != nil {
					return fmt.Errorf("%s: result: %w", method, err)
				}
			}
			return nil
		}
		if _, _, err := l.step(); err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
	}
}

// call sends a request and waits for its response.
func (l *leanClient) call(method string, params any, out any) error {
	id, err := l.send(method, params)
	if err != nil {
		return err
	}
	return l.wait(method, id, out)
}

// open runs argv in a new 80×24 session with env, on the next channel number.
func (l *leanClient) open(argv []string, env map[string]string) (*leanChan, error) {
	l.nextCh++
	ch := &leanChan{id: l.nextCh}
	var res proto.OpenResult
	// Bind the channel before the request: its first output frame may follow the result in
	// the same read.
	l.chans[ch.id] = ch
	err := l.call(proto.MethodSessionOpen, proto.OpenParams{Channel: ch.id, Cmd: argv, Cols: 80, Rows: 24, Env: env}, &res)
	if err != nil {
		delete(l.chans, ch.id)
		return nil, fmt.Errorf("open %q: %w", argv, err)
	}
	ch.session = res.Session
	return ch, nil
}

// input writes p to ch's session.
func (l *leanClient) input(ch *leanChan, p []byte) error {
	l.wbuf = proto.AppendFrame(l.wbuf[:0], proto.FrameInput, ch.id, p)
	if err := l.ws.WriteMessage(websocket.BinaryMessage, l.wbuf); err != nil {
		return fmt.Errorf("input on channel %d: %w", ch.id, err)
	}
	return nil
}

// read reads until ch has output and returns how many bytes came (output of other channels is
// consumed meanwhile). It fails once ch is closed.
func (l *leanClient) read(ch *leanChan) (int, error) {
	for !ch.closed {
		c, p, err := l.step()
		if err != nil {
			return 0, err
		}
		if c == ch && len(p) > 0 {
			return len(p), nil
		}
	}
	return 0, io.EOF
}

// readUntil reads ch until its output contains want, for at most readUntilTimeout.
func (l *leanClient) readUntil(ch *leanChan, want string) error {
	end, _ := l.within(readUntilTimeout)
	defer end()
	var out []byte
	for !strings.Contains(string(out), want) {
		if ch.closed {
			return fmt.Errorf("wait for %q (got %q): channel closed", want, tail(out))
		}
		c, p, err := l.step()
		if err != nil {
			return fmt.Errorf("wait for %q (got %q): %w", want, tail(out), err)
		}
		if c == ch {
			out = append(out, p...)
		}
	}
	return nil
}

// kill kills every session this client opened and waits for each kill's result and each
// channel's session.closed, acknowledging output meanwhile (session.closed follows the
// channel's last byte, which waits for credit), for at most 10 s. Once the client's context has
// ended (the AfterFunc closed its connection), it kills them over a fresh connection instead
// (killFresh), so that a cancelled run leaves nothing running in the gateway.
func (l *leanClient) kill() error {
	end, ok := l.within(10 * time.Second)
	defer end()
	if !ok {
		return l.killFresh()
	}
	err := l.killHere()
	if err != nil && l.cancelled.Load() {
		if ferr := l.killFresh(); ferr != nil {
			return errors.Join(err, ferr)
		}
		return nil
	}
	return err
}

func (l *leanClient) killHere() error {
	var ids []int64
	for _, ch := range l.chans {
		if ch.closed || ch.killed {
			continue
		}
		ch.killed = true
		id, err := l.send(proto.MethodSessionKill, proto.KillParams{Session: ch.session})
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if err := l.wait(proto.MethodSessionKill, id, nil); err != nil {
			return err
		}
	}
	for _, ch := range l.chans {
		for !ch.closed {
			if _, _, err := l.step(); err != nil {
				return fmt.Errorf("wait for channel %d's session.closed: %w", ch.id, err)
			}
		}
	}
	return nil
}

// killFresh kills every session not known closed over a new connection, bounded by 10 s of a
// context that outlives the client's (which has ended). A session already gone
// (unknown_session: its kill on the old connection went through) is not an error.
func (l *leanClient) killFresh() error {
	var sessions []*leanChan
	for _, ch := range l.chans {
		if !ch.closed && ch.session != "" {
			sessions = append(sessions, ch)
		}
	}
	if len(sessions) == 0 {
		return nil
	}
	parent := l.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), 10*time.Second)
	defer cancel()
	k, err := dialLean(ctx, l.url, l.token)
	if err != nil {
		return fmt.Errorf("kill after the context ended: %w", err)
	}
	defer k.close()
	ids := make([]int64, len(sessions))
	for i, ch := range sessions {
		ch.killed = true
		if ids[i], err = k.send(proto.MethodSessionKill, proto.KillParams{Session: ch.session}); err != nil {
			return fmt.Errorf("kill after the context ended: %w", err)
		}
	}
	for i, ch := range sessions {
		err := k.wait(proto.MethodSessionKill, ids[i], nil)
		var perr *proto.Error
		if err != nil && !(errors.As(err, &perr) && perr.Kind() == proto.KindUnknownSession) {
			return fmt.Errorf("kill session %s after the context ended: %w", ch.session, err)
		}
		ch.closed = true
	}
	return nil
}
