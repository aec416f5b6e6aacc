package mux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// slow runs fn on its own goroutine, at most maxPending at once per socket; beyond that it
// replies limit_exceeded and returns false.
func (c *conn) slow(id json.RawMessage, fn func()) bool {
	select {
	case c.pending <- struct{}{}:
	default:
		c.replyErr(id, proto.ErrLimitExceeded("pendingRequests",
			fmt.Sprintf("at most %d opens, kills, captures and relayed requests in flight per socket", maxPending)))
		return false
	}
	c.wg.Go(func() {
		defer func() { <-c.pending }()
		fn()
	})
	return true
}

// replyRemote replies res, or err as the error of a request on another node about session sid.
func (c *conn) replyRemote(id json.RawMessage, sid string, res any, err error) {
	if err != nil {
		c.replyErr(id, remoteError(err, sid))
		return
	}
	c.reply(id, res)
}

func (c *conn) handleOpen(req *proto.Request) {
	p, e := proto.DecodeOpen(req.Params, c.opts.limits())
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	if c.opts.ReadOnly {
		c.replyErr(req.ID, proto.ErrForbidden("read-only principal cannot open sessions"))
		return
	}
	if len(p.Cmd) > 0 && (c.opts.AllowCmd == nil || !c.opts.AllowCmd(p.Cmd)) {
		c.replyErr(req.ID, proto.ErrForbidden(fmt.Sprintf("command %q is not allowed", p.Cmd[0])))
		return
	}
	if !c.opts.OpenRate.Allow(c.opts.Principal, 1) {
		c.replyErr(req.ID, errOpenRate(c.opts.OpenRate))
		return
	}
	ch := c.reserve(req.ID, p.Channel)
	if ch == nil {
		return
	}
	env := make([]string, 0, len(p.Env))
	for k, v := range p.Env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	spec := session.Spec{Argv: p.Cmd, Dir: p.Cwd, Env: env, Cols: p.Cols, Rows: p.Rows,
		Name: p.Name, Owner: c.opts.Principal}
	started := c.slow(req.ID, func() {
		_, span := c.startSpan(otel.SpanSessionOpen, "session.open", p.Meta, ch.id)
		defer span.End()
		spec.Trace = span.SpanContext()
		if c.opts.Remote != nil && c.openRemote(req, &p, ch) {
			return
		}
		s, v, err := c.reg.Open(spec, c.opts.MaxSessions, func() { c.markReady(ch) })
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			c.release(ch)
			c.replyErr(req.ID, sessionError(err, ""))
			return
		}
		span.SetAttributes(attribute.String(otel.AttrSessionID, s.ID()), semconv.ProcessPID(s.Pid()))
		ch.sess, ch.v = s, v
		_, ch.sizeGen = s.Size() // the opener's own size, which it knows
		ch.ready.Store(true)
		if c.opts.Remote != nil {
			// Read your writes: an id this result hands out is attachable through any node, so
			// the result waits for the directory to hold its entry (a bounded wait: a directory
			// electing a leader delays the result, then it goes anyway; docs/scaling.md).
			pctx, cancel := context.WithTimeout(c.ctx, publishWait)
			if err := c.opts.Remote.Published(pctx); err != nil {
				c.log.Warn("session.open: answered before the directory held the session", "session", s.ID(), "err", err)
			}
			cancel()
		}
		queued := c.reply(req.ID, proto.OpenResult{Session: s.ID(), Channel: ch.id, Pid: s.Pid()})
		if h := c.opts.testHookBeforeActivate; h != nil {
			h()
		}
		c.activate(ch, queued, false)
	})
	if !started {
		c.release(ch) // refused: the channel number is free again
	}
}

