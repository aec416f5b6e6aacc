package client

import (
	"encoding/json"
	"io"
	"sync"

	"github.com/muxterm/muxterm/proto"
)

// Channel is one bound channel. Read returns its output in order and acknowledges what it
// returns (see Read for when); a Channel that is not read stops receiving once the server's
// window is full. Its methods are safe for concurrent use, but Read and ReadContext are meant
// for one goroutine at a time.
type Channel struct {
	c  *Client
	ID uint32

	exited chan struct{} // closed on session.exit
	closed chan struct{} // closed on session.closed, Detach, or the client's end
	sized  chan struct{} // capacity 1: a wake-up after the session's size changed

	// mu guards the fields below; cond signals new data, the end, or a ctx's end to Read.
	// Lock order: Client.wmu before Channel.mu (flushAck); Channel.mu and Client.mu are never
	// held together.
	mu      sync.Mutex
	cond    *sync.Cond
	session string
	pid     int
	// on is the link the current binding lives on; acks go there.
	on *link
	// epoch counts bindings (the first, then one per reconnect). Output is acknowledged only
	// to the binding that sent it: bytes of an earlier binding still buffered are read without
	// an ack.
	epoch int
	// offset is the resume offset of what was consumed: the attach offset plus the bytes Read
	// returned plus the gaps Read passed.
	offset int64
	// next is the offset of the next byte to arrive: what a reconnect resumes from, since the
	// bytes received and not yet read are kept.
	next int64
	// paintIn is the bytes of a paint of the screen (an attach's result.screen) still to
	// arrive: they have no offsets, so they do not advance next, and their segments are marked
	// (segment.paint) so that Read does not count them into offset. screen is the attach's
	// screen mode, which a resume keeps.
	paintIn int64
	screen  string
	// inflight counts bytes of the current binding received and not yet acknowledged: never
	// more than the server's window, else the server ignored its window (ErrProtocol).
	inflight int64
	segs     []segment // received, not yet read, in order
	// unacked counts bytes of the current binding Read returned and not yet acknowledged. Read
	// acknowledges them itself once they reach the server's ackBytes; when it drains the buffer
	// with fewer, the client's ackLoop acknowledges them right after Read returns, so the ack
	// is not on the path of the output it follows (an echo). Read also acknowledges anything
	// left before it waits.
	unacked int
	// ackQueued: queued in Client.ackDue and not flushed since. A flush by Read's idle path
	// clears it with the channel still queued; that stale entry later sends nothing.
	ackQueued bool
	detaching bool // Detach is sending its request: no more acks
	lost      int64
	notify    func() // SetNotify's; called with no lock held
	cols      int    // the session's size as the gateway last said (results, session.size)
	rows      int
	sizes     uint64 // session.size notifications received
	exit      *proto.ExitInfo
	reason    string
	endErr    error
}

// segment is received output, or a gap of lost bytes, in stream order. The bytes of output are
// in a buffer of segBufs (buf) unless a frame was larger than one (then buf is nil): Read
// returns buf once it has read all of data, so a stream's output costs no allocation per frame.
type segment struct {
	gap   int64
	data  []byte
	buf   *[]byte
	epoch int
	paint bool // data is a paint of the screen: read, acknowledged, and no offsets
	// stderr: data is a pipe session's stderr (stderr frames); a read never spans both streams.
	stderr bool
}

// segBufs recycles segments' buffers, each room for one output frame.
var segBufs = sync.Pool{New: func() any { b := make([]byte, 0, proto.MaxOutputPayload); return &b }}

// newSegment holds a copy of p, in a recycled buffer when p fits one.
func newSegment(p []byte, epoch int) segment {
	if len(p) > proto.MaxOutputPayload {
		return segment{data: append([]byte(nil), p...), epoch: epoch}
	}
	buf := segBufs.Get().(*[]byte)
	return segment{data: append((*buf)[:0], p...), buf: buf, epoch: epoch}
}

// drop returns seg's buffer, whose bytes were all read, for another segment.
func (seg *segment) drop() {
	if seg.buf != nil {
		segBufs.Put(seg.buf)
	}
	*seg = segment{}
}

