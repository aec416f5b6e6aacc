package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// What a program does with a Channel: read its output (and acknowledge it), write its input,
// resize, signal, close its stdin, detach, wait for its end. channel.go holds its state and what
// arrives on it.

// SetNotify has f called, with no lock held and on the client's reader goroutine, after each
// piece of output, gap, size change, exit or the channel's end arrives: a caller that polls with
// a done context (ReadContext) learns when to poll again. f must not block.
func (ch *Channel) SetNotify(f func()) {
	ch.mu.Lock()
	ch.notify = f
	ch.mu.Unlock()
}

// Ack acknowledges n bytes Read returned, for a client dialed with DialOptions.ManualAck
// (without it Read acknowledges by itself). Nothing is sent once the channel detached or ended.
func (ch *Channel) Ack(n int) error {
	if n <= 0 {
		return nil
	}
	ch.c.wmu.Lock()
	defer ch.c.wmu.Unlock()
	ch.mu.Lock()
	l, stop := ch.on, ch.detaching || ch.endErr != nil || ch.on == nil
	if !stop {
		ch.inflight = max(ch.inflight-int64(n), 0)
	}
	ch.mu.Unlock()
	if stop {
		return nil
	}
	if err := ch.c.writeOnLocked(l, websocket.BinaryMessage, proto.AppendAck(nil, ch.ID, uint32(n))); err != nil {
		return fmt.Errorf("ack channel %d: %w", ch.ID, err)
	}
	return nil
}

// Read returns buffered output, waiting for some; it returns io.EOF after session.closed or
// Detach and io.ErrUnexpectedEOF when the client ended, wrapping why (errors.Is finds ErrClosed,
// ErrProtocol, ...; a resume that found the session gone returns that error). Bytes returned
// are acknowledged: in the same call once the server's ackBytes have accumulated, else as soon
// as Read has drained the buffer (by the client's ack goroutine, right after Read returns).
// Buffered bytes are returned even after the end.
func (ch *Channel) Read(p []byte) (int, error) {
	return ch.ReadContext(context.Background(), p)
}

// ReadContext is Read that gives up when ctx ends, returning ctx's error; the channel stays
// usable.
func (ch *Channel) ReadContext(ctx context.Context, p []byte) (int, error) {
	n, _, err := ch.ReadStream(ctx, p)
	return n, err
}

// ReadStream is ReadContext that returns the bytes of one stream only and says which: stderr
// is true for a pipe session's stderr (OpenOptions.Pipes), false for its stdout and for all of a
// terminal's output. Read and ReadContext return both streams, in the order they came.
func (ch *Channel) ReadStream(ctx context.Context, p []byte) (n int, stderr bool, err error) {
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() {
			ch.mu.Lock()
			ch.cond.Broadcast()
			ch.mu.Unlock()
		})
		defer stop()
	}
	ackEvery := ch.c.ackEvery() // Client.mu is taken after Channel.mu nowhere: read it first
	ch.mu.Lock()
	for {
		// Pass gaps at the head: they advance the offset.
		for len(ch.segs) > 0 && ch.segs[0].gap > 0 {
			ch.offset += ch.segs[0].gap
			ch.segs[0].drop()
			ch.segs = ch.segs[1:]
		}
		if len(ch.segs) > 0 || ch.endErr != nil {
			break
		}
		if err := ctx.Err(); err != nil {
			ch.mu.Unlock()
			return 0, false, err
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
		return 0, false, err
	}
	// As much as p takes of the data at the head, across segments of one binding (epoch), up to
	// the next gap: a segment holds one frame's bytes, and p may take several.
	epoch, stderr := ch.segs[0].epoch, ch.segs[0].stderr
	current := epoch == ch.epoch
	painted := 0
	for n < len(p) && len(ch.segs) > 0 && ch.segs[0].gap == 0 && ch.segs[0].epoch == epoch && ch.segs[0].stderr == stderr {
		seg := &ch.segs[0]
		m := copy(p[n:], seg.data)
		n += m
		if seg.paint {
			painted += m
		}
		seg.data = seg.data[m:]
		if len(seg.data) > 0 {
			break // p is full
		}
		seg.drop()
		ch.segs = ch.segs[1:]
	}
	ch.offset += int64(n - painted)
	if current && !ch.c.opts.ManualAck {
		ch.unacked += n
	}
	flush, queue := false, false
	switch {
	case ch.detaching || ch.unacked == 0:
	case ch.unacked >= ackEvery:
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
	return n, stderr, nil
}

// flushAck acknowledges every byte of the current binding Read has returned and not yet
// acknowledged, unless the binding is ending: detached, or closed by the server (which no
// longer knows the channel). It takes the count under the client's write lock, which Detach's
// request also needs, so an ack either goes out before the detach request or sees detaching
// and sends nothing.
func (ch *Channel) flushAck() {
	ch.c.wmu.Lock()
	defer ch.c.wmu.Unlock()
	ch.mu.Lock()
	ack, l := ch.unacked, ch.on
	if ch.detaching || ch.endErr != nil || l == nil {
		ack = 0
	}
	ch.unacked, ch.ackQueued = 0, false
	ch.inflight = max(ch.inflight-int64(ack), 0)
	ch.mu.Unlock()
	if ack > 0 {
		// A failed write ends the link; the next binding starts a new count.
		_ = ch.c.writeOnLocked(l, websocket.BinaryMessage, proto.AppendAck(nil, ch.ID, uint32(ack)))
	}
}

// Write sends input, split into frames of at most the server's limits.maxInputBytes. While the
// client reconnects it waits for the new connection, at most DialOptions.WriteTimeout, like
// each frame's write.
func (ch *Channel) Write(p []byte) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ch.c.opts.WriteTimeout)
	defer cancel()
	return ch.WriteContext(ctx, p)
}

