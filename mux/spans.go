package mux

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/proto"
)

// The request spans: each request's span descends from the client's trace context, and a
// request relayed to another node carries its span's.

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

// startSpan starts a request span under parentCtx: the server side of a JSON-RPC call (RPC
// semantic conventions: named by its method, rpc.system.name jsonrpc). The context it returns
// carries the span's trace context for a relay (withRelayMeta).
func (c *conn) startSpan(name, method string, m *proto.Meta, ch uint32) (context.Context, trace.Span) {
	ctx, span := c.tel.Tracer.Start(c.parentCtx(m), name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		semconv.RPCSystemNameJSONRPC, semconv.RPCMethod(method), attribute.Int64(otel.AttrChannel, int64(ch))))
	return withRelayMeta(ctx), span
}

// withRelayMeta returns ctx carrying its span's W3C trace context as a proto.Meta: the cluster's
// relay (the Go client) sends it as params._meta to the owner, whose spans then continue this
// node's trace. A ctx without a valid span context is returned as it is.
func withRelayMeta(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return proto.ContextWithMeta(ctx, proto.Meta{Traceparent: carrier.Get("traceparent"), Tracestate: carrier.Get("tracestate")})
}

// slowSpan is slow for a request whose span fn's end ends (or which ends at once if refused).
func (c *conn) slowSpan(id json.RawMessage, span trace.Span, fn func()) {
	if e := c.slow(id, func() {
		defer span.End()
		fn()
	}); e != nil {
		spanError(span, e)
		span.End()
	}
}

// spanReplied marks span failed with err, the error behind a request's reply, and e's JSON-RPC
// code as rpc.response.status_code: e is the error replied, err its cause in the node's own words.
func spanReplied(span trace.Span, err error, e *proto.Error) {
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(semconv.RPCResponseStatusCode(strconv.Itoa(e.Code)))
}

// spanError marks span failed with err, with the JSON-RPC error code as
// rpc.response.status_code when err is a protocol error.
func spanError(span trace.Span, err error) {
	span.SetStatus(codes.Error, err.Error())
	var pe *proto.Error
	if errors.As(err, &pe) {
		span.SetAttributes(semconv.RPCResponseStatusCode(strconv.Itoa(pe.Code)))
	}
}
