package mux

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/proto"
)

const remoteID = "0123456789abcdef0123456789abcdef"

// fakeRemote owns remoteID on node "b" and attaches a fakeRelay to it.
type fakeRemote struct {
	mu    sync.Mutex
	relay *fakeRelay
	asked []string // principals Attach was called for
	opens int      // Open calls (it places nothing: the session opens here)
	recs  []proto.RecordingInfo
	read  map[string][]byte // recording id → its content on the rest of the cluster
}

func (f *fakeRemote) List(principal string) []proto.SessionInfo {
	return []proto.SessionInfo{{Session: remoteID, Node: "b", Name: "far"}}
}

func (f *fakeRemote) Attach(_ context.Context, principal string, _ bool, p proto.AttachParams, notify func()) (Relay, proto.AttachResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, principal)
	if p.Session != remoteID {
		return nil, proto.AttachResult{}, ErrNotRemote
	}
	f.relay = &fakeRelay{notify: notify}
	f.relay.changed, f.relay.signal = testutil.WakeChan()
	return f.relay, proto.AttachResult{Session: remoteID, Channel: 77}, nil
}

func (f *fakeRemote) Open(context.Context, string, proto.OpenParams, func()) (Relay, proto.OpenResult, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens++
	return nil, proto.OpenResult{}, false, nil
}

func (f *fakeRemote) Kill(context.Context, string, string) (proto.KillResult, error) {
	return proto.KillResult{}, ErrNotRemote
}

func (f *fakeRemote) Lease(context.Context, string, string, int64) (proto.LeaseResult, error) {
	return proto.LeaseResult{}, ErrNotRemote
}

func (f *fakeRemote) Published(context.Context) error { return nil }

func (f *fakeRemote) Capture(context.Context, string, bool, proto.CaptureParams) (proto.CaptureResult, error) {
	return proto.CaptureResult{}, ErrNotRemote
}

func (f *fakeRemote) Recordings(context.Context, string, bool, string) ([]proto.RecordingInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.recs), nil
}

func (f *fakeRemote) ReadRecording(_ context.Context, _ string, _ bool, p proto.RecordingReadParams) (proto.RecordingReadResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, ok := f.read[p.Recording]
	if !ok {
		return proto.RecordingReadResult{}, ErrNotRemote
	}
	end := min(int64(len(data)), p.Offset+int64(p.Length))
	return proto.RecordingReadResult{Recording: p.Recording, Offset: p.Offset, Data: data[p.Offset:end],
		Size: int64(len(data)), EOF: end == int64(len(data))}, nil
}

// fakeRelay is a relay whose owner the test plays.
type fakeRelay struct {
	notify  func()
	changed chan struct{} // signalled (testutil.WakeChan) after Ack, Write and Close
	signal  func()

	mu       sync.Mutex
	buf      []byte
	lost     int64
	closed   string
	acked    int
	written  []byte
	errs     []*proto.Error
	detached bool
	ended    bool
	// resizeErr and signalErr are what Resize and Signal return (nil: they succeed); asked
	// lists the calls that reached the relay ("resize 100x40", "signal INT").
	resizeErr, signalErr error
	asked                []string
}

func (r *fakeRelay) do(f func()) {
	r.mu.Lock()
	f()
	r.mu.Unlock()
	r.notify()
}

func (r *fakeRelay) Session() string { return remoteID }

func (r *fakeRelay) Read(p []byte) (int, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(p) == 0 || len(r.buf) == 0 {
		return 0, 0
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	lost := r.lost
	r.lost = 0
	return n, lost
}

func (r *fakeRelay) State() (bool, *proto.ExitInfo, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) > 0 {
		return true, nil, ""
	}
	return false, nil, r.closed
}

func (r *fakeRelay) Size() (int, int, uint64) { return 0, 0, 0 }

func (r *fakeRelay) Ack(n int) {
	r.mu.Lock()
	r.acked += n
	r.mu.Unlock()
	r.signal()
}

func (r *fakeRelay) Errors() []*proto.Error {
	r.mu.Lock()
	defer r.mu.Unlock()
	es := r.errs
	r.errs = nil
	return es
}

