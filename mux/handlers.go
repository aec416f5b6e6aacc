package mux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// slow runs fn on its own goroutine, at most maxPending at once per socket; beyond that it
// replies limit_exceeded and returns that error.
func (c *conn) slow(id json.RawMessage, fn func()) *proto.Error {
	select {
	case c.pending <- struct{}{}:
	default:
		e := proto.ErrLimitExceeded("pendingRequests", fmt.Sprintf(
			"at most %d opens, kills, captures, recording lists and reads, and relayed requests in flight per socket",
			maxPending))
		c.replyErr(id, e)
		return e
	}
	c.wg.Go(func() {
		defer func() { <-c.pending }()
		fn()
	})
	return nil
}

// replyRemote replies res, or err as the error of a request on another node about session sid,
// marking the request's span failed with it.
func (c *conn) replyRemote(id json.RawMessage, span trace.Span, sid string, res any, err error) {
	if err != nil {
		e := remoteError(err, sid)
		spanReplied(span, err, e)
		c.replyErr(id, e)
		return
	}
	c.reply(id, res)
}

// confined refuses what a socket confined to one session (a share link's) may not do.
func (c *conn) confined(id json.RawMessage, what string) bool {
	if c.opts.Session == "" {
		return false
	}
	c.replyErr(id, proto.ErrForbidden("a share link's socket cannot "+what))
	return true
}

// handleShare serves share.create, share.list and share.revoke for a read-write principal.
func (c *conn) handleShare(req *proto.Request) {
	if c.confined(req.ID, "manage share links") {
		return
	}
	if c.opts.ReadOnly || c.opts.Shares == nil {
		c.replyErr(req.ID, proto.ErrForbidden("share links are made by the session's read-write owner"))
		return
	}
	sh := c.opts.Shares
	switch req.Method {
	case proto.MethodShareCreate:
		serveDecoded(c, req, proto.DecodeShareCreate, otel.SpanShareCreate,
			func(p proto.ShareCreateParams) *proto.Meta { return p.Meta },
			func(p proto.ShareCreateParams, span trace.Span) (any, *proto.Error) {
				span.SetAttributes(attribute.String(otel.AttrSessionID, p.Session))
				return sh.Create(c.opts.Principal, p)
			})
	case proto.MethodShareList:
		serveDecoded(c, req, proto.DecodeShareList, otel.SpanShareList,
			func(p proto.ShareListParams) *proto.Meta { return p.Meta },
			func(p proto.ShareListParams, span trace.Span) (any, *proto.Error) {
				span.SetAttributes(attribute.String(otel.AttrSessionID, p.Session))
				return sh.List(c.opts.Principal, p.Session)
			})
	case proto.MethodShareRevoke:
		serveDecoded(c, req, proto.DecodeShareRevoke, otel.SpanShareRevoke,
			func(p proto.ShareRevokeParams) *proto.Meta { return p.Meta },
			func(p proto.ShareRevokeParams, _ trace.Span) (any, *proto.Error) {
				return sh.Revoke(c.opts.Principal, p.Share)
			})
	}
}

