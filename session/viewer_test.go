package session

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/muxterm/muxterm/otel"
)

// fakeSession is a session with no process and no reader: tests drive its ingest path directly.
func fakeSession(scrollback int) *Session {
	o := testOptions()
	o.ScrollbackBytes = scrollback
	o = o.withDefaults()
	s := &Session{id: "fake", opts: &o, now: time.Now, exited: make(chan struct{}),
		readerDone: make(chan struct{}),
		ring:       newRing(scrollback), viewers: make(map[*Viewer]struct{}), echo: new(echoGroup)}
	s.unwatchedSince = s.now()
	return s
}

func TestViewerReadsExactGaps(t *testing.T) {
	type step struct {
		ingest   int   // bytes to add (as the reader would), or
		read     int   // a read with a buffer this size
		final    bool  // or: the output ends
		wantN    int   // for read
		wantLost int64 // for read
		wantErr  error // for read
	}
	ingest := func(n int) step { return step{ingest: n} }
	read := func(p, n int, lost int64, err error) step {
		return step{read: p, wantN: n, wantLost: lost, wantErr: err}
	}
	final := step{final: true}
	tests := []struct {
		name  string
		ring  int
		steps []step
	}{
		{"in order", 100, []step{ingest(30), read(10, 10, 0, nil), read(100, 20, 0, nil), read(100, 0, 0, nil),
			ingest(5), read(100, 5, 0, nil)}},
		{"nothing yet", 100, []step{read(100, 0, 0, nil)}},
		{"behind by exactly the overwritten bytes", 100, []step{ingest(60), read(100, 60, 0, nil),
			ingest(50), ingest(50), ingest(50), ingest(50), ingest(50), // end 310, start 210
			read(10, 10, 150, nil), read(1000, 90, 0, nil), read(1000, 0, 0, nil)}},
		{"gap reported once", 10, []step{ingest(25), read(4, 4, 15, nil), read(4, 4, 0, nil), read(4, 2, 0, nil)}},
		{"gap then end", 10, []step{ingest(25), final, read(100, 10, 15, nil), read(100, 0, 0, io.EOF), read(100, 0, 0, io.EOF)}},
		{"end with nothing unread", 10, []step{final, read(100, 0, 0, io.EOF)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeSession(tt.ring)
			v, _, err := s.Subscribe(0, nil)
			if err != nil {
				t.Fatal(err)
			}
			var total int64
			for i, st := range tt.steps {
				switch {
				case st.ingest > 0:
					s.ingest(pattern(total, st.ingest))
					total += int64(st.ingest)
				case st.final:
					s.finishOutput()
				default:
					before := v.Offset()
					p := make([]byte, st.read)
					n, lost, err := v.Read(p)
					if n != st.wantN || lost != st.wantLost || err != st.wantErr {
						t.Fatalf("step %d: got n=%v lost=%v err=%v, want n=%v lost=%v err=%v", i, n, lost, err, st.wantN, st.wantLost, st.wantErr)
					}
					if want := pattern(before+lost, n); !bytes.Equal(p[:n], want) {
						t.Fatalf("step %d: got %v, want %v", i, p[:n], want)
					}
					if off := v.Offset(); off != before+lost+int64(n) {
						t.Fatalf("step %d: offset got %v, want %v", i, off, before+lost+int64(n))
					}
				}
			}
			v.Close()
			v.Close() // twice is fine
			if n, lost, err := v.Read(make([]byte, 10)); n != 0 || lost != 0 || !errors.Is(err, ErrViewerClosed) {
				t.Errorf("read after close: got %v, %v, %v, want 0, 0, %v", n, lost, err, ErrViewerClosed)
			}
		})
	}
}

