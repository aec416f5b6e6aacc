//go:build e2e

package e2e

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	protobuf "google.golang.org/protobuf/proto"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// otlpReceiver is a real OTLP/HTTP trace receiver on 127.0.0.1: it decodes the protobuf
// requests the gateway's exporter sends.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if req.URL.Path == "/v1/traces" {
			var ex coltracepb.ExportTraceServiceRequest
			if err := protobuf.Unmarshal(b, &ex); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.mu.Lock()
			for _, rs := range ex.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					r.spans = append(r.spans, ss.Spans...)
				}
			}
			r.mu.Unlock()
			out, _ := protobuf.Marshal(&coltracepb.ExportTraceServiceResponse{})
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(out)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// openEscapee opens a shell whose child escapes into a session of its own, holding the PTY
// for 20 s: a kill returns within its deadline while the reader ends later.
func openEscapee(ctx context.Context, t *testing.T, c *client.Client) *client.Channel {
	t.Helper()
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c",
		"setsid sh -c 'echo READY; exec sleep 20' & exec sleep 300"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "READY"); err != nil {
		t.Fatal(err)
	}
	return ch
}

// find returns the first span named name in trace traceID.
func (r *otlpReceiver) find(name string, traceID []byte) *tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.Name == name && (traceID == nil || string(s.TraceId) == string(traceID)) {
			return s
		}
	}
	return nil
}

func (r *otlpReceiver) findBySession(name, session string) *tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.Name != name {
			continue
		}
		for _, a := range s.Attributes {
			if a.Key == "session.id" && a.Value.GetStringValue() == session {
				return s
			}
		}
	}
	return nil
}

func attr(s *tracepb.Span, key string) (string, bool) {
	for _, a := range s.Attributes {
		if a.Key == key {
			switch v := a.Value.Value.(type) {
			case *commonpb.AnyValue_IntValue:
				return strconv.FormatInt(v.IntValue, 10), true
			case *commonpb.AnyValue_StringValue:
				return v.StringValue, true
			}
			return a.Value.String(), true
		}
	}
	return "", false
}

func TestOTelKillTraceAndMetrics(t *testing.T) {
	rcv := newOTLPReceiver(t)
	g := startGatewayEnv(t, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.srv.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_METRICS_EXPORTER=none",
		"OTEL_BSP_SCHEDULE_DELAY=50",
		"OTEL_SERVICE_NAME=muxterm-e2e",
	}, "--allow-cmd", "sh", "--metrics", "--kill-grace", "100ms")
	c := g.dial(t)
	ctx := ctxT(t, 30*time.Second)

	// A shell whose escapee holds the PTY: the kill returns, the reader ends afterwards.
	ch := openEscapee(ctx, t, c)
	var tid [16]byte
	var sid [8]byte
	_, _ = rand.Read(tid[:])
	_, _ = rand.Read(sid[:])
	traceparent := fmt.Sprintf("00-%s-%s-01", hex.EncodeToString(tid[:]), hex.EncodeToString(sid[:]))
	var res proto.KillResult
	if err := c.Call(ctx, "session.kill", map[string]any{"session": ch.Session(),
		"_meta": map[string]any{"traceparent": traceparent}}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != "killed" || res.Escapees != 1 {
		t.Fatalf("kill: got %+v, want killed with 1 escapee", res)
	}
	// A second, plain kill for the histogram count.
	ch2, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kill(ctx, ch2.Session()); err != nil {
		t.Fatal(err)
	}

	var kill *tracepb.Span
	testutil.WaitFor(t, 10*time.Second, "the session.kill span at the receiver", func() bool {
		kill = rcv.find("session.kill", tid[:])
		return kill != nil
	})
	if string(kill.ParentSpanId) != string(sid[:]) {
		t.Errorf("session.kill parent: got %x, want the client's span %x", kill.ParentSpanId, sid)
	}
	if got, _ := attr(kill, "session.id"); got != ch.Session() {
		t.Errorf("session.id: got %q, want %q", got, ch.Session())
	}
	if got, _ := attr(kill, "process.pid"); got != strconv.Itoa(ch.Pid()) {
		t.Errorf("process.pid: got %q, want %d", got, ch.Pid())
	}
	d := time.Duration(kill.EndTimeUnixNano - kill.StartTimeUnixNano)
	if d > 2*time.Second {
		t.Errorf("session.kill lasted %v", d)
	}
	var events []string
	for _, e := range kill.Events {
		events = append(events, e.Name)
	}
	for _, want := range []string{"signal.sent", "child.reaped", "escapees.found"} {
		if !strings.Contains(strings.Join(events, ","), want) {
			t.Errorf("session.kill events: got %v, want %s", events, want)
		}
	}
	var reader *tracepb.Span
	testutil.WaitFor(t, 10*time.Second, "the session.reader span", func() bool {
		reader = rcv.findBySession("session.reader", ch.Session())
		return reader != nil
	})
	if reader.EndTimeUnixNano < kill.StartTimeUnixNano {
		t.Errorf("session.reader ended before the kill began")
	}
	if rcv.find("session.open", nil) == nil {
		t.Errorf("no session.open span")
	}
	for _, s := range rcv.spans {
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.GetStringValue(), g.Token) {
				t.Errorf("span %s carries the token", s.Name)
			}
		}
	}

	// /metrics behind the token; the kill histogram counts both kills.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.Base+"/metrics", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: got %v %v, want 401", resp, err)
	} else {
		resp.Body.Close()
	}
	if count := scrapeCounter(ctx, t, g, "muxterm_session_kill_duration_seconds_count"); count != 2 {
		t.Errorf("kill histogram count: got %v, want 2", count)
	}
}

