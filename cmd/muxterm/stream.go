package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// reconnectFor bounds how long a dropped socket is redialled before attach or exec gives up.
const reconnectFor = 60 * time.Second

// eventKind is what the pump tells the loop.
type eventKind int

const (
	evLost     eventKind = iota // the socket dropped; redialling
	evBound                     // a new socket and channel, attached where the last one stopped
	evSentinel                  // the sentinel followed the replay, after queries DA1 queries
	evEnd                       // the binding ended: exit, reason or err says how
)

type event struct {
	kind    eventKind
	c       *client.Client
	ch      *client.Channel
	queries int
	exit    *proto.ExitInfo // evEnd: the program exited
	reason  string          // evEnd: session.closed's reason
	err     error           // evEnd: a failure
}

// pump copies a session's output to out, across reconnects, and reports to the loop on events.
// It owns the clients it dials; the loop owns the one it holds when it returns.
type pump struct {
	cfg     *config
	id      string
	out     io.Writer
	errOut  io.Writer     // a pipe session's stderr goes here; nil: with the rest to out
	events  chan event    // unbuffered: an evLost is received before the redial starts
	done    chan struct{} // closed when run returns
	lf      bool          // exec --lf: CR LF becomes LF
	pendCR  bool          // lf: a CR ended the last write
	sentTo  int64         // write the sentinel once the output reaches this offset (-1: never)
	scratch []byte
	// scr, for attach on a terminal, is fed everything written to out (screen.go); nil for
	// exec.
	scr *localScreen
}

// send gives ev to the loop unless ctx ended first.
func (p *pump) send(ctx context.Context, ev event) bool {
	select {
	case p.events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// run reads ch until the binding ends or ctx does.
func (p *pump) run(ctx context.Context, c *client.Client, ch *client.Channel) {
	defer close(p.done)
	buf := make([]byte, 64<<10)
	var q queryCounter
	sentinelDue := p.sentTo >= 0
	go detachOnExit(ctx, ch)
	for {
		if ctx.Err() != nil {
			return // the loop has ended (a stop signal): whatever Read would return next
		}
		n, stderr, err := ch.ReadStream(context.Background(), buf)
		if n > 0 && stderr && p.errOut != nil {
			if _, werr := p.errOut.Write(buf[:n]); werr != nil {
				p.send(ctx, event{kind: evEnd, err: fmt.Errorf("write stderr: %w", werr)})
				return
			}
			n = 0
		}
		if n > 0 {
			if sentinelDue {
				q.feed(buf[:n])
			}
			var werr error
			if p.scr != nil {
				werr = p.scr.write(p.out, buf[:n])
			} else {
				werr = p.write(buf[:n])
			}
			if werr != nil {
				p.send(ctx, event{kind: evEnd, err: fmt.Errorf("write output: %w", werr)})
				return
			}
		}
		if p.scr != nil {
			if werr := p.scr.follow(p.out, ch, false); werr != nil {
				p.send(ctx, event{kind: evEnd, err: fmt.Errorf("write output: %w", werr)})
				return
			}
		}
		if sentinelDue && ch.Offset() >= p.sentTo && q.ground() {
			sentinelDue = false
			if _, werr := io.WriteString(p.out, sentinel); werr != nil {
				p.send(ctx, event{kind: evEnd, err: fmt.Errorf("write output: %w", werr)})
				return
			}
			if !p.send(ctx, event{kind: evSentinel, queries: q.da1}) {
				return
			}
		}
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, io.EOF) {
			p.send(ctx, event{kind: evEnd, exit: ch.ExitInfo(), reason: ch.Reason()})
			return
		}
		if errors.Is(err, client.ErrProtocol) {
			// The gateway broke the protocol: a redial would reach it again.
			p.send(ctx, event{kind: evEnd, err: err})
			return
		}
		// The socket ended: resume from what was written out, on a new one.
		if !p.send(ctx, event{kind: evLost}) {
			return
		}
		from, cut := ch.Offset(), ch.PaintPending()
		c.Close()
		c, ch, err = p.reconnect(ctx, from, cut)
		if err != nil {
			if ctx.Err() == nil {
				p.send(ctx, event{kind: evEnd, err: err})
			}
			return
		}
		if !p.send(ctx, event{kind: evBound, c: c, ch: ch}) {
			c.Close()
			return
		}
		go detachOnExit(ctx, ch)
	}
}

// write writes output, turning CR LF into LF under --lf.
func (p *pump) write(b []byte) error {
	if !p.lf {
		_, err := p.out.Write(b)
		return err
	}
	out := p.scratch[:0]
	for _, x := range b {
		if p.pendCR {
			p.pendCR = false
			if x != '\n' {
				out = append(out, '\r')
			}
		}
		if x == '\r' {
			p.pendCR = true
			continue
		}
		out = append(out, x)
	}
	p.scratch = out
	_, err := p.out.Write(out)
	return err
}

// detachOnExit detaches ch once its program has exited: everything it printed before has
// arrived by then (session.exit follows it), and Read returns it before io.EOF.
func detachOnExit(ctx context.Context, ch *client.Channel) {
	select {
	case <-ch.Exited():
		dctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		_ = ch.Detach(dctx)
	case <-ch.Closed():
	case <-ctx.Done():
	}
}

// reconnect dials again and attaches from, retrying with backoff for reconnectFor; with cut
// (the drop cut a paint short) it asks for a whole paint.
func (p *pump) reconnect(ctx context.Context, from int64, cut bool) (*client.Client, *client.Channel, error) {
	deadline := time.Now().Add(reconnectFor)
	backoff := 50 * time.Millisecond
	for {
		c, ch, err := p.attachOnce(ctx, from, cut)
		if err == nil {
			return c, ch, nil
		}
		if errors.Is(err, client.ErrProtocol) {
			return nil, nil, fmt.Errorf("reattach to session %s after the connection dropped: %w", p.id, err)
		}
		if k := rpcKind(err); k == proto.KindUnknownSession || k == proto.KindSessionClosed {
			return nil, nil, fmt.Errorf("reattach to session %s after the connection dropped: %w", p.id, err)
		}
		var de *client.DialError
		if errors.As(err, &de) && de.Status == 401 {
			return nil, nil, p.cfg.explainDial(err)
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("connection lost; no reconnect within %v: %w", reconnectFor, p.cfg.explainDial(err))
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, nil, ctx.Err()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (p *pump) attachOnce(ctx context.Context, from int64, cut bool) (*client.Client, *client.Channel, error) {
	dctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	c, err := client.Dial(dctx, p.cfg.url, p.cfg.dialOptions())
	if err != nil {
		return nil, nil, err
	}
	// Byte for byte from where the output stopped, unless the ring has lost it: then a paint,
	// for which the local terminal is cleared first. exec wants bytes only.
	screen := proto.ScreenNever
	switch {
	case p.scr != nil && cut:
		screen = proto.ScreenAlways // half a paint is on the terminal: a whole one, afresh
	case p.scr != nil:
		screen = proto.ScreenAuto
	}
	ch, res, err := c.AttachWith(dctx, p.id, client.AttachOptions{From: &from, Screen: screen})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	if res.Screen > 0 {
		if err := p.scr.repaintFor(p.out, cmp.Or(res.ScreenCols, res.Cols), cmp.Or(res.ScreenRows, res.Rows)); err != nil {
			c.Close()
			return nil, nil, fmt.Errorf("write output: %w", err)
		}
	}
	return c, ch, nil
}