func TestSubscribeOffsets(t *testing.T) {
	s := fakeSession(100)
	s.ingest(pattern(0, 250)) // start 150, end 250
	tests := []struct {
		name    string
		from    int64
		want    AttachInfo
		wantErr error
	}{
		{"oldest retained", -1, AttachInfo{Offset: 150, End: 250}, nil},
		{"from zero, lost", 0, AttachInfo{Offset: 150, Lost: 150, End: 250}, nil},
		{"from just before start", 149, AttachInfo{Offset: 150, Lost: 1, End: 250}, nil},
		{"from start", 150, AttachInfo{Offset: 150, End: 250}, nil},
		{"from middle", 200, AttachInfo{Offset: 200, End: 250}, nil},
		{"from end", 250, AttachInfo{Offset: 250, End: 250}, nil},
		{"beyond end", 251, AttachInfo{}, ErrBadOffset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, info, err := s.Subscribe(tt.from, nil)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err: got %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			defer v.Close()
			if info != tt.want {
				t.Errorf("info: got %+v, want %+v", info, tt.want)
			}
			if off := v.Offset(); off != tt.want.Offset {
				t.Errorf("offset: got %v, want %v", off, tt.want.Offset)
			}
		})
	}
}

// TestUnwatchedSinceTracksViewers: the idle clock the reaper reads: born unwatched; the first subscribe clears it; with two viewers one
// unsubscribe keeps it clear; the last unsubscribe sets it (to the clock's now).
func TestUnwatchedSinceTracksViewers(t *testing.T) {
	var clock atomic.Int64
	born := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	clock.Store(born.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	r := NewRegistry(testOptions(), now)
	s, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", "exec sleep 60")

	if got := s.UnwatchedSince(); !got.Equal(born) {
		t.Fatalf("born: got unwatched since %v, want %v", got, born)
	}
	a, _, err := r.Attach(s.ID(), "alice", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.UnwatchedSince(); !got.IsZero() {
		t.Errorf("after the first attach: got %v, want zero", got)
	}
	b, _, err := r.Attach(s.ID(), "alice", -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(time.Second))
	a.Close()
	if got := s.UnwatchedSince(); !got.IsZero() {
		t.Errorf("one of two viewers left: got %v, want zero", got)
	}
	clock.Add(int64(time.Second))
	left := now()
	b.Close()
	if got := s.UnwatchedSince(); !got.Equal(left) {
		t.Errorf("the last viewer left: got %v, want %v", got, left)
	}
	b.Close() // a second close changes nothing
	clock.Add(int64(time.Second))
	if got := s.UnwatchedSince(); !got.Equal(left) {
		t.Errorf("after a second close: got %v, want %v", got, left)
	}
	if n := s.Info().Viewers; n != 0 {
		t.Errorf("viewers: got %v, want 0", n)
	}
}

// bigScript prints the same 1 MiB as exitScript, from the program itself (exec), so its pid is
// the writer's.
const bigScript = `stty raw -echo; exec awk 'BEGIN { for (i = 0; i < 131072; i++) printf "%07d\n", i }'`

// blockedInWrite reports whether pid sits in write(2).
func blockedInWrite(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/syscall")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 0 && f[0] == strconv.Itoa(syscall.SYS_WRITE)
}

// meterProbe records the session metrics with a real SDK meter and a manual reader.
type meterProbe struct{ reader *sdkmetric.ManualReader }

func newMeterProbe(t *testing.T) (*otel.Instruments, *meterProbe) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	in, err := otel.NewInstruments(mp.Meter(otel.ScopeName))
	if err != nil {
		t.Fatal(err)
	}
	return in, &meterProbe{reader: reader}
}

// sum is the total of a counter.
func (p *meterProbe) sum(t *testing.T, name string) float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := p.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					total += float64(dp.Value)
				}
			case metricdata.Sum[float64]:
				for _, dp := range d.DataPoints {
					total += dp.Value
				}
			}
		}
	}
	return total
}

