//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/proto"
)

// findSpan waits until Jaeger holds a span of service that match accepts among the traces
// tagged with tags, and returns it with its trace.
func (j *jaeger) findSpan(ctx context.Context, t *testing.T, service string, tags map[string]string, what string,
	match func(*jaegerSpan) bool) (jaegerSpan, jaegerTrace) {
	t.Helper()
	var span jaegerSpan
	var tr jaegerTrace
	testutil.WaitFor(t, 15*time.Second, what+" in Jaeger", func() bool {
		traces, err := j.traces(ctx, service, tags)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range traces {
			for i := range x.Spans {
				if match(&x.Spans[i]) {
					span, tr = x.Spans[i], x
					return true
				}
			}
		}
		return false
	})
	return span, tr
}

// spanByID returns the span id of tr, or nil.
func (tr *jaegerTrace) spanByID(id string) *jaegerSpan {
	for i := range tr.Spans {
		if tr.Spans[i].SpanID == id {
			return &tr.Spans[i]
		}
	}
	return nil
}

// parent returns s's CHILD_OF reference (trace and span ids), or empty strings.
func (s *jaegerSpan) parent() (traceID, spanID string) {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.TraceID, r.SpanID
		}
	}
	return "", ""
}

// wantTags checks that s carries each tag of want with its value ("" for any value).
func wantTags(t *testing.T, s *jaegerSpan, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got, ok := s.tag(k)
		if !ok || (v != "" && got != v) {
			t.Errorf("span %s: tag %s = %q (present %v), want %q", s.OperationName, k, got, ok, v)
		}
	}
}

// TestJaegerTraces: the gateway exports to a Jaeger all-in-one, and Jaeger's query API gives
// back: the kill of a session whose escapee holds the PTY, with its events, its attributes
// (semantic conventions' process.pid; muxterm's own), and a link to the session's reader span,
// which ends after the kill began, and after it ended exactly when the kill says the reader was
// still blocked; and the whole life of another session (open, attach, resize,
// detach, the reap's kill under reaper.sweep, the reader) found by its session.id tag, its
// request spans server spans of a JSON-RPC method.
func TestJaegerTraces(t *testing.T) {
	j := startJaeger(t)
	const svc = "muxterm-e2e"
	g := startGatewayEnv(t, j.otelEnv(svc), "--allow-cmd", "sh", "--kill-grace", "100ms",
		"--idle-grace", "1s", "--reap-interval", "100ms")
	ctx := ctxT(t, 120*time.Second)
	c := g.dial(t)

	esc := openEscapee(ctx, t, c)
	kr, err := c.Kill(ctx, esc.Session())
	if err != nil || kr.Escapees != 1 {
		t.Fatalf("kill with an escapee: got %+v %v, want 1 escapee", kr, err)
	}

	life := catSession(ctx, t, c)
	viewer := g.dial(t)
	vch, _, err := viewer.Attach(ctx, life.Session(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := vch.Resize(ctx, 100, 40); err != nil {
		t.Fatal(err)
	}
	if err := vch.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	if err := life.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "the reaper to close the detached session", func() bool {
		return !slices.ContainsFunc(sessionList(ctx, t, c), func(s proto.SessionInfo) bool { return s.Session == life.Session() })
	})

	// The kill, its events and attributes.
	kill, _ := j.findSpan(ctx, t, svc, map[string]string{"session.id": esc.Session()}, "the escapee's session.kill",
		func(s *jaegerSpan) bool { return s.OperationName == "session.kill" })
	ev := kill.events()
	for _, want := range []string{"signal.sent", "child.reaped", "escapees.found"} {
		if !slices.Contains(ev, want) {
			t.Errorf("session.kill events: got %v, want %s", ev, want)
		}
	}
	wantTags(t, &kill, map[string]string{"session.id": esc.Session(), "process.pid": strconv.Itoa(esc.Pid()),
		"muxterm.reason": "killed", "muxterm.kill.outcome": "killed", "muxterm.kill.escapees": "1",
		"muxterm.kill.survivors": "0", "muxterm.reader.blocked": ""})
	if d := time.Duration(kill.Duration) * time.Microsecond; d > 2*time.Second {
		t.Errorf("session.kill lasted %v", d)
	}
	// The reader span, through the kill's link: in the open's trace, ending after the kill.
	var readerRef [2]string
	for _, r := range kill.References {
		if r.RefType == "FOLLOWS_FROM" {
			readerRef = [2]string{r.TraceID, r.SpanID}
		}
	}
	if readerRef[1] == "" {
		t.Fatalf("session.kill has no link to the reader span: %+v", kill.References)
	}
	var reader *jaegerSpan
	testutil.WaitFor(t, 15*time.Second, "the linked session.reader span in Jaeger", func() bool {
		tr, err := j.trace(ctx, readerRef[0])
		if err != nil {
			return false
		}
		reader = tr.spanByID(readerRef[1])
		return reader != nil
	})
	if reader.OperationName != "session.reader" {
		t.Fatalf("the kill's link leads to %s, want session.reader", reader.OperationName)
	}
	// The kill signals the escapee too (the gateway's escapee policy), so the reader ends
	// around the kill's end: after it exactly when the kill saw it still blocked.
	blocked, _ := kill.tag("muxterm.reader.blocked")
	if reader.end() < kill.StartTime || (blocked == "true") != (reader.end() > kill.end()) {
		t.Errorf("session.reader ended at %d µs; session.kill ran %d..%d µs and says the reader blocked: %s",
			reader.end(), kill.StartTime, kill.end(), blocked)
	}
	t.Logf("session.kill %d µs; session.reader ended %d µs after the kill's end (reader.blocked %s)",
		kill.Duration, reader.end()-kill.end(), blocked)
	wantTags(t, reader, map[string]string{"session.id": esc.Session(), "process.pid": strconv.Itoa(esc.Pid())})

	// The life of the other session, by its id.
	byName := map[string][]jaegerSpan{}
	testutil.WaitFor(t, 15*time.Second, "the session's life in Jaeger", func() bool {
		traces, err := j.traces(ctx, svc, map[string]string{"session.id": life.Session()})
		if err != nil {
			t.Fatal(err)
		}
		clear(byName)
		for _, tr := range traces {
			for _, s := range tr.Spans {
				if id, _ := s.tag("session.id"); id == life.Session() {
					byName[s.OperationName] = append(byName[s.OperationName], s)
				}
			}
		}
		for _, n := range []string{"session.open", "session.attach", "session.resize", "session.detach", "session.kill", "session.reader"} {
			if len(byName[n]) == 0 {
				return false
			}
		}
		return true
	})
	for _, n := range []string{"session.open", "session.attach", "session.resize", "session.detach"} {
		wantTags(t, &byName[n][0], map[string]string{"span.kind": "server", "rpc.system.name": "jsonrpc", "rpc.method": n})
	}
	reap := byName["session.kill"][0]
	wantTags(t, &reap, map[string]string{"muxterm.reason": "reaped"})
	// The reap's kill is a child of the sweep that claimed it.
	ptid, psid := reap.parent()
	tr, err := j.trace(ctx, ptid)
	if err != nil {
		t.Fatal(err)
	}
	if sweep := tr.spanByID(psid); sweep == nil || sweep.OperationName != "reaper.sweep" {
		t.Errorf("the reap's session.kill: parent %v, want reaper.sweep", sweep)
	}
	if p := tr.Processes[reap.ProcessID]; p.ServiceName != svc {
		t.Errorf("service: got %q, want %q", p.ServiceName, svc)
	}
}