func (r *fakeRelay) Write(p []byte) error {
	r.mu.Lock()
	r.written = append(r.written, p...)
	r.mu.Unlock()
	r.signal()
	return nil
}

func (r *fakeRelay) Resize(_ context.Context, cols, rows int) (proto.ResizeResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, fmt.Sprintf("resize %dx%d", cols, rows))
	if r.resizeErr != nil {
		return proto.ResizeResult{}, r.resizeErr
	}
	return proto.ResizeResult{Cols: cols, Rows: rows}, nil
}

func (r *fakeRelay) Signal(_ context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, "signal "+name)
	return r.signalErr
}

func (r *fakeRelay) Close(detach bool) {
	r.mu.Lock()
	r.detached, r.ended = detach, true
	r.mu.Unlock()
	r.signal()
}

func (r *fakeRelay) get(f func(r *fakeRelay) bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return f(r)
}

// TestRelayedChannel: a session another node owns is listed with its node, attached through the
// Remote under this socket's channel number, and served by the writer like a local one: output
// within the channel's credit only, gaps ahead of the data, acks passed on, input passed on,
// the owner's id-less errors with this channel's number, and the relay's closed reason last.
func TestRelayedChannel(t *testing.T) {
	const window = 1024
	rem := &fakeRemote{}
	s := newServer(t, ServerOptions{Remote: rem, Node: "a", Window: window}, nil)
	var errMu sync.Mutex
	var serverErrs []*proto.Error
	errArrived, signalErr := testutil.WakeChan()
	c := s.dialWith(t, client.DialOptions{ManualAck: true, OnServerError: func(e *proto.Error) {
		errMu.Lock()
		serverErrs = append(serverErrs, e)
		errMu.Unlock()
		signalErr()
	}})
	ctx := testCtx(t)

	list, err := c.List(ctx)
	if err != nil || len(list) != 1 || list[0].Node != "b" || list[0].Session != remoteID {
		t.Fatalf("list: got %+v, %v; want the remote session on b", list, err)
	}
	if _, _, err := c.Attach(ctx, "ffffffffffffffffffffffffffffffff", nil); err == nil ||
		!errors.As(err, new(*proto.Error)) || err.(*proto.Error).Kind() != proto.KindUnknownSession {
		t.Fatalf("attach of an id no node has: got %v, want unknown_session", err)
	}
	ch, res, err := c.Attach(ctx, remoteID, nil)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if res.Channel != ch.ID {
		t.Fatalf("attach result: channel %d, want this socket's %d (not the owner's 77)", res.Channel, ch.ID)
	}
	r := rem.relay
	arrived, signalArrived := testutil.WakeChan()
	ch.SetNotify(signalArrived)
	if rem.asked[len(rem.asked)-1] != principal {
		t.Fatalf("relay asked for %q, want %q", rem.asked, principal)
	}

	// Credit: 5000 bytes buffered at the relay, a window of 1024 reaches the client.
	r.do(func() { r.buf = make([]byte, 5000) })
	testutil.Await(t, arrived, 10*time.Second, "one window delivered", func() bool { return ch.Buffered() == window })
	if _, err := c.List(ctx); err != nil { // a round trip: the writer wrote what it could
		t.Fatal(err)
	}
	if n := ch.Buffered(); n != window {
		t.Fatalf("client got %d bytes, want exactly the window %d", n, window)
	}
	if !r.get(func(r *fakeRelay) bool { return len(r.buf) == 5000-window }) {
		t.Fatalf("the relay's buffer was read beyond the credit")
	}
	buf := make([]byte, 8192)
	if n, _ := ch.Read(buf); n != window {
		t.Fatalf("read %d, want %d", n, window)
	}
	if err := ch.Ack(window); err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, r.changed, 10*time.Second, "the ack passed on to the relay", func() bool { return r.get(func(r *fakeRelay) bool { return r.acked == window }) })
	for got := window; got < 5000; {
		testutil.Await(t, arrived, 10*time.Second, "the next window", func() bool { return ch.Buffered() == min(window, 5000-got) })
		n, _ := ch.Read(buf)
		got += n
		if err := ch.Ack(n); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Await(t, r.changed, 10*time.Second, "every ack passed on", func() bool { return r.get(func(r *fakeRelay) bool { return r.acked == 5000 }) })

	// A gap goes ahead of the data it concerns.
	before := ch.Offset()
	r.do(func() { r.buf, r.lost = []byte("x"), 7 })
	if n, _ := ch.Read(buf); n != 1 || buf[0] != 'x' || ch.Offset()-before != 8 || ch.Lost() != 7 {
		t.Fatalf("after a gap of 7: read %q, offset moved %d, lost %d; want x, 8, 7", buf[:n], ch.Offset()-before, ch.Lost())
	}

	// Input reaches the relay; the owner's id-less error comes back with this channel.
	if _, err := ch.Write([]byte("typed")); err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, r.changed, 10*time.Second, "input passed on", func() bool { return r.get(func(r *fakeRelay) bool { return string(r.written) == "typed" }) })
	r.do(func() {
		r.errs = append(r.errs, withChannel(proto.ErrLimitExceeded("inputQueue", "full"), 77))
	})
	testutil.Await(t, errArrived, 10*time.Second, "the owner's error", func() bool {
		errMu.Lock()
		defer errMu.Unlock()
		return len(serverErrs) == 1
	})
	if got := serverErrs[0].Data["channel"]; got != float64(ch.ID) {
		t.Fatalf("relayed error: data.channel %v, want this socket's %d", got, ch.ID)
	}

	// The owner is lost: session.closed node_lost, then the relay is closed.
	r.do(func() { r.closed = "node_lost" })
	if err := ch.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if ch.Reason() != "node_lost" {
		t.Fatalf("closed: reason %q, want node_lost", ch.Reason())
	}
	testutil.Await(t, r.changed, 10*time.Second, "the relay closed", func() bool { return r.get(func(r *fakeRelay) bool { return r.ended }) })
}