func isPaused(s *Session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

// checkStream verifies invariant 5 for one viewer that started at offset 0: the bytes it got,
// with the gaps it was told about, are exactly want, in order.
func checkStream(t *testing.T, name string, got []byte, gaps []gap, want []byte) {
	t.Helper()
	var off int64 // offset in want of got[prev]
	prev := 0
	for _, g := range gaps {
		seg := got[prev:g.at]
		if !bytes.Equal(seg, want[off:off+int64(len(seg))]) {
			t.Errorf("viewer %s: bytes before the gap at %d differ from the stream", name, off+int64(len(seg)))
			return
		}
		off += int64(len(seg)) + g.lost
		prev = g.at
	}
	seg := got[prev:]
	if off+int64(len(seg)) != int64(len(want)) || !bytes.Equal(seg, want[off:]) {
		lost := off - int64(prev)
		t.Errorf("viewer %s: got %d bytes and %d lost, want exactly the %d-byte stream", name, len(got), lost, len(want))
	}
}

func TestViewersReadInOrder(t *testing.T) {
	t.Parallel()
	want := exitScriptOutput()
	tests := []struct {
		name      string
		ring      int
		allowGaps bool
	}{
		// The ring holds the whole output: nobody can fall off it.
		{"ring holds everything", 1 << 20, false},
		// The ring holds 1/16 of it: a viewer that falls behind the other (the reader only
		// pauses when every viewer is far behind) may get gaps, with exact counts.
		{"small ring", 64 << 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := testOptions()
			opts.ScrollbackBytes = tt.ring
			r := NewRegistry(opts, nil)
			wakeA, wakeFnA := testutil.WakeChan()
			s, va := openT(t, r, "alice", wakeFnA, "/bin/sh", "-c", exitScript)
			wakeB, wakeFnB := testutil.WakeChan()
			vb, info, err := r.Attach(s.ID(), "alice", 0, wakeFnB)
			if err != nil {
				t.Fatal(err)
			}
			if info.Lost != 0 {
				t.Fatalf("second viewer: got %v bytes lost at attach, want 0", info.Lost)
			}
			ca, cb := collect(t, va, wakeA, nil), collect(t, vb, wakeB, nil)
			for name, c := range map[string]*collector{"A": ca, "B": cb} {
				if err := c.waitEnd(t, 30*time.Second); err != io.EOF {
					t.Fatalf("viewer %s end: got %v, want %v", name, err, io.EOF)
				}
				got, gaps, _ := c.result()
				if len(gaps) != 0 && !tt.allowGaps {
					t.Errorf("viewer %s gaps: got %v, want none", name, gaps)
				}
				checkStream(t, name, got, gaps, want)
			}
			testutil.WaitClosed(t, s.Exited(), 5*time.Second, "exit")
			if e, _ := s.Exit(); e != (ExitStatus{Code: 7}) {
				t.Errorf("exit: got %+v, want code 7", e)
			}
		})
	}
}

