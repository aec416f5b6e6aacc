package client

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/muxterm/muxterm/proto"
)

// TestWithTraceMeta: a request made with a trace context (proto.ContextWithMeta) carries it as
// params._meta; params that carry _meta keep theirs; no trace context, no change.
func TestWithTraceMeta(t *testing.T) {
	const tid = "4bf92f3577b34da6a3ce929d0e0e4736"
	const want = "00-" + tid + "-00f067aa0ba902b7-01"
	ctx := proto.ContextWithMeta(context.Background(), proto.Meta{Traceparent: want})
	meta := func(p any) string {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Meta struct {
				Traceparent string `json:"traceparent"`
			} `json:"_meta"`
		}
		_ = json.Unmarshal(b, &m)
		return m.Meta.Traceparent
	}
	tests := []struct {
		name   string
		ctx    context.Context
		params any
		want   string
	}{
		{"map", ctx, map[string]any{"session": "x"}, want},
		{"struct", ctx, struct {
			Session string `json:"session"`
		}{"x"}, want},
		{"nil params", ctx, nil, want},
		{"own _meta kept", ctx, map[string]any{"_meta": map[string]any{"traceparent": "00-" + tid + "-1111111111111111-01"}},
			"00-" + tid + "-1111111111111111-01"},
		{"no trace context", context.Background(), map[string]any{"session": "x"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := meta(withTraceMeta(tt.ctx, tt.params)); got != tt.want {
				t.Errorf("traceparent: got %q, want %q", got, tt.want)
			}
		})
	}
	if got, ok := withTraceMeta(ctx, []int{1}).([]int); !ok || len(got) != 1 {
		t.Errorf("non-object params: got %v, want them unchanged", got)
	}
}