// bindOpen binds ch from session.open's response. It runs on the reader goroutine before the
// next message, so the binding precedes the session's first output.
func (ch *Channel) bindOpen(r response) {
	var res proto.OpenResult
	if r.Err != nil || r.lost != nil || json.Unmarshal(r.Result, &res) != nil {
		return
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.session, ch.pid, ch.on = res.Session, res.Pid, r.on
	ch.offset, ch.next, ch.inflight = res.Offset, res.Offset, 0
}

// bindOpenSized is bindOpen that also records the size the session was opened at, in wire
// order, before any session.size.
func (ch *Channel) bindOpenSized(o OpenOptions) func(response) error {
	return func(r response) error {
		ch.bindOpen(r)
		if r.Err == nil && r.lost == nil {
			ch.setSize(o.Cols, o.Rows)
		}
		return nil
	}
}

// bindAttach returns the binder of session.attach's response (see bindOpen).
func (ch *Channel) bindAttach(from *int64, screen string) func(response) error {
	return func(r response) error {
		var res proto.AttachResult
		if r.Err != nil || r.lost != nil || json.Unmarshal(r.Result, &res) != nil {
			return nil
		}
		if from != nil && res.Offset < *from {
			return violation("session.attach from %d: offset %d goes back", *from, res.Offset)
		}
		ch.mu.Lock()
		ch.session, ch.pid, ch.on = res.Session, res.Pid, r.on
		ch.offset, ch.next, ch.inflight = res.Offset, res.Offset, 0
		ch.screen = screen
		ch.paintIn = int64(res.Screen)
		ch.mu.Unlock()
		ch.setSize(res.Cols, res.Rows)
		if res.Exit != nil {
			ch.setExit(*res.Exit)
		}
		return nil
	}
}

// bindResume returns the binder of a reconnect's session.attach from ch's next offset: a new
// epoch, and a gap if the gateway no longer had every byte from there.
func (ch *Channel) bindResume(from int64) func(response) error {
	return func(r response) error {
		var res proto.AttachResult
		if r.Err != nil || r.lost != nil || json.Unmarshal(r.Result, &res) != nil {
			return nil
		}
		if res.Offset < from {
			return violation("session.attach from %d: offset %d goes back", from, res.Offset)
		}
		ch.mu.Lock()
		ch.on = r.on
		ch.epoch++
		ch.unacked, ch.ackQueued, ch.inflight = 0, false, 0
		if skip := res.Offset - from; skip > 0 {
			// Skipped to res.Offset: lost, unless a paint stands for those bytes.
			if res.Screen == 0 {
				ch.lost += skip
			}
			ch.segs = append(ch.segs, segment{gap: skip})
			ch.cond.Broadcast()
		}
		ch.next = res.Offset
		// A paint arrives before the bytes from res.Offset; one cut short by the drop is
		// followed by this whole new one (resumable asked for it).
		ch.paintIn = int64(res.Screen)
		ch.mu.Unlock()
		if res.Exit != nil {
			ch.setExit(*res.Exit)
		}
		return nil
	}
}

// resumable reports ch's session, next offset and screen mode if a reconnect should re-attach
// it: the attach's own mode, or a paint whatever happened if the last paint was cut short.
func (ch *Channel) resumable() (string, int64, string, bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	screen := ch.screen
	if ch.paintIn > 0 && screen != proto.ScreenNever {
		screen = proto.ScreenAlways
	}
	return ch.session, ch.next, screen, ch.session != "" && !ch.detaching && ch.endErr == nil
}

// Next is the offset of the next byte to arrive: the offset a resume of everything received
// asks for (the bytes received and not yet read counted, gaps included, a paint's not).
func (ch *Channel) Next() int64 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.next
}

// PaintPending reports whether bytes of the binding's paint of the screen have yet to arrive: a
// connection that drops then has delivered half a paint, and a resume should ask for a whole
// one (proto.ScreenAlways) on a terminal it has reset.
func (ch *Channel) PaintPending() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.paintIn > 0
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

// Offset is where a new attach resumes so that nothing already consumed repeats.
func (ch *Channel) Offset() int64 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.offset
}

// Lost returns the bytes announced lost: by session.gap, and by a reconnect that resumed past
// where it asked.
func (ch *Channel) Lost() int64 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.lost
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

// Size returns the session's size as the gateway last reported it (the open's size, the attach
// result, a resize's result, session.size); 0, 0 before any. With several viewers it is the
// gateway's --window-size policy's choice, which may differ from this client's own size.
func (ch *Channel) Size() (cols, rows int) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.cols, ch.rows
}

// SizeChanged receives a value (merged, never blocking the client) after Size changed.
func (ch *Channel) SizeChanged() <-chan struct{} { return ch.sized }

// SizeGen is Size with the number of session.size notifications received so far: a relay
// passes a notification on when the count moved.
func (ch *Channel) SizeGen() (cols, rows int, notified uint64) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.cols, ch.rows, ch.sizes
}