func TestStalledViewerDoesNotDelayFastOne(t *testing.T) {
	t.Parallel()
	want := exitScriptOutput()
	const ringSize = 64 << 10
	opts := testOptions()
	opts.ScrollbackBytes = ringSize
	r := NewRegistry(opts, nil)
	// The stalled viewer attaches with the open (from 0) and never reads until the end.
	_, stalledFn := testutil.WakeChan()
	s, stalled := openT(t, r, "alice", stalledFn, "/bin/sh", "-c", exitScript)
	wake, wakeFn := testutil.WakeChan()
	fast, info, err := r.Attach(s.ID(), "alice", 0, wakeFn)
	if err != nil {
		t.Fatal(err)
	}
	if info.Lost != 0 {
		t.Fatalf("fast viewer: got %v bytes lost at attach, want 0", info.Lost)
	}
	c := collect(t, fast, wake, nil)
	if err := c.waitEnd(t, 30*time.Second); err != io.EOF {
		t.Fatalf("fast viewer end: got %v, want %v", err, io.EOF)
	}
	got, gaps, _ := c.result()
	if len(gaps) != 0 || !bytes.Equal(got, want) {
		t.Fatalf("fast viewer: got %d bytes, gaps %v, want %d bytes and no gap", len(got), gaps, len(want))
	}
	testutil.WaitClosed(t, s.Exited(), 5*time.Second, "exit")

	// The stalled viewer lost exactly what the ring no longer holds, then gets the rest.
	p := make([]byte, len(want))
	n, lost, err := stalled.Read(p)
	if err != nil || lost != int64(len(want)-ringSize) || n != ringSize {
		t.Fatalf("stalled viewer: got n=%v lost=%v err=%v, want n=%v lost=%v err=nil", n, lost, err, ringSize, len(want)-ringSize)
	}
	if !bytes.Equal(p[:n], want[len(want)-ringSize:]) {
		t.Errorf("stalled viewer: wrong bytes after the gap")
	}
	if n, lost, err := stalled.Read(p); n != 0 || lost != 0 || err != io.EOF {
		t.Errorf("stalled viewer at the end: got %v, %v, %v, want 0, 0, %v", n, lost, err, io.EOF)
	}
	stalled.Close()
}

