//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/muxterm/muxterm/client"
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
// which ends after the kill began, and before the kill ended when the kill says the reader was
// no longer blocked; and the whole life of another session (open, attach, resize,
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
	// around the kill's end: before it when the kill saw it ended (reader.blocked false),
	// after the kill's last check otherwise.
	blocked, _ := kill.tag("muxterm.reader.blocked")
	if reader.end() < kill.StartTime || (blocked == "false" && reader.end() > kill.end()) {
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

// clientSpan returns ctx carrying the trace context of a new sampled span of trace tid, as an
// instrumented client's span: the Go client sends it as params._meta.traceparent.
func clientSpan(ctx context.Context, tid trace.TraceID) (context.Context, string) {
	var sid trace.SpanID
	_, _ = rand.Read(sid[:])
	return proto.ContextWithMeta(ctx, proto.Meta{Traceparent: "00-" + tid.String() + "-" + sid.String() + "-01"}), sid.String()
}

// TestJaegerClientTraceOnEveryMethod: a client's trace context (params._meta.traceparent, sent
// by the Go client from the trace context its ctx carries, proto.ContextWithMeta) is the
// parent of the gateway's span of every method: initialize and session.open (both sent by
// DialOpen), the other session methods (attach, resize, signal, capture, lease, list, detach,
// closeStdin, kill), recording.list and recording.read, share.create, share.list and
// share.revoke. No span carries the share link's token.
func TestJaegerClientTraceOnEveryMethod(t *testing.T) {
	j := startJaeger(t)
	const svc = "muxterm-meta"
	g := startGatewayEnv(t, j.otelEnv(svc), "--allow-cmd", "sh", "--allow-cmd", "cat",
		"--record", t.TempDir())
	ctx := ctxT(t, 60*time.Second)
	var tid trace.TraceID
	_, _ = rand.Read(tid[:])
	parents := map[string]string{} // method → the client span it was sent under
	call := func(method string) context.Context {
		cctx, sid := clientSpan(ctx, tid)
		parents[method] = sid
		return cctx
	}
	dctx := call("initialize")
	parents["session.open"] = parents["initialize"]
	c, ch, err := client.DialOpen(dctx, g.WS, client.DialOptions{Token: g.Token},
		client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "stty raw -echo; echo READY; exec cat"}})
	if err != nil {
		t.Fatalf("dial and open: %v\n%s", err, g.Logs())
	}
	t.Cleanup(func() { c.Close() })
	if _, err := ch.ReadUntil(ctx, "READY"); err != nil {
		t.Fatal(err)
	}
	v := g.dial(t)
	vch, _, err := v.Attach(call("session.attach"), ch.Session(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := vch.Resize(call("session.resize"), 100, 30); err != nil {
		t.Fatal(err)
	}
	if err := vch.Signal(call("session.signal"), "WINCH"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Capture(call("session.capture"), ch.Session(), client.CaptureOptions{}); err != nil {
		t.Fatal(err)
	}
	var lease proto.LeaseResult
	if err := c.Call(call("session.lease"), "session.lease", map[string]any{"session": ch.Session(), "ttl_ms": 1000}, &lease); err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(call("session.list")); err != nil {
		t.Fatal(err)
	}
	if err := vch.Detach(call("session.detach")); err != nil {
		t.Fatal(err)
	}
	pch, err := c.Open(ctx, client.OpenOptions{Pipes: true, Cmd: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pch.CloseStdin(call("session.closeStdin")); err != nil {
		t.Fatal(err)
	}
	if err := pch.Wait(ctx); err != nil {
		t.Fatalf("cat after its stdin closed: %v", err)
	}
	if _, err := c.Recordings(call("recording.list"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadRecording(call("recording.read"), ch.Session(), 0, 1024); err != nil {
		t.Fatal(err)
	}
	sh, err := c.ShareCreate(call("share.create"), ch.Session(), time.Minute, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ShareList(call("share.list"), ch.Session()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ShareRevoke(call("share.revoke"), sh.Share); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kill(call("session.kill"), ch.Session()); err != nil {
		t.Fatal(err)
	}
	var tr jaegerTrace
	testutil.WaitFor(t, 15*time.Second, "every method's span in the client's trace", func() bool {
		var err error
		if tr, err = j.trace(ctx, tid.String()); err != nil {
			return false
		}
		found := map[string]bool{}
		for _, s := range tr.Spans {
			if sid, ok := parents[s.OperationName]; ok {
				_, p := s.parent()
				found[s.OperationName] = found[s.OperationName] || p == sid
			}
		}
		for method := range parents {
			if !found[method] {
				return false
			}
		}
		return true
	})
	for _, s := range tr.Spans {
		for _, tg := range s.Tags {
			if strings.Contains(fmt.Sprint(tg.Value), sh.Token) {
				t.Errorf("%s: tag %s holds the share link's token", s.OperationName, tg.Key)
			}
		}
	}
	for method, sid := range parents {
		var got []string
		ok := false
		for _, s := range tr.Spans {
			if s.OperationName == method {
				_, p := s.parent()
				got = append(got, p)
				ok = ok || p == sid
			}
		}
		if !ok {
			t.Errorf("%s: spans with parents %v, want one under the client's span %s", method, got, sid)
		}
	}
}

// TestJaegerOneTraceAcrossNodes: an attach, resize, signal, capture, lease and kill sent to node b
// for a session node a owns are relayed with b's trace context, so Jaeger shows one trace per
// request holding both services: the client's span, b's span, and a's span as its child.
func TestJaegerOneTraceAcrossNodes(t *testing.T) {
	j := startJaeger(t)
	tc := startClusterEnv(t, nil, map[string][]string{
		"a": j.otelEnv("muxterm-a"), "b": j.otelEnv("muxterm-b"), "c": j.otelEnv("muxterm-c"),
	}, "a", "b", "c")
	a, b := tc.nodes["a"], tc.nodes["b"]
	ctx := ctxT(t, 90*time.Second)
	ca, cb := dialAs(t, a, tc.alice), dialAs(t, b, tc.alice)
	cha := catSession(ctx, t, ca)
	id := cha.Session()
	waitListed(t, cb, id, "a", 10*time.Second)

	type req struct {
		method string
		tid    trace.TraceID
		sid    string
	}
	var reqs []req
	send := func(method string) context.Context {
		var tid trace.TraceID
		_, _ = rand.Read(tid[:])
		cctx, sid := clientSpan(ctx, tid)
		reqs = append(reqs, req{method, tid, sid})
		return cctx
	}
	chb, _, err := cb.Attach(send("session.attach"), id, nil)
	if err != nil {
		t.Fatalf("attach through b: %v", err)
	}
	if err := chb.Resize(send("session.resize"), 90, 30); err != nil {
		t.Fatalf("resize through b: %v", err)
	}
	if err := chb.Signal(send("session.signal"), "WINCH"); err != nil {
		t.Fatalf("signal through b: %v", err)
	}
	if _, err := cb.Capture(send("session.capture"), id, client.CaptureOptions{}); err != nil {
		t.Fatalf("capture through b: %v", err)
	}
	var lease proto.LeaseResult
	if err := cb.Call(send("session.lease"), proto.MethodSessionLease,
		proto.LeaseParams{Session: id, TTLMs: 1000}, &lease); err != nil {
		t.Fatalf("lease through b: %v", err)
	}
	if _, err := cb.Kill(send("session.kill"), id); err != nil {
		t.Fatalf("kill through b: %v", err)
	}
	for _, r := range reqs {
		var tr jaegerTrace
		var onB, onA *jaegerSpan
		testutil.WaitFor(t, 20*time.Second, r.method+"'s trace with both nodes in Jaeger", func() bool {
			var err error
			if tr, err = j.trace(ctx, r.tid.String()); err != nil {
				return false
			}
			onB, onA = nil, nil
			for i := range tr.Spans {
				s := &tr.Spans[i]
				if s.OperationName != r.method {
					continue
				}
				switch tr.Processes[s.ProcessID].ServiceName {
				case "muxterm-b":
					if _, p := s.parent(); p == r.sid {
						onB = s
					}
				case "muxterm-a":
					onA = s
				}
			}
			return onB != nil && onA != nil
		})
		// a's span descends from b's: directly, or through b's relay request spans.
		ancestors := map[string]bool{}
		for s := onA; s != nil; {
			_, p := s.parent()
			ancestors[p] = true
			s = tr.spanByID(p)
		}
		if !ancestors[onB.SpanID] {
			t.Errorf("%s: a's span %s does not descend from b's %s", r.method, onA.SpanID, onB.SpanID)
		}
		var services []string
		for _, p := range tr.Processes {
			services = append(services, p.ServiceName)
		}
		t.Logf("%s: one trace %s, services %v, %d spans", r.method, r.tid, services, len(tr.Spans))
	}
}