// serveDecoded decodes req's params and replies with call's result or error; a request whose
// params decode gets a span named name, under their _meta (meta), that call may add to.
func serveDecoded[P any](c *conn, req *proto.Request, decode func(json.RawMessage) (P, *proto.Error), name string,
	meta func(P) *proto.Meta, call func(P, trace.Span) (any, *proto.Error)) {
	p, e := decode(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	_, span := c.startSpan(name, req.Method, meta(p), 0)
	defer span.End()
	res, e := call(p, span)
	if e != nil {
		spanError(span, e)
		c.replyErr(req.ID, e)
		return
	}
	c.reply(req.ID, res)
}

func (c *conn) handleOpen(req *proto.Request) {
	if c.confined(req.ID, "open sessions") {
		return
	}
	start := time.Now()
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
		Name: p.Name, Owner: c.opts.Principal, Record: p.Record, Pipes: p.Pipes()}
	ctx, span := c.startSpan(otel.SpanSessionOpen, proto.MethodSessionOpen, p.Meta, ch.id)
	refused := c.slow(req.ID, func() {
		defer span.End()
		defer func() { c.tel.Instruments.OpenDuration.Record(ctx, time.Since(start).Seconds()) }()
		spec.Trace = span.SpanContext()
		// A pipe session stays on this node: a relay carries neither its stderr frames nor
		// session.closeStdin.
		if c.opts.Remote != nil && !spec.Pipes && c.openRemote(ctx, req, &p, ch) {
			return
		}
		s, v, err := c.reg.Open(spec, c.opts.MaxSessions, func() { c.markReady(ch) })
		if err != nil {
			spanError(span, err)
			c.release(ch)
			c.replyErr(req.ID, sessionError(err, ""))
			return
		}
		span.SetAttributes(attribute.String(otel.AttrSessionID, s.ID()), semconv.ProcessPID(s.Pid()))
		span.SetAttributes(recordingAttrs(s)...)
		ch.b = newLocalBinding(v)
		_, ch.sizeGen = s.Size() // the opener's own size, which it knows
		ch.ready.Store(true)
		if c.opts.Remote != nil {
			// Read your writes: an id this result hands out is attachable through any node, so
			// the result waits until the other nodes can learn of it (a bounded wait;
			// docs/scaling.md).
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
	if refused != nil {
		spanError(span, refused)
		span.End()
		c.release(ch) // refused: the channel number is free again
	}
}

func (c *conn) handleAttach(req *proto.Request) {
	start := time.Now()
	p, e := proto.DecodeAttach(req.Params, c.opts.limits())
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	if c.opts.Session != "" && p.Session != c.opts.Session {
		c.replyErr(req.ID, proto.ErrUnknownSession(p.Session))
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
		c.wg.Go(func() { c.attachLocal(start, req, &p, ch, o) })
		return
	}
	c.attachLocal(start, req, &p, ch, o)
}

// attachLocal binds ch to a session of this node's registry, or, if the registry does not know
// it, to another node's through the Remote; on the read loop, or on a goroutine of its own for
// an attach that paints. start is when the request was read.
func (c *conn) attachLocal(start time.Time, req *proto.Request, p *proto.AttachParams, ch *channel, o session.AttachOptions) {
	ctx, span := c.startSpan(otel.SpanSessionAttach, proto.MethodSessionAttach, p.Meta, ch.id)
	span.SetAttributes(attribute.String(otel.AttrSessionID, p.Session))
	// done ends the span and counts the attach's latency, here or, for a relayed attach, on
	// the goroutine that dials the owner.
	done := func() {
		c.tel.Instruments.AttachDuration.Record(ctx, time.Since(start).Seconds())
		span.End()
	}
	// A read-only viewer is passive: it never holds the owner's program back; its size is
	// ignored.
	v, info, err := c.reg.AttachWith(p.Session, c.opts.Principal, o, func() { c.markReady(ch) })
	if errors.Is(err, session.ErrUnknownSession) && c.opts.Remote != nil {
		// Perhaps another node's: the relay dials it, off the read loop.
		if e := c.slow(req.ID, func() {
			defer done()
			c.attachRemote(ctx, req, p, ch)
		}); e != nil {
			spanError(span, e)
			span.End()
			c.release(ch)
		}
		return
	}
	defer done()
	if err != nil {
		spanError(span, err)
		c.release(ch)
		c.replyErr(req.ID, sessionError(err, p.Session))
		return
	}
	s := v.Session()
	ch.b = newLocalBinding(v)
	span.SetAttributes(attribute.Int(otel.AttrScreenBytes, info.Screen))
	span.SetAttributes(recordingAttrs(s)...)
	if info.Lost > 0 {
		// Asked for bytes the ring no longer holds: lost as a gap is.
		c.tel.Instruments.GapBytes.Add(ctx, info.Lost)
	}
	size, gen := s.Size()
	ch.sizeGen = gen
	ch.ready.Store(true)
	if h := c.opts.testHookAfterSubscribe; h != nil {
		h()
	}
	in := s.Info()
	// Live is where the attach took effect: bytes below it were in the ring then (printed
	// before the attach), every later byte was read from the PTY after it.
	queued := c.reply(req.ID, proto.AttachResult{Session: s.ID(), Channel: ch.id,
		Offset: info.Offset, Live: info.End, Lost: info.Lost, End: info.End, Pid: in.Pid,
		Cols: size.Cols, Rows: size.Rows, Exit: exitInfo(in.Exit),
		Screen: info.Screen, ScreenLost: info.ScreenLost, ScreenCols: info.ScreenCols, ScreenRows: info.ScreenRows,
		TTY: ttyOf(in)})
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
	_, span := c.startSpan(otel.SpanSessionDetach, proto.MethodSessionDetach, p.Meta, ch.id)
	defer span.End()
	span.SetAttributes(attribute.String(otel.AttrSessionID, ch.sessionID()))
	c.release(ch)
	c.unbind(ch, p.Hold)
	c.reply(req.ID, proto.DetachResult{Session: ch.sessionID(), Channel: ch.id})
}

// handleCloseStdin closes the stdin of the pipe session bound to the channel, after the input
// frames that came before the request (the read loop handles both in order).
func (c *conn) handleCloseStdin(req *proto.Request) {
	p, e := proto.DecodeDetach(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	ch := c.boundWritable(req.ID, p.Channel, "close stdin")
	if ch == nil {
		return
	}
	_, span := c.startSpan(otel.SpanSessionCloseStdin, proto.MethodSessionCloseStdin, p.Meta, ch.id)
	defer span.End()
	span.SetAttributes(attribute.String(otel.AttrSessionID, ch.sessionID()))
	c.replyBound(req.ID, ch, span, proto.DetachResult{Session: ch.sessionID(), Channel: ch.id},
		ch.b.closeStdin())
}

func (c *conn) handleResize(req *proto.Request) {
	p, e := proto.DecodeResize(req.Params, c.opts.limits())
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	ch := c.boundWritable(req.ID, p.Channel, "resize")
	if ch == nil {
		return
	}
	ctx, span := c.startSpan(otel.SpanSessionResize, proto.MethodSessionResize, p.Meta, ch.id)
	span.SetAttributes(attribute.String(otel.AttrSessionID, ch.sessionID()))
	ch.b.do(c, req.ID, span, func() {
		res, err := ch.b.resize(ctx, p.Cols, p.Rows)
		c.replyBound(req.ID, ch, span, res, err)
	})
}

func (c *conn) handleSignal(req *proto.Request) {
	p, name, e := proto.DecodeSignal(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	ch := c.boundWritable(req.ID, p.Channel, "signal")
	if ch == nil {
		return
	}
	ctx, span := c.startSpan(otel.SpanSessionSignal, proto.MethodSessionSignal, p.Meta, ch.id)
	span.SetAttributes(attribute.String(otel.AttrSessionID, ch.sessionID()), attribute.String(otel.AttrSignal, name))
	ch.b.do(c, req.ID, span, func() {
		c.replyBound(req.ID, ch, span, struct{}{}, ch.b.signal(ctx, name))
	})
}

// replyBound replies res, or err, an error of ch's binding, marking span failed with err and
// the code of the error it replies.
func (c *conn) replyBound(id json.RawMessage, ch *channel, span trace.Span, res any, err error) {
	if err != nil {
		e := ch.b.wireError(err)
		spanReplied(span, err, e)
		c.replyErr(id, e)
		return
	}
	c.reply(id, res)
}

func (c *conn) handleKill(req *proto.Request) {
	p, e := proto.DecodeKill(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	if c.confined(req.ID, "kill") {
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
			// Another node's: this node's span of the request is the client side of the relay,
			// and the owner's session.kill its child (the relay sends its trace context).
			ctx, span := c.tel.Tracer.Start(ctx, otel.SpanSessionKill, trace.WithSpanKind(trace.SpanKindClient),
				trace.WithAttributes(semconv.RPCSystemNameJSONRPC, semconv.RPCMethod(proto.MethodSessionKill),
					attribute.String(otel.AttrSessionID, p.Session)))
			defer span.End()
			rres, rerr := c.opts.Remote.Kill(withRelayMeta(ctx), c.opts.Principal, p.Session)
			c.replyRemote(req.ID, span, p.Session, rres, rerr)
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
	p, e := proto.DecodeList(req.Params)
	if e != nil {
		c.replyErr(req.ID, e)
		return
	}
	_, span := c.startSpan(otel.SpanSessionList, proto.MethodSessionList, p.Meta, 0)
	defer span.End()
	infos := c.reg.List(c.opts.Principal)
	out := proto.ListResult{Sessions: make([]proto.SessionInfo, 0, len(infos))}
	for _, in := range infos {
		if c.opts.Session != "" && in.ID != c.opts.Session {
			continue
		}
		si := sessionInfo(in)
		if c.opts.Remote != nil {
			si.Node = c.opts.Node
		}
		out.Sessions = append(out.Sessions, si)
	}
	if c.opts.Remote != nil && c.opts.Session == "" {
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
	if c.confined(req.ID, "lease") {
		return
	}
	if c.opts.ReadOnly {
		c.replyErr(req.ID, proto.ErrForbidden("read-only principal cannot lease"))
		return
	}
	ctx, span := c.startSpan(otel.SpanSessionLease, proto.MethodSessionLease, p.Meta, 0)
	span.SetAttributes(attribute.String(otel.AttrSessionID, p.Session))
	until, err := c.reg.Lease(p.Session, c.opts.Principal, time.Duration(p.TTLMs)*time.Millisecond)
	if errors.Is(err, session.ErrUnknownSession) && c.opts.Remote != nil {
		c.slowSpan(req.ID, span, func() {
			res, err := c.opts.Remote.Lease(ctx, c.opts.Principal, p.Session, p.TTLMs)
			c.replyRemote(req.ID, span, p.Session, res, err)
		})
		return
	}
	defer span.End()
	if err != nil {
		spanError(span, err)
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
	if c.opts.Session != "" && p.Session != c.opts.Session {
		c.replyErr(req.ID, proto.ErrUnknownSession(p.Session))
		return
	}
	ctx, span := c.startSpan(otel.SpanSessionCapture, proto.MethodSessionCapture, p.Meta, 0)
	span.SetAttributes(attribute.String(otel.AttrSessionID, p.Session))
	c.slowSpan(req.ID, span, func() {
		snap, err := c.reg.Capture(p.Session, c.opts.Principal, p.Format == proto.CaptureANSI, p.Scrollback)
		if errors.Is(err, session.ErrUnknownSession) && c.opts.Remote != nil {
			// Perhaps another node's: its owner holds the screen (we are on a slow goroutine).
			res, err := c.opts.Remote.Capture(ctx, c.opts.Principal, c.opts.ReadOnly, p)
			c.replyRemote(req.ID, span, p.Session, res, err)
			return
		}
		if err != nil {
			spanError(span, err)
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
	case errors.Is(err, session.ErrUnknownSession), errors.Is(err, session.ErrUnknownRecording):
		return proto.ErrUnknownSession(id)
	case errors.Is(err, session.ErrRecordingOff):
		return proto.ErrInvalidParams("record", err.Error())
	case errors.Is(err, session.ErrInputFull):
		return proto.ErrLimitExceeded("inputQueue", "the program has not read its pending input; nothing was written")
	case errors.Is(err, session.ErrTooMany):
		return proto.ErrLimitExceeded("maxSessions", err.Error())
	case errors.Is(err, session.ErrBadOffset):
		return proto.ErrInvalidParams("from", err.Error())
	case errors.Is(err, session.ErrStdinClosed):
		return proto.ErrStdinClosed(id)
	case errors.Is(err, session.ErrNoPipes):
		return proto.ErrInvalidRequest("the session has a terminal, not pipes: its program reads the terminal's end-of-file character (Ctrl-D) instead")
	case errors.Is(err, session.ErrNoPipesScreen):
		return proto.ErrInvalidRequest("the session runs on pipes, without a terminal: it has no screen to capture")
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