func TestBackpressure(t *testing.T) {
	t.Parallel()
	want := exitScriptOutput()
	const ringSize = 64 << 10
	// openBig opens bigScript through a new registry with opts, with a viewer from offset 0
	// and the channel its wake function notifies.
	openBig := func(t *testing.T, opts Options) (*Registry, *Session, *Viewer, chan struct{}) {
		r := NewRegistry(opts, nil)
		wake, wakeFn := testutil.WakeChan()
		s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c", bigScript)
		return r, s, v, wake
	}
	newOpts := func(t *testing.T) (Options, *meterProbe) {
		in, probe := newMeterProbe(t)
		opts := testOptions()
		opts.ScrollbackBytes = ringSize
		opts.Instruments = in
		return opts, probe
	}

	t.Run("a stalled viewer pauses the reader until it reads", func(t *testing.T) {
		t.Parallel()
		opts, tel := newOpts(t)
		r, s, v, wake := openBig(t, opts)
		gate := make(chan struct{})
		c := collect(t, v, wake, gate)

		testutil.WaitFor(t, 10*time.Second, "reader paused", func() bool { return isPaused(s) })
		// The program is stuck writing to the PTY nobody drains.
		testutil.WaitFor(t, 10*time.Second, "program blocked in write", func() bool { return blockedInWrite(s.Pid()) })
		if _, done := s.Exit(); done {
			t.Fatalf("program exited while the reader was paused")
		}
		hw := int64(r.Options().HighWaterBytes)
		if in := s.Info(); in.End <= hw || in.End > ringSize || in.Start != 0 {
			t.Errorf("paused at: got start %v end %v, want start 0 and %v < end <= %v", in.Start, in.End, hw, ringSize)
		}

		close(gate) // the viewer reads: the reader resumes and the program finishes
		if err := c.waitEnd(t, 30*time.Second); err != io.EOF {
			t.Fatalf("viewer end: got %v, want %v", err, io.EOF)
		}
		got, gaps, _ := c.result()
		if len(gaps) != 0 || !bytes.Equal(got, want) {
			t.Errorf("viewer: got %d bytes, gaps %v, want %d bytes and no gap", len(got), gaps, len(want))
		}
		testutil.WaitClosed(t, s.Exited(), 5*time.Second, "exit")
		if p := tel.sum(t, otel.MetricPauseDuration); p <= 0 {
			t.Errorf("pause time recorded: got %v, want > 0", p)
		}
		if b := tel.sum(t, otel.MetricBytesOut); b != float64(len(want)) {
			t.Errorf("bytes out: got %v, want %v", b, len(want))
		}
	})

	t.Run("with no viewer the ring overwrites", func(t *testing.T) {
		t.Parallel()
		opts, tel := newOpts(t)
		r := NewRegistry(opts, nil)
		s, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", bigScript)
		testutil.WaitClosed(t, s.Exited(), 30*time.Second, "exit")
		testutil.WaitClosed(t, s.ReaderDone(), 5*time.Second, "reader end")
		got, start := ringBytes(s)
		if start != int64(len(want)-ringSize) || !bytes.Equal(got, want[start:]) {
			t.Errorf("ring: got %d bytes from %v, want the last %d bytes from %v", len(got), start, ringSize, len(want)-ringSize)
		}
		if p := tel.sum(t, otel.MetricPauseDuration); p != 0 {
			t.Errorf("pause time: got %v, want 0", p)
		}
	})

	t.Run("a paused reader never delays Kill", func(t *testing.T) {
		t.Parallel()
		opts, _ := newOpts(t)
		r, s, v, _ := openBig(t, opts)
		testutil.WaitFor(t, 10*time.Second, "reader paused", func() bool { return isPaused(s) })

		res, _ := killWithin(t, time.Second, func(ctx context.Context) (KillResult, error) {
			return r.Kill(ctx, s.ID(), "alice")
		})
		if !res.Reaped || res.Survivors != 0 {
			t.Errorf("reaped, survivors: got %v, %v, want true, 0", res.Reaped, res.Survivors)
		}
		testutil.WaitClosed(t, s.ReaderDone(), 2*time.Second, "reader end")
		if end := s.Info().End; end != res.Offset {
			t.Errorf("output end: got %v, want the kill's offset %v", end, res.Offset)
		}
		p := make([]byte, len(want))
		n, lost, err := v.Read(p)
		if err != nil || lost != 0 || int64(n) != res.Offset || !bytes.Equal(p[:n], want[:n]) {
			t.Errorf("viewer after the kill: got n=%v lost=%v err=%v, want the first %v bytes", n, lost, err, res.Offset)
		}
		if _, _, err := v.Read(p); err != io.EOF {
			t.Errorf("viewer at the end: got %v, want %v", err, io.EOF)
		}
	})

	t.Run("a lost viewer's consumed offset holds the output for ResumeHold", func(t *testing.T) {
		t.Parallel()
		opts, _ := newOpts(t)
		opts.ResumeHold = time.Hour // never expires within the test
		// The ring keeps only KeptBehind behind the viewer's offset for sure (none at 64 KiB,
		// where one read batch can take the reader from just under the high watermark to the
		// ring's size): the 4000 bytes held behind it need a larger ring, or the reader may
		// already have overwritten them.
		opts.ScrollbackBytes = 2 * ringSize
		if kept := opts.KeptBehind(); kept < 4000 {
			t.Fatalf("KeptBehind %d < 4000: the hold below may be overwritten before it is made", kept)
		}
		r, s, v, wake := openBig(t, opts)
		// Read a little, then lose the viewer as a dropped socket would.
		off := int64(readExactly(t, v, wake, 10000))
		// Lose the viewer as a dropped socket would, with its last 4000 bytes still in flight:
		// its client consumed up to off.
		v.CloseHolding(4000)
		off -= 4000
		// The program runs on into the hold and stops there, with offset off still retained.
		testutil.WaitFor(t, 10*time.Second, "reader paused", func() bool { return isPaused(s) })
		testutil.WaitFor(t, 10*time.Second, "program blocked in write", func() bool { return blockedInWrite(s.Pid()) })
		if in := s.Info(); in.Start > off {
			t.Fatalf("ring starts at %d, past the detached viewer's offset %d", in.Start, off)
		}
		// A reattach from there misses nothing, and the program finishes.
		wake2, wakeFn2 := testutil.WakeChan()
		v2, info, err := r.Attach(s.ID(), "alice", off, wakeFn2)
		if err != nil || info.Offset != off || info.Lost != 0 {
			t.Fatalf("reattach from %d: got %+v, %v, want that offset and nothing lost", off, info, err)
		}
		c := collect(t, v2, wake2, nil)
		if err := c.waitEnd(t, 30*time.Second); err != io.EOF {
			t.Fatalf("viewer end: got %v, want %v", err, io.EOF)
		}
		got, gaps, _ := c.result()
		if len(gaps) != 0 || !bytes.Equal(got, want[off:]) {
			t.Errorf("after the reattach: got %d bytes, gaps %v, want the %d bytes from %d and no gap", len(got), gaps, len(want)-int(off), off)
		}
	})

	// The hold ending after ResumeHold: TestResumeHoldEndsAfterResumeHold, on a fake clock.

	t.Run("a reattach takes the hold over", func(t *testing.T) {
		t.Parallel()
		opts, _ := newOpts(t)
		opts.ResumeHold = time.Hour
		r, s, v, wake := openBig(t, opts)
		testutil.WaitFor(t, 10*time.Second, "reader paused by the unread viewer", func() bool { return isPaused(s) })
		readExactly(t, v, wake, 10000)
		// Handed 10000 bytes, 4000 of them unconfirmed: the hold keeps [6000, …). The client
		// had in fact consumed 8000 and comes back from there.
		v.CloseHolding(4000)
		_, wakeFn2 := testutil.WakeChan()
		v2, info, err := r.Attach(s.ID(), "alice", 8000, wakeFn2)
		if err != nil || info.Lost != 0 {
			t.Fatalf("reattach: %+v, %v", info, err)
		}
		// The client came back; leaving on purpose now must not leave its old hold behind.
		v2.Close()
		testutil.WaitClosed(t, s.Exited(), 30*time.Second, "exit")
	})

	t.Run("an attach from elsewhere leaves the holds alone", func(t *testing.T) {
		t.Parallel()
		opts, _ := newOpts(t)
		opts.ResumeHold = time.Hour
		r, s, v, wake := openBig(t, opts)
		readExactly(t, v, wake, 10000)
		v.CloseHolding(0) // the hold's range is [10000, 10000]
		// Another client replays from the start, then leaves on purpose: that is not the lost
		// client coming back, so the hold must still be there for it.
		_, wakeFn2 := testutil.WakeChan()
		v2, _, err := r.Attach(s.ID(), "alice", 0, wakeFn2)
		if err != nil {
			t.Fatal(err)
		}
		v2.Close()
		testutil.WaitFor(t, 10*time.Second, "reader paused by the hold", func() bool { return isPaused(s) })
		// A read-only viewer at the end does not count for backpressure: it resumes nothing.
		v3, _, err := r.AttachPassive(s.ID(), "alice", s.Info().End, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer v3.Close()
		if !isPaused(s) {
			t.Fatal("a read-only attach at the end resumed the held reader")
		}
		v4, info, err := r.Attach(s.ID(), "alice", 10000, nil)
		if err != nil || info.Offset != 10000 || info.Lost != 0 {
			t.Fatalf("the lost client's reattach: got %+v, %v, want offset 10000 and nothing lost", info, err)
		}
		v4.Close()
	})

	t.Run("a hold the ring overwrote holds nothing", func(t *testing.T) {
		t.Parallel()
		opts, _ := newOpts(t)
		opts.ResumeHold = time.Hour
		r, s, v, _ := openBig(t, opts)
		// A second client reads on while the first one's hold sits at offset 0, so backpressure
		// follows the reader and the ring overwrites offset 0.
		wake2, wakeFn2 := testutil.WakeChan()
		v2, _, err := r.Attach(s.ID(), "alice", 0, wakeFn2)
		if err != nil {
			t.Fatal(err)
		}
		v.CloseHolding(0)
		p := make([]byte, 32<<10)
		for s.Info().Start == 0 {
			n, _, err := v2.Read(p)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				testutil.WaitClosed(t, wake2, 5*time.Second, "output")
			}
		}
		// The reader leaves on purpose: the dead hold must not keep the program waiting an hour.
		v2.Close()
		testutil.WaitClosed(t, s.Exited(), 30*time.Second, "exit")
	})

	t.Run("a read-only viewer's detach holds nothing", func(t *testing.T) {
		t.Parallel()
		opts, tel := newOpts(t)
		opts.ResumeHold = time.Hour
		r := NewRegistry(opts, nil)
		s, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", bigScript)
		_, wakeFn := testutil.WakeChan()
		v, _, err := r.AttachPassive(s.ID(), "alice", 0, wakeFn)
		if err != nil {
			t.Fatal(err)
		}
		v.CloseHolding(0)
		testutil.WaitClosed(t, s.Exited(), 30*time.Second, "exit")
		if p := tel.sum(t, otel.MetricPauseDuration); p != 0 {
			t.Errorf("pause time: got %v, want 0", p)
		}
	})

	t.Run("a viewer closed on purpose holds nothing", func(t *testing.T) {
		t.Parallel()
		opts, _ := newOpts(t)
		opts.ResumeHold = time.Hour // a hold would keep the program from finishing
		_, s, v, _ := openBig(t, opts)
		v.Close()
		testutil.WaitClosed(t, s.Exited(), 30*time.Second, "exit")
	})

	t.Run("a viewer attaching at the end resumes a paused reader", func(t *testing.T) {
		t.Parallel()
		opts, _ := newOpts(t)
		r, s, _, _ := openBig(t, opts)
		testutil.WaitFor(t, 10*time.Second, "reader paused", func() bool { return isPaused(s) })
		// This viewer has everything, so not every viewer is behind: the reader must go on and
		// wake it with new output, though it has not read yet.
		wake, wakeFn2 := testutil.WakeChan()
		v, _, err := r.Attach(s.ID(), "alice", s.Info().End, wakeFn2)
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		testutil.WaitClosed(t, wake, 5*time.Second, "new output for the viewer at the end")
	})
}