// wakeOnEnd is a span recorder that signals after each span ends: a relayed request's span ends
// after its reply is written, so a test that read the reply waits for the span on this.
type wakeOnEnd struct {
	*tracetest.SpanRecorder
	signal func()
}

func (w wakeOnEnd) OnEnd(s sdktrace.ReadOnlySpan) {
	w.SpanRecorder.OnEnd(s)
	w.signal()
}

// TestRelayedRequestErrors: a relayed session.resize or session.signal that the relay fails
// gets the relay's error as its reply (a protocol error as it is, ErrNotRemote as
// unknown_session, anything else as internal) and marks its span failed; session.closeStdin on
// a relayed channel is refused with invalid_request without reaching the relay; and the channel
// goes on serving requests after each failure.
func TestRelayedRequestErrors(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	ended, signalEnded := testutil.WakeChan()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(wakeOnEnd{rec, signalEnded}))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tel := otel.Noop()
	tel.Tracer = tp.Tracer(otel.ScopeName)
	rem := &fakeRemote{}
	s := newServer(t, ServerOptions{Remote: rem, Node: "a", Telemetry: tel}, nil)
	c := s.dial(t)
	ctx := testCtx(t)
	ch, _, err := c.Attach(ctx, remoteID, nil)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	r := rem.relay

	resize := func() error { return ch.Resize(ctx, 100, 40) }
	signal := func() error { return ch.Signal(ctx, "INT") }
	for _, tc := range []struct {
		name     string
		span     string // the request's span
		call     func() error
		asked    string // the relay's call
		fail     *error // the fakeRelay's error field the case sets
		err      error  // what the relay returns
		wantKind string
		wantCode int
	}{
		{"resize, the owner's error", otel.SpanSessionResize, resize, "resize 100x40", &r.resizeErr,
			proto.ErrSessionClosed(remoteID, "killed"), proto.KindSessionClosed, proto.CodeSessionClosed},
		{"resize, the relay's own failure", otel.SpanSessionResize, resize, "resize 100x40", &r.resizeErr,
			errors.New("relay: the owner did not answer"), proto.KindInternal, proto.CodeInternal},
		{"signal, the owner's error", otel.SpanSessionSignal, signal, "signal INT", &r.signalErr,
			proto.ErrForbidden("read-only"), proto.KindForbidden, proto.CodeForbidden},
		{"signal, the owner no longer has it", otel.SpanSessionSignal, signal, "signal INT", &r.signalErr,
			ErrNotRemote, proto.KindUnknownSession, proto.CodeUnknownSession},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.do(func() { *tc.fail, r.asked = tc.err, nil })
			before := len(rec.Ended())
			err := tc.call()
			var pe *proto.Error
			if !errors.As(err, &pe) || pe.Kind() != tc.wantKind || pe.Code != tc.wantCode {
				t.Fatalf("reply: got %v, want %s (%d)", err, tc.wantKind, tc.wantCode)
			}
			var asked []string
			r.get(func(r *fakeRelay) bool { asked = slices.Clone(r.asked); return true })
			if !slices.Equal(asked, []string{tc.asked}) {
				t.Fatalf("the relay was asked %q, want %q", asked, tc.asked)
			}
			var span sdktrace.ReadOnlySpan
			testutil.Await(t, ended, 10*time.Second, "the request's span ended", func() bool {
				for _, s := range rec.Ended()[before:] {
					if s.Name() == tc.span {
						span = s
						return true
					}
				}
				return false
			})
			if st := span.Status(); st.Code != codes.Error || st.Description != tc.err.Error() {
				t.Errorf("span status: got %v %q, want Error %q", st.Code, st.Description, tc.err.Error())
			}
			if want := semconv.RPCResponseStatusCode(strconv.Itoa(tc.wantCode)); !slices.Contains(span.Attributes(), want) {
				t.Errorf("span attributes: got %v, want %v (the code replied)", span.Attributes(), want)
			}
		})
	}

	// closeStdin is not relayed: refused here, the relay never asked.
	r.do(func() { r.resizeErr, r.signalErr, r.asked = nil, nil, nil })
	var pe *proto.Error
	if err := ch.CloseStdin(ctx); !errors.As(err, &pe) || pe.Kind() != proto.KindInvalidRequest {
		t.Fatalf("closeStdin on a relayed channel: got %v, want invalid_request", err)
	}
	// The channel goes on: the relay answers the next resize and signal.
	if err := resize(); err != nil {
		t.Fatalf("resize after the failures: %v", err)
	}
	if err := signal(); err != nil {
		t.Fatalf("signal after the failures: %v", err)
	}
	var asked []string
	r.get(func(r *fakeRelay) bool { asked = slices.Clone(r.asked); return true })
	if want := []string{"resize 100x40", "signal INT"}; !slices.Equal(asked, want) {
		t.Fatalf("the relay was asked %q, want %q", asked, want)
	}

	// A lease, capture or recording read that no node answers for: the reply's error is the
	// request span's, with its code.
	const nowhere = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		span, method string
		params       any
	}{
		{otel.SpanSessionLease, proto.MethodSessionLease, proto.LeaseParams{Session: nowhere, TTLMs: 1000}},
		{otel.SpanSessionCapture, proto.MethodSessionCapture, proto.CaptureParams{Session: nowhere}},
		{otel.SpanRecordingRead, proto.MethodRecordingRead, proto.RecordingReadParams{Recording: nowhere, Length: 1024}},
	} {
		before := len(rec.Ended())
		var pe *proto.Error
		if err := c.Call(ctx, tc.method, tc.params, nil); !errors.As(err, &pe) || pe.Kind() != proto.KindUnknownSession {
			t.Fatalf("%s of a session no node has: got %v, want unknown_session", tc.method, err)
		}
		var span sdktrace.ReadOnlySpan
		testutil.Await(t, ended, 10*time.Second, tc.span+"'s span ended", func() bool {
			for _, s := range rec.Ended()[before:] {
				if s.Name() == tc.span {
					span = s
					return true
				}
			}
			return false
		})
		want := semconv.RPCResponseStatusCode(strconv.Itoa(proto.CodeUnknownSession))
		if span.Status().Code != codes.Error || !slices.Contains(span.Attributes(), want) {
			t.Errorf("%s: span status %v, attributes %v; want Error with %v", tc.method, span.Status(), span.Attributes(), want)
		}
	}
}
