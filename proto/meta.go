package proto

import "context"

// metaKey is the context key of a request's trace context.
type metaKey struct{}

// ContextWithMeta returns ctx carrying m: the Go client sends it as params._meta of every
// request made with ctx (whose params carry no _meta of their own), so the gateway's spans for
// the request continue the caller's trace. A gateway node relaying a request to another node
// sets it to its own span's context.
func ContextWithMeta(ctx context.Context, m Meta) context.Context {
	return context.WithValue(ctx, metaKey{}, m)
}

// MetaFromContext returns the trace context ContextWithMeta put in ctx, if any.
func MetaFromContext(ctx context.Context) (Meta, bool) {
	m, ok := ctx.Value(metaKey{}).(Meta)
	return m, ok && m.Traceparent != ""
}