// WriteContext is Write that waits for a connection at most until ctx ends.
func (ch *Channel) WriteContext(ctx context.Context, p []byte) (int, error) {
	written := 0
	for written < len(p) {
		ch.mu.Lock()
		err := ch.endErr
		ch.mu.Unlock()
		if err != nil {
			return written, fmt.Errorf("write to channel %d: %w", ch.ID, err)
		}
		l, err := ch.c.link(ctx)
		if err != nil {
			return written, fmt.Errorf("write to channel %d: %w", ch.ID, err)
		}
		n := min(len(p)-written, ch.c.maxInput())
		frame := proto.AppendFrame(nil, proto.FrameInput, ch.ID, p[written:written+n])
		if err := ch.c.writeOn(l, websocket.BinaryMessage, frame); err != nil {
			return written, fmt.Errorf("write to channel %d: %w", ch.ID, err)
		}
		written += n
	}
	return written, nil
}

// Resize declares this viewer's size. The size the gateway applies (its --window-size policy
// over every viewer) is then Size.
func (ch *Channel) Resize(ctx context.Context, cols, rows int) error {
	// The applied size is recorded on the reader goroutine, in wire order: a session.size that
	// follows the result cannot be overwritten by it.
	record := func(r response) error {
		var res proto.ResizeResult
		if r.Err == nil && r.lost == nil && json.Unmarshal(r.Result, &res) == nil {
			ch.setSize(res.Cols, res.Rows)
		}
		return nil
	}
	return ch.c.call(ctx, proto.MethodSessionResize, proto.ResizeParams{Channel: ch.ID, Cols: cols, Rows: rows}, nil, record)
}

// Signal sends a signal ("INT", ...) to the foreground process group.
func (ch *Channel) Signal(ctx context.Context, sig string) error {
	return ch.c.Call(ctx, proto.MethodSessionSignal, proto.SignalParams{Channel: ch.ID, Signal: sig}, nil)
}

// CloseStdin closes the stdin of the pipe session bound to the channel (OpenOptions.Pipes) once
// the input written before it has reached the program, which then reads the end of its input.
// Input written after it is refused (stdin_closed).
func (ch *Channel) CloseStdin(ctx context.Context) error {
	return ch.c.Call(ctx, proto.MethodSessionCloseStdin, proto.CloseStdinParams{Channel: ch.ID}, nil)
}

// Detach unbinds the channel; the session keeps running.
func (ch *Channel) Detach(ctx context.Context) error { return ch.detach(ctx, false) }

// DetachHolding is Detach as a dropped socket detaches: the session holds its output for a
// resume (session.detach's hold). A relay sharing its socket uses it when its own client's
// socket dropped.
func (ch *Channel) DetachHolding(ctx context.Context) error { return ch.detach(ctx, true) }

func (ch *Channel) detach(ctx context.Context, hold bool) error {
	ch.mu.Lock()
	ch.detaching = true // from here on flushAck sends nothing (see there)
	ch.mu.Unlock()
	err := ch.c.Call(ctx, proto.MethodSessionDetach, proto.DetachParams{Channel: ch.ID, Hold: hold}, nil)
	ch.c.dropChannel(ch)
	ch.end(io.EOF)
	return err
}

// ReadUntil reads until the accumulated output contains want, or ctx ends. It returns all
// that was read; the channel stays usable either way.
func (ch *Channel) ReadUntil(ctx context.Context, want string) (string, error) {
	var out []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := ch.ReadContext(ctx, buf)
		out = append(out, buf[:n]...)
		if bytes.Contains(out, []byte(want)) {
			return string(out), nil
		}
		if err != nil {
			return string(out), fmt.Errorf("read until %q: %w (got %q)", want, err, tail(out))
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