// setSize records a size from a result (open, attach, resize).
func (ch *Channel) setSize(cols, rows int) { ch.updateSize(cols, rows, false) }

// noteSize records a session.size notification.
func (ch *Channel) noteSize(cols, rows int) { ch.updateSize(cols, rows, true) }

func (ch *Channel) updateSize(cols, rows int, notified bool) {
	if cols <= 0 || rows <= 0 {
		return
	}
	ch.mu.Lock()
	changed := ch.cols != cols || ch.rows != rows
	ch.cols, ch.rows = cols, rows
	if notified {
		ch.sizes++
	}
	f := ch.notify
	ch.mu.Unlock()
	if changed {
		select {
		case ch.sized <- struct{}{}:
		default:
		}
	}
	if notified && f != nil {
		f()
	}
}

// Exited is closed when the session's process exited; ExitInfo then holds its status.
func (ch *Channel) Exited() <-chan struct{} { return ch.exited }

// ExitInfo returns the exit, or nil.
func (ch *Channel) ExitInfo() *proto.ExitInfo {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.exit
}

// Closed is closed on session.closed, Detach, or when the client ends; Reason says which.
func (ch *Channel) Closed() <-chan struct{} { return ch.closed }

// Reason returns the session.closed reason, or "" if the channel ended otherwise.
func (ch *Channel) Reason() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.reason
}

// push buffers output of the current binding (stderr: of a pipe session's stderr). More
// unacknowledged output than window, or output past MaxOffset, is a protocol violation, and
// nothing of it is kept.
func (ch *Channel) push(p []byte, window int, stderr bool) error {
	ch.mu.Lock()
	if ch.inflight+int64(len(p)) > int64(window) {
		ch.mu.Unlock()
		return violation("channel %d: %d bytes unacknowledged, beyond the window of %d", ch.ID, ch.inflight+int64(len(p)), window)
	}
	if ch.next+int64(len(p)) > MaxOffset {
		ch.mu.Unlock()
		return violation("channel %d: output past offset 2^53", ch.ID)
	}
	ch.inflight += int64(len(p))
	k := min(ch.paintIn, int64(len(p)))
	ch.paintIn -= k
	ch.next += int64(len(p)) - k
	ch.appendData(p[:k], true, false)
	ch.appendData(p[k:], false, stderr)
	ch.cond.Broadcast()
	f := ch.notify
	ch.mu.Unlock()
	if f != nil {
		f()
	}
	return nil
}

// appendData queues output p (a paint's, or not; stderr's, or not) after what is queued. ch.mu
// must be held.
func (ch *Channel) appendData(p []byte, paint, stderr bool) {
	if len(p) == 0 {
		return
	}
	if n := len(ch.segs); n > 0 && ch.segs[n-1].gap == 0 && ch.segs[n-1].epoch == ch.epoch &&
		ch.segs[n-1].paint == paint && ch.segs[n-1].stderr == stderr && cap(ch.segs[n-1].data)-len(ch.segs[n-1].data) >= len(p) {
		ch.segs[n-1].data = append(ch.segs[n-1].data, p...) // room left in its buffer: no copy of the rest
		return
	}
	seg := newSegment(p, ch.epoch)
	seg.paint, seg.stderr = paint, stderr
	ch.segs = append(ch.segs, seg)
}

// gap records a session.gap of n bytes: at least 1, and not past MaxOffset.
func (ch *Channel) gap(n int64) error {
	ch.mu.Lock()
	if n < 1 || n > MaxOffset-ch.next {
		next := ch.next
		ch.mu.Unlock()
		return violation("channel %d: session.gap of %d bytes at offset %d", ch.ID, n, next)
	}
	ch.lost += n
	ch.next += n
	ch.segs = append(ch.segs, segment{gap: n})
	ch.cond.Broadcast()
	f := ch.notify
	ch.mu.Unlock()
	if f != nil {
		f()
	}
	return nil
}

func (ch *Channel) setExit(e proto.ExitInfo) {
	ch.mu.Lock()
	if ch.exit == nil {
		ch.exit = &e
		close(ch.exited)
	}
	f := ch.notify
	ch.mu.Unlock()
	if f != nil {
		f()
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
	if ch.endErr == nil {
		ch.endErr = err
		close(ch.closed)
		ch.cond.Broadcast()
	}
	f := ch.notify
	ch.mu.Unlock()
	if f != nil {
		f()
	}
}