func TestKeptBehind(t *testing.T) {
	for _, tc := range []struct{ scrollback, want int }{
		{0, 480 << 10},        // the default 1 MiB ring: 1 MiB − 512 KiB − 32 KiB
		{256 << 10, 96 << 10}, // 256 KiB − 128 KiB − 32 KiB
		{64 << 10, 0},         // the read batch is as large as the room above the watermark
		{8 << 10, 0},
	} {
		if got := (Options{ScrollbackBytes: tc.scrollback}).KeptBehind(); got != tc.want {
			t.Errorf("KeptBehind with %d bytes of scrollback: got %d, want %d", tc.scrollback, got, tc.want)
		}
	}
}

// readExactly reads n bytes from v, waiting on wake whenever nothing is there yet, and returns n.
func readExactly(t *testing.T, v *Viewer, wake <-chan struct{}, n int) int {
	t.Helper()
	p := make([]byte, n)
	for off := 0; off < n; {
		m, _, err := v.Read(p[off:])
		if err != nil {
			t.Fatal(err)
		}
		off += m
		if m == 0 {
			testutil.WaitClosed(t, wake, 5*time.Second, "output")
		}
	}
	return n
}

// TestHoldsAreBounded: a client that drops sockets in a loop leaves at most maxHolds holds, the
// newest ones.
func TestHoldsAreBounded(t *testing.T) {
	opts := testOptions()
	opts.ResumeHold = time.Hour
	s := spawnT(t, opts, "/bin/sh", "-c", "exec sleep 60")
	s.mu.Lock()
	for i := range maxHolds + 6 {
		s.holdLocked(0, int64(i))
	}
	n, newest := len(s.holds), s.holds[len(s.holds)-1].upTo
	s.mu.Unlock()
	if n != maxHolds || newest != maxHolds+5 {
		t.Errorf("holds: got %d, newest up to %d; want %d, newest up to %d", n, newest, maxHolds, maxHolds+5)
	}
}
