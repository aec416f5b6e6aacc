package reaper

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/session"
)

// TestSweepSpanCounts: a sweep that selects two sessions, loses one to a reattach and reaps
// the other records reaper.sweep with those counts, and the reaped session's session.kill span
// is its child.
func TestSweepSpanCounts(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tel := otel.Noop()
	tel.Tracer = tp.Tracer(otel.ScopeName)
	h := newHarness(t, func(so *session.Options, ro *Options) {
		so.Tracer = tel.Tracer
		ro.Telemetry = tel
	})
	keep := h.mustOpen("cat")
	reap := h.mustOpen("cat")
	h.age(keep, testGrace+5*time.Second)
	h.rp.testHookAfterSelect = func([]Victim) {
		v, _, err := h.reg.Attach(keep.ID(), owner, 0, nil)
		if err != nil {
			t.Errorf("attach in the gap: %v", err)
			return
		}
		t.Cleanup(v.Close)
	}
	if got, want := h.sweep(), (Result{Selected: 2, Claimed: 1, Lost: 1}); got != want {
		t.Fatalf("sweep: got %+v, want %+v", got, want)
	}
	h.wantGone(reap)
	var sweep, kill sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case otel.SpanReaperSweep:
			sweep = s
		case otel.SpanSessionKill:
			kill = s
		}
	}
	if sweep == nil || kill == nil {
		t.Fatalf("spans: got sweep %v kill %v, want both", sweep != nil, kill != nil)
	}
	want := map[string]int64{otel.AttrSelected: 2, otel.AttrClaimed: 1, otel.AttrLostReattach: 1}
	for _, a := range sweep.Attributes() {
		if w, ok := want[string(a.Key)]; ok {
			if a.Value.AsInt64() != w {
				t.Errorf("%s: got %d, want %d", a.Key, a.Value.AsInt64(), w)
			}
			delete(want, string(a.Key))
		}
	}
	if len(want) > 0 {
		t.Errorf("reaper.sweep lacks %v", want)
	}
	if kill.Parent().SpanID() != sweep.SpanContext().SpanID() {
		t.Errorf("session.kill is not a child of reaper.sweep")
	}
}
