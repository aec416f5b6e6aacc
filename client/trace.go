package client

import (
	"context"
	"encoding/json"

	"github.com/muxterm/muxterm/proto"
)

// withTraceMeta returns params with the W3C trace context of ctx (proto.ContextWithMeta) as
// params._meta, so the gateway's spans for the request continue the caller's trace. Params
// that carry _meta already, params that are not a JSON object, and a ctx without a trace
// context are left as they are.
func withTraceMeta(ctx context.Context, params any) any {
	meta, ok := proto.MetaFromContext(ctx)
	if !ok {
		return params
	}
	obj := map[string]json.RawMessage{}
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil || json.Unmarshal(b, &obj) != nil || obj == nil {
			return params // not an object: sent as it is (and refused as it would be)
		}
	}
	if _, ok := obj["_meta"]; ok {
		return params
	}
	m, _ := json.Marshal(meta)
	obj["_meta"] = m
	return obj
}
