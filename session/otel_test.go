package session

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/muxterm/muxterm/otel"
)

func spanNamed(spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

func eventNames(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

// TestKillSpanEndsBeforeTheReaderSpan: with an escapee holding the PTY and the escapee policy
// off, the session.kill span ends within the kill deadline while session.reader ends only when
// the escapee exits; the two are linked, and the kill span says the reader was still blocked.
func TestKillSpanEndsBeforeTheReaderSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	opts := testOptions()
	opts.SpareEscapees = true
	opts.Tracer = tp.Tracer(otel.ScopeName)
	r, s, _, _ := openWithEscapee(t, opts, "")

	res, took := killWithin(t, killDeadline, func(ctx context.Context) (KillResult, error) {
		return r.Kill(ctx, s.ID(), "alice")
	})
	if !res.ReaderBlocked {
		t.Fatalf("reader blocked: got false, want true (the escapee holds the PTY)")
	}
	kill := spanNamed(rec.Ended(), otel.SpanSessionKill)
	if kill == nil {
		t.Fatal("no session.kill span ended with the kill")
	}
	if d := kill.EndTime().Sub(kill.StartTime()); d > killDeadline || d > took+time.Millisecond {
		t.Errorf("session.kill lasted %v, want within the kill (%v)", d, took)
	}
	if spanNamed(rec.Ended(), otel.SpanSessionReader) != nil {
		t.Fatal("session.reader ended with the kill, but the escapee still holds the PTY")
	}
	evs := eventNames(kill)
	for _, want := range []string{otel.EventSignalSent, otel.EventChildReaped, otel.EventEscapeesFound, otel.EventReaderBlocked} {
		if !slices.Contains(evs, want) {
			t.Errorf("session.kill events: got %v, want %s among them", evs, want)
		}
	}
	testutil.WaitClosed(t, s.ReaderDone(), escapeeLifetime+5*time.Second, "reader end after the escapee")
	reader := spanNamed(rec.Ended(), otel.SpanSessionReader)
	if reader == nil {
		t.Fatal("session.reader did not end with the reader")
	}
	if !reader.EndTime().After(kill.EndTime()) {
		t.Errorf("session.reader ended at %v, want after session.kill (%v)", reader.EndTime(), kill.EndTime())
	}
	linked := false
	for _, l := range reader.Links() {
		linked = linked || l.SpanContext.SpanID() == kill.SpanContext().SpanID()
	}
	if !linked {
		t.Errorf("session.reader has no link to session.kill")
	}
	if len(kill.Links()) == 0 || kill.Links()[0].SpanContext.SpanID() != reader.SpanContext().SpanID() {
		t.Errorf("session.kill has no link to session.reader")
	}
	for _, a := range kill.Attributes() {
		if a.Key == "process.pid" && a.Value.AsInt64() != int64(s.Pid()) {
			t.Errorf("process.pid: got %v, want %d", a.Value.AsInt64(), s.Pid())
		}
	}
}
