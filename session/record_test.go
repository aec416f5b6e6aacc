package session

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/record"
	"github.com/muxterm/muxterm/internal/testutil"
)

// readRecording parses the session's recording once it has ended (its file closed).
func readRecording(t *testing.T, s *Session) (record.Header, []record.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(s.rec.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := record.NewParser(f)
	if err != nil {
		t.Fatal(err)
	}
	var evs []record.Event
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			return p.Header, evs
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
}

// A recorded session's file holds exactly the output its viewer read, the input, its sizes and
// the markers of its life (attach, detach, exit) in order, and its spans' point in it.
func TestSessionRecording(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	// The exit marker is written when both the reader and the waiter are done, by whichever is
	// last, after it published its end: the file is read once the recording has ended.
	ended := make(chan struct{})
	opts.Record = RecordOptions{Dir: t.TempDir(), All: true, Input: true,
		OnEnd: func(string, RecordingInfo) { close(ended) }}
	r := NewRegistry(opts, nil)
	wake, wakeFn := testutil.WakeChan()
	s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c", `stty -echo; read x; printf 'got:%s\n' "$x"; read y; exit 3`)
	c := collect(t, v, wake, nil)
	if _, ok := s.Recording(); !ok {
		t.Fatal("Recording: not recorded")
	}
	if _, err := s.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	c.waitOutput(t, "got:hello", 10*time.Second)
	if _, err := v.Resize(100, 30); err != nil {
		t.Fatal(err)
	}
	v2, _, err := s.Subscribe(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	v2.Close()
	if _, err := s.Write([]byte("bye\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("no exit")
	}
	<-s.readerDone
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the recording did not end within 10s of the program's end")
	}
	h, evs := readRecording(t, s)
	if h.Width != 80 || h.Height != 24 || !strings.Contains(h.Command, "stty -echo") {
		t.Fatalf("header %+v", h)
	}
	var out, in strings.Builder
	var marks []string
	for _, e := range evs {
		switch e.Code {
		case "o":
			out.WriteString(e.Data)
		case "i":
			in.WriteString(e.Data)
		default:
			marks = append(marks, e.Code+":"+e.Data)
		}
	}
	data, _, _ := c.result()
	if out.String() != string(data) {
		t.Fatalf("recorded output %q, the viewer read %q", out.String(), data)
	}
	if in.String() != "hello\nbye\n" {
		t.Fatalf("recorded input %q", in.String())
	}
	want := []string{"m:attach", "r:100x30", "m:attach", "m:detach", "m:exit 3"}
	if !slices.Equal(marks, want) {
		t.Fatalf("markers %v, want %v", marks, want)
	}
}

// Input is recorded only when asked; an open that asks for a recording where none is kept is
// refused.
func TestRecordingInputOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	r := NewRegistry(opts, nil)
	if _, _, err := r.Open(Spec{Argv: []string{"/bin/true"}, Cols: 80, Rows: 24, Owner: "a", Record: true}, 0, nil); !errors.Is(err, ErrRecordingOff) {
		t.Fatalf("open with record on a registry without --record: %v, want ErrRecordingOff", err)
	}
	ended := make(chan struct{})
	opts.Record = RecordOptions{Dir: t.TempDir(), OnEnd: func(string, RecordingInfo) { close(ended) }}
	r = NewRegistry(opts, nil)
	wake, wakeFn := testutil.WakeChan()
	s, v, err := r.Open(Spec{Argv: []string{"/bin/sh", "-c", "stty -echo; echo ready; read x; echo done"}, Cols: 80, Rows: 24, Dir: os.TempDir(), Owner: "a", Record: true}, 0, wakeFn)
	if err != nil {
		t.Fatal(err)
	}
	cleanupSession(t, s)
	c := collect(t, v, wake, nil)
	c.waitOutput(t, "ready", 10*time.Second) // the terminal echoes no more: the secret is no output
	if _, err := s.Write([]byte("secret\n")); err != nil {
		t.Fatal(err)
	}
	c.waitOutput(t, "done", 10*time.Second)
	select {
	case <-ended: // the file is complete
	case <-time.After(10 * time.Second):
		t.Fatal("the recording did not end within 10s of the program's output")
	}
	_, evs := readRecording(t, s)
	var out strings.Builder
	for _, e := range evs {
		if e.Code == "i" || strings.Contains(e.Data, "secret") {
			t.Fatalf("input recorded without RecordOptions.Input: %+v", e)
		}
		if e.Code == "o" {
			out.WriteString(e.Data)
		}
	}
	if !strings.Contains(out.String(), "done") {
		t.Fatalf("the recording misses the output after the input: %q", out.String())
	}
	other, _ := openT(t, r, "a", nil, "/bin/true")
	if _, ok := other.Recording(); ok {
		t.Fatal("a session that did not ask is recorded without RecordOptions.All")
	}
}

// A read at or past a recording's end answers no bytes (never nil: the wire's "data" is ""),
// and a read of another principal's recording, or of a malformed id, is an unknown recording.
func TestReadRecordingEndsAndRefuses(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.Record = RecordOptions{Dir: t.TempDir(), All: true}
	r := NewRegistry(opts, nil)
	s, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", "printf done; exec sleep 60")
	var size int64
	// The program prints once, then sleeps: wait until the recording holds its output (the
	// recorder writes on a goroutine of its own, which nothing outside signals).
	testutil.WaitFor(t, 10*time.Second, "the output in the recording", func() bool {
		data, n, err := r.ReadRecording(s.ID(), "alice", false, 0, 1<<16)
		size = n
		return err == nil && bytes.Contains(data, []byte(`"o", "done"`)) // not the header's command
	})
	data, _, err := r.ReadRecording(s.ID(), "alice", false, size, 100)
	if err != nil || data == nil || len(data) != 0 {
		t.Fatalf("read at the end: %v (nil %v), %v; want no bytes, not nil", data, data == nil, err)
	}
	for _, c := range []struct{ id, owner string }{{s.ID(), "bob"}, {"../../etc/passwd", "alice"}, {strings.Repeat("A", 32), "alice"}} {
		if _, _, err := r.ReadRecording(c.id, c.owner, false, 0, 10); !errors.Is(err, ErrUnknownRecording) {
			t.Errorf("read %q as %s: %v, want ErrUnknownRecording", c.id, c.owner, err)
		}
	}
	if _, _, err := r.ReadRecording(s.ID(), "bob", true, 0, 10); err != nil {
		t.Errorf("an admin's read of alice's recording: %v", err)
	}
}

// RecordOptions.OnEnd is told of a recording once it has ended and its file is complete: the
// file and its header's facts, the exit marker already in it.
func TestRecordingOnEnd(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	type ended struct {
		path string
		info RecordingInfo
		data []byte
	}
	got := make(chan ended, 1)
	opts.Record = RecordOptions{Dir: t.TempDir(), All: true, OnEnd: func(path string, info RecordingInfo) {
		data, _ := os.ReadFile(path)
		got <- ended{path, info, data}
	}}
	r := NewRegistry(opts, nil)
	wake, wakeFn := testutil.WakeChan()
	s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c", `printf 'bye\n'; exit 4`)
	c := collect(t, v, wake, nil)
	c.waitOutput(t, "bye", 10*time.Second)
	select {
	case e := <-got:
		if e.path != RecordingPath(opts.Record.Dir, s.ID()) || e.info.ID != s.ID() || e.info.Owner != "alice" ||
			e.info.Cols != 80 || e.info.Rows != 24 || e.info.Active || e.info.Bytes != int64(len(e.data)) {
			t.Fatalf("OnEnd(%s, %+v), file of %d bytes", e.path, e.info, len(e.data))
		}
		if !strings.HasSuffix(string(e.data), "\"m\", \"exit 4\"]\n") {
			t.Fatalf("the file OnEnd was told of does not end with the exit marker: %q", e.data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnEnd not called within 10s of the program's end")
	}
}

// A recording is listed as active until its last event, the exit marker, is in its file, even
// once its session has left the registry (a kill returns before the recording's end is
// written); listed as ended, it is whole, and its size is the file's.
func TestRecordingListedEndedOnlyWhenWhole(t *testing.T) {
	t.Parallel()
	h := killWithEndHeld(t, record.Retention{})
	r, s := h.r, h.s
	listed := func() RecordingInfo {
		t.Helper()
		rs, err := r.Recordings("alice", false, s.ID())
		if err != nil || len(rs) != 1 {
			t.Fatalf("recordings of %s: %+v, %v", s.ID(), rs, err)
		}
		return rs[0]
	}
	if _, err := r.Get(s.ID(), "alice"); err == nil {
		t.Fatal("the killed session is still in the registry")
	}
	if in := listed(); !in.Active {
		t.Errorf("listed as ended before its end was written: %+v", in)
	}
	h.letEnd()
	testutil.WaitClosed(t, h.ended, 10*time.Second, "the recording's end")
	data, err := os.ReadFile(RecordingPath(h.dir, s.ID()))
	if err != nil {
		t.Fatal(err)
	}
	in := listed()
	if in.Active || !strings.HasSuffix(string(data), "\"m\", \"exit signal HUP\"]\n") || in.Bytes != int64(len(data)) {
		t.Fatalf("listed (%+v) once its end is written, with a file of %d bytes ending %q", in, len(data), data[max(0, len(data)-60):])
	}
}

// A listing never says a recording ended before its file is whole: one whose end is written
// right after the listing read its file's size is listed as being written, with the complete
// lines of that size.
func TestRecordingEndingWhileListed(t *testing.T) {
	t.Parallel()
	h := killWithEndHeld(t, record.Retention{})
	afterSize := func() {
		h.letEnd()
		testutil.WaitClosed(t, h.ended, 10*time.Second, "the recording's end")
	}
	h.sized.Store(&afterSize)
	list, err := h.r.Recordings("alice", false, h.s.ID())
	if err != nil || len(list) != 1 {
		t.Fatalf("recordings: %+v, %v; want the one", list, err)
	}
	data, err := os.ReadFile(RecordingPath(h.dir, h.s.ID()))
	if err != nil {
		t.Fatal(err)
	}
	in := list[0]
	if !in.Active {
		t.Fatalf("listed as ended with %d bytes; its end was written after the size was read, and the file holds %d", in.Bytes, len(data))
	}
	if in.Bytes <= 0 || in.Bytes > int64(len(data)) || data[in.Bytes-1] != '\n' {
		t.Fatalf("listed as being written with %d bytes of a %d-byte file: want complete lines", in.Bytes, len(data))
	}
}

// heldEnd is a recorded session killed with its recording's end held (killWithEndHeld):
// letEnd lets the end go on, ended is closed once it is written; a func stored in sized runs
// where the registry's testHookRecordingSized does.
type heldEnd struct {
	r      *Registry
	s      *Session
	dir    string
	letEnd func()
	ended  <-chan struct{}
	sized  *atomic.Pointer[func()]
}

// killWithEndHeld opens a recorded session (retention its registry's) that prints and waits,
// kills it, and returns once the recording's end has begun, held before it writes anything.
func killWithEndHeld(t *testing.T, retention record.Retention) heldEnd {
	t.Helper()
	opts := testOptions()
	dir := t.TempDir()
	ended := make(chan struct{})
	opts.Record = RecordOptions{Dir: dir, All: true, Retention: retention,
		OnEnd: func(string, RecordingInfo) { close(ended) }}
	ending, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	letEnd := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letEnd)
	opts.testHookRecordingEnd = func(*Session) {
		close(ending)
		<-release
	}
	sized := new(atomic.Pointer[func()])
	opts.testHookRecordingSized = func(string) {
		if f := sized.Load(); f != nil {
			(*f)()
		}
	}
	r := NewRegistry(opts, nil)
	wake, wakeFn := testutil.WakeChan()
	s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c", "printf 'up\\n'; exec sleep 60")
	collect(t, v, wake, nil).waitOutput(t, "up", 10*time.Second)
	if res, err := r.Kill(context.Background(), s.ID(), "alice"); err != nil || !res.Reaped {
		t.Fatalf("kill: %+v, %v", res, err)
	}
	testutil.WaitClosed(t, ending, 10*time.Second, "the recording's end to begin")
	return heldEnd{r: r, s: s, dir: dir, letEnd: letEnd, ended: ended, sized: sized}
}

// A recording whose end is still being written is never pruned, even once its session has left
// the registry and its file looks old; once ended, it is.
func TestPruneSparesARecordingBeingWritten(t *testing.T) {
	t.Parallel()
	h := killWithEndHeld(t, record.Retention{MaxAge: time.Hour})
	path := RecordingPath(h.dir, h.s.ID())
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if p, err := h.r.PruneRecordings(time.Now()); err != nil || p.Files != 0 {
		t.Fatalf("prune while its end is written: %+v, %v; want nothing removed", p, err)
	}
	h.letEnd()
	testutil.WaitClosed(t, h.ended, 10*time.Second, "the recording's end")
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if p, err := h.r.PruneRecordings(time.Now()); err != nil || p.Files != 1 {
		t.Fatalf("prune once it ended: %+v, %v; want it removed", p, err)
	}
}