func (c *conn) handleAttach(req *proto.Request) {
	p, e := proto.DecodeAttach(req.Params, c.opts.limits())
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	ch := c.reserve(req.ID, p.Channel)
	if ch == nil {
		return
	}
	from := int64(-1)
	if p.From != nil {
		from = *p.From
	}
	if p.Screen == "" {
		// A client that did not say it understands paints gets raw replays (protocol.md §4);
		// a relayed attach carries the mode so resolved.
		p.Screen = proto.ScreenNever
		if c.screens {
			p.Screen = proto.ScreenAuto
		}
	}
	o := session.AttachOptions{From: from, Passive: c.opts.ReadOnly, Screen: screenMode(p.Screen),
		Size: session.Size{Cols: p.Cols, Rows: p.Rows}}
	if c.reg.WouldPaint(p.Session, c.opts.Principal, o) {
		// A paint waits for the screen's catch-up (up to 50 ms and what the ring holds): off
		// the read loop, so acks and input of the socket's other channels go on meanwhile.
		// At most one such goroutine per reserved channel.
		c.wg.Go(func() { c.attachLocal(req, &p, ch, o) })
		return
	}
	c.attachLocal(req, &p, ch, o)
}

// attachLocal binds ch to a session of this node's registry, or, if the registry does not know
// it, to another node's through the Remote; on the read loop, or on a goroutine of its own for
// an attach that paints.
func (c *conn) attachLocal(req *proto.Request, p *proto.AttachParams, ch *channel, o session.AttachOptions) {
	_, span := c.startSpan(otel.SpanSessionAttach, "session.attach", p.Meta, ch.id)
	defer span.End()
	span.SetAttributes(attribute.String(otel.AttrSessionID, p.Session))
	// A read-only viewer is passive: it never holds the owner's program back; its size is
	// ignored.
	v, info, err := c.reg.AttachWith(p.Session, c.opts.Principal, o, func() { c.markReady(ch) })
	if errors.Is(err, session.ErrUnknownSession) && c.opts.Remote != nil {
		// Perhaps another node's: the relay dials it, off the read loop.
		if !c.slow(req.ID, func() { c.attachRemote(req, p, ch) }) {
			c.release(ch)
		}
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		c.release(ch)
		c.replyErr(req.ID, sessionError(err, p.Session))
		return
	}
	ch.sess, ch.v = v.Session(), v
	span.SetAttributes(attribute.Int(otel.AttrScreenBytes, info.Screen))
	size, gen := ch.sess.Size()
	ch.sizeGen = gen
	ch.ready.Store(true)
	if h := c.opts.testHookAfterSubscribe; h != nil {
		h()
	}
	in := ch.sess.Info()
	// Live is where the attach took effect: bytes below it were in the ring then (printed
	// before the attach), every later byte was read from the PTY after it.
	queued := c.reply(req.ID, proto.AttachResult{Session: ch.sess.ID(), Channel: ch.id,
		Offset: info.Offset, Live: info.End, Lost: info.Lost, End: info.End, Pid: in.Pid,
		Cols: size.Cols, Rows: size.Rows, Exit: exitInfo(in.Exit),
		Screen: info.Screen, ScreenLost: info.ScreenLost, ScreenCols: info.ScreenCols, ScreenRows: info.ScreenRows})
	c.activate(ch, queued, true)
}