// The spans of a recorded session point at the moment in its recording: session.open and
// session.kill carry muxterm.recording.id (the session's id) and muxterm.recording.offset_s,
// the kill's after the open's and no later than the recording's own clock at the kill.
func TestOTelSpansPointAtTheRecording(t *testing.T) {
	rcv := newOTLPReceiver(t)
	g := startGatewayEnv(t, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.srv.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_METRICS_EXPORTER=none",
		"OTEL_BSP_SCHEDULE_DELAY=50",
	}, "--record", t.TempDir())
	defer g.Stop(10 * time.Second)
	c := g.dial(t)
	ctx := ctxT(t, 30*time.Second)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	typeUntil(ctx, t, ch, "echo rec''orded\n", "recorded")
	if _, err := c.Kill(ctx, ch.Session()); err != nil {
		t.Fatal(err)
	}
	offset := func(name string) float64 {
		var s *tracepb.Span
		testutil.WaitFor(t, 10*time.Second, "the "+name+" span", func() bool {
			s = rcv.findBySession(name, ch.Session())
			return s != nil
		})
		if id, _ := attr(s, "muxterm.recording.id"); id != ch.Session() {
			t.Fatalf("%s: muxterm.recording.id %q, want the session's id %s", name, id, ch.Session())
		}
		for _, a := range s.Attributes {
			if a.Key == "muxterm.recording.offset_s" {
				return a.Value.GetDoubleValue()
			}
		}
		t.Fatalf("%s: no muxterm.recording.offset_s", name)
		return 0
	}
	open, kill := offset("session.open"), offset("session.kill")
	if !(open >= 0 && kill > open) {
		t.Fatalf("offsets: open %f, kill %f; want 0 ≤ open < kill", open, kill)
	}
	_, _, evs := exportCast(ctx, t, c, ch.Session())
	var killAt float64 = -1
	for _, e := range evs {
		if e.Code == "m" && strings.HasPrefix(e.Data, "kill: ") {
			killAt = e.At
		}
	}
	if killAt < 0 || kill < killAt {
		t.Fatalf("kill span's offset %f, the recording's kill marker at %f: want the span to end at or after it", kill, killAt)
	}
}