func (c *conn) handleDetach(req *proto.Request) {
	p, e := proto.DecodeDetach(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	ch := c.bound(req.ID, p.Channel)
	if ch == nil {
		return
	}
	_, span := c.startSpan(otel.SpanSessionDetach, "session.detach", p.Meta, ch.id)
	defer span.End()
	span.SetAttributes(attribute.String(otel.AttrSessionID, ch.sessionID()))
	c.release(ch)
	c.unbind(ch, p.Hold)
	c.reply(req.ID, proto.DetachResult{Session: ch.sessionID(), Channel: ch.id})
}

func (c *conn) handleResize(req *proto.Request) {
	p, e := proto.DecodeResize(req.Params, c.opts.limits())
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	ch := c.bound(req.ID, p.Channel)
	if ch == nil {
		return
	}
	if c.opts.ReadOnly {
		c.replyErr(req.ID, proto.ErrForbidden("read-only principal cannot resize"))
		return
	}
	if ch.relay != nil {
		c.slow(req.ID, func() {
			res, err := ch.relay.Resize(c.ctx, p.Cols, p.Rows)
			c.replyRemote(req.ID, ch.sessionID(), res, err)
		})
		return
	}
	size, err := ch.v.Resize(p.Cols, p.Rows)
	if err != nil {
		c.replyErr(req.ID, sessionError(err, ch.sess.ID()))
		return
	}
	c.reply(req.ID, proto.ResizeResult{Cols: size.Cols, Rows: size.Rows})
}

func (c *conn) handleSignal(req *proto.Request) {
	p, name, e := proto.DecodeSignal(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	sig := signals[name]
	ch := c.bound(req.ID, p.Channel)
	if ch == nil {
		return
	}
	if c.opts.ReadOnly {
		c.replyErr(req.ID, proto.ErrForbidden("read-only principal cannot signal"))
		return
	}
	if ch.relay != nil {
		c.slow(req.ID, func() {
			c.replyRemote(req.ID, ch.sessionID(), struct{}{}, ch.relay.Signal(c.ctx, name))
		})
		return
	}
	if err := ch.sess.Signal(sig); err != nil {
		c.replyErr(req.ID, sessionError(err, ch.sess.ID()))
		return
	}
	c.reply(req.ID, struct{}{})
}

func (c *conn) handleKill(req *proto.Request) {
	p, e := proto.DecodeKill(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	if c.opts.ReadOnly {
		c.replyErr(req.ID, proto.ErrForbidden("read-only principal cannot kill"))
		return
	}
	c.slow(req.ID, func() {
		// The kill finishes even if the socket goes away meanwhile.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.parentCtx(p.Meta)), killTimeout)
		defer cancel()
		res, err := c.reg.Kill(ctx, p.Session, c.opts.Principal)
		if errors.Is(err, session.ErrUnknownSession) && c.opts.Remote != nil {
			rres, rerr := c.opts.Remote.Kill(ctx, c.opts.Principal, p.Session)
			c.replyRemote(req.ID, p.Session, rres, rerr)
			return
		}
		if err != nil {
			c.replyErr(req.ID, sessionError(err, p.Session))
			return
		}
		c.reply(req.ID, killResult(p.Session, res))
	})
}

func (c *conn) handleList(req *proto.Request) {
	if _, e := proto.DecodeList(req.Params); e != nil {
		c.replyErr(req.ID, e)
		return
	}
	infos := c.reg.List(c.opts.Principal)
	out := proto.ListResult{Sessions: make([]proto.SessionInfo, 0, len(infos))}
	for _, in := range infos {
		si := sessionInfo(in)
		if c.opts.Remote != nil {
			si.Node = c.opts.Node
		}
		out.Sessions = append(out.Sessions, si)
	}
	if c.opts.Remote != nil {
		out.Sessions = append(out.Sessions, c.opts.Remote.List(c.opts.Principal)...)
	}
	c.reply(req.ID, out)
}

func (c *conn) handleLease(req *proto.Request) {
	p, e := proto.DecodeLease(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	if c.opts.ReadOnly {
		c.replyErr(req.ID, proto.ErrForbidden("read-only principal cannot lease"))
		return
	}
	until, err := c.reg.Lease(p.Session, c.opts.Principal, time.Duration(p.TTLMs)*time.Millisecond)
	if errors.Is(err, session.ErrUnknownSession) && c.opts.Remote != nil {
		c.slow(req.ID, func() {
			res, err := c.opts.Remote.Lease(c.ctx, c.opts.Principal, p.Session, p.TTLMs)
			c.replyRemote(req.ID, p.Session, res, err)
		})
		return
	}
	if err != nil {
		c.replyErr(req.ID, sessionError(err, p.Session))
		return
	}
	c.reply(req.ID, proto.LeaseResult{Session: p.Session, Until: until.UTC().Format(time.RFC3339Nano)})
}

// handleCapture answers session.capture on a slow-request goroutine: catching the screen up
// may take up to session's screenWait.
func (c *conn) handleCapture(req *proto.Request) {
	p, e := proto.DecodeCapture(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	c.slow(req.ID, func() {
		_, span := c.startSpan(otel.SpanSessionCapture, "session.capture", p.Meta, 0)
		defer span.End()
		span.SetAttributes(attribute.String(otel.AttrSessionID, p.Session))
		snap, err := c.reg.Capture(p.Session, c.opts.Principal, p.Format == proto.CaptureANSI, p.Scrollback)
		if errors.Is(err, session.ErrUnknownSession) && c.opts.Remote != nil {
			// Perhaps another node's: its owner holds the screen (we are on a slow goroutine).
			res, err := c.opts.Remote.Capture(c.ctx, c.opts.Principal, c.opts.ReadOnly, p)
			c.replyRemote(req.ID, p.Session, res, err)
			return
		}
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			c.replyErr(req.ID, sessionError(err, p.Session))
			return
		}
		m := snap.Modes
		msg := proto.MarshalResponse(req.ID, proto.CaptureResult{Session: p.Session, Offset: snap.Offset, Cols: snap.Cols,
			Rows: snap.Rows, Format: p.Format, Lost: snap.Lost, Screen: string(snap.Paint),
			Modes: proto.ScreenModes{AltScreen: m.AltScreen, AppCursor: m.AppCursor, AppKeypad: m.AppKeypad,
				BracketedPaste: m.BracketedPaste, Mouse: m.MouseTracking, MouseEncoding: m.MouseEncoding,
				FocusReporting: m.FocusReporting, CursorVisible: m.CursorVisible}}, nil)
		if len(msg) > proto.MaxCaptureBytes {
			// Within what every client reads (maxWireMessageBytes, and the clients' own bound).
			c.replyErr(req.ID, proto.ErrLimitExceeded("captureBytes", fmt.Sprintf(
				"the capture is %d bytes, more than %d: ask for fewer scrollback lines", len(msg), proto.MaxCaptureBytes)))
			return
		}
		c.send(msg)
	})
}

// screenMode maps session.attach's screen to the session's.
func screenMode(s string) session.ScreenMode {
	switch s {
	case proto.ScreenAlways:
		return session.ScreenAlways
	case proto.ScreenNever:
		return session.ScreenNever
	}
	return session.ScreenAuto
}

// sessionError maps session errors to protocol errors.
func sessionError(err error, id string) *proto.Error {
	var ce *session.ClosedError
	switch {
	case errors.As(err, &ce):
		return proto.ErrSessionClosed(ce.ID, string(ce.Reason))
	case errors.Is(err, session.ErrUnknownSession):
		return proto.ErrUnknownSession(id)
	case errors.Is(err, session.ErrInputFull):
		return proto.ErrLimitExceeded("inputQueue", "the program has not read its pending input; nothing was written")
	case errors.Is(err, session.ErrTooMany):
		return proto.ErrLimitExceeded("maxSessions", err.Error())
	case errors.Is(err, session.ErrBadOffset):
		return proto.ErrInvalidParams("from", err.Error())
	case errors.Is(err, session.ErrNoScreen):
		return proto.ErrInvalidRequest("the gateway keeps no screens (--screen=false)")
	case errors.Is(err, session.ErrBadSize):
		return proto.ErrInvalidParams("cols", err.Error())
	case errors.Is(err, session.ErrShuttingDown):
		return proto.ErrSessionClosed(id, string(session.ReasonShutdown))
	case errors.Is(err, session.ErrSpawn):
		return proto.ErrSpawnFailed(err.Error())
	}
	return proto.ErrInternal(err.Error())
}

// parentCtx is the context a request's spans descend from: the client's W3C trace context
// from params._meta when it sent one, else the socket's ws.connection span.
func (c *conn) parentCtx(m *proto.Meta) context.Context {
	if m == nil || m.Traceparent == "" {
		return c.ctx
	}
	carrier := propagation.MapCarrier{"traceparent": m.Traceparent}
	if m.Tracestate != "" {
		carrier["tracestate"] = m.Tracestate
	}
	ctx := propagation.TraceContext{}.Extract(c.ctx, carrier)
	if !trace.SpanContextFromContext(ctx).IsRemote() {
		return c.ctx // malformed traceparent: ignored
	}
	return ctx
}

// startSpan starts a request span under parentCtx.
func (c *conn) startSpan(name, method string, m *proto.Meta, ch uint32) (context.Context, trace.Span) {
	return c.tel.Tracer.Start(c.parentCtx(m), name, trace.WithAttributes(
		semconv.RPCMethod(method), attribute.Int64(otel.AttrChannel, int64(ch))))
}
