package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/internal/vt"
)

// fullScreenScript draws a full-screen program's screen once (alternate screen, application
// cursor keys, a header and a middle line), then updates one line in place until the ring has
// long rolled over, then says DONE and waits.
const fullScreenScript = `printf '\033[?1049h\033[?1h\033[H\033[2JHEADER\033[12;1Hmiddle line'
i=0
while [ $i -lt 12000 ]; do printf '\033[5;1Hcounter %06d' $i; i=$((i+1)); done
printf '\033[20;1HDONE'
exec sleep 600`

// model feeds b into a fresh model of cols×rows.
func model(cols, rows int, b ...[]byte) *vt.Terminal {
	m := vt.New(cols, rows, vt.Options{})
	for _, p := range b {
		m.Write(p)
	}
	return m
}

func screenText(m *vt.Terminal) string { return string(m.AppendText(nil, vt.SnapshotOptions{})) }

// TestAttachPaintsTheScreen: a viewer that attaches after the ring rolled over gets a paint of
// the screen and then the output from where it stands, and the terminal it builds is the one a
// viewer attached throughout built: the header drawn once is there, the modes are set, and no
// replay starts inside a sequence. A raw replay of the same ring (ScreenNever) shows what the
// paint prevents.
func TestAttachPaintsTheScreen(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.ScrollbackBytes = 64 << 10
	r := NewRegistry(opts, nil)
	wake, wakeFn := testutil.WakeChan()
	s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c", fullScreenScript)
	all := collect(t, v, wake, nil) // attached throughout: backpressure keeps every byte for it
	all.waitOutput(t, "DONE", 30*time.Second)
	if info := s.Info(); info.End < 3*64<<10 {
		t.Fatalf("output end %d: want the ring (64 KiB) rolled over several times", info.End)
	}
	want := model(80, 24, all.bytes())

	for _, tc := range []struct {
		name  string
		o     AttachOptions
		paint bool
	}{
		{"from 0, auto", AttachOptions{From: 0}, true},
		{"no from, auto", AttachOptions{From: -1}, true},
		{"from the end, always", AttachOptions{From: s.Info().End, Screen: ScreenAlways}, true},
		{"from 0, never", AttachOptions{From: 0, Screen: ScreenNever}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wake2, wakeFn2 := testutil.WakeChan()
			v2, info, err := r.AttachWith(s.ID(), "alice", tc.o, wakeFn2)
			if err != nil {
				t.Fatal(err)
			}
			c := collect(t, v2, wake2, nil)
			end := s.Info().End
			testutil.WaitFor(t, 10*time.Second, "the viewer to read to the end", func() bool {
				return v2.State().Pending == 0 && v2.Offset() == end
			})
			got, gaps, _ := c.result()
			if len(gaps) != 0 {
				t.Fatalf("gaps %v: want none after the attach", gaps)
			}
			if !tc.paint {
				if info.Screen != 0 || info.Lost == 0 {
					t.Fatalf("raw attach: got %+v, want no paint and lost > 0", info)
				}
				if txt := screenText(model(80, 24, got)); strings.Contains(txt, "HEADER") {
					t.Fatalf("a raw replay of a rolled ring still shows the header:\n%s", txt)
				}
				return
			}
			if info.Screen == 0 || info.Screen > len(got) {
				t.Fatalf("attach: got %+v and %d bytes, want a paint", info, len(got))
			}
			if tc.o.From == 0 && info.Lost == 0 {
				t.Errorf("attach from 0: lost 0, want what the ring dropped")
			}
			if int64(len(got)-info.Screen) != end-info.Offset {
				t.Errorf("after the paint: got %d bytes, want end %d - offset %d", len(got)-info.Screen, end, info.Offset)
			}
			m := model(80, 24, got)
			if g, w := screenText(m), screenText(want); g != w {
				t.Errorf("late viewer's screen:\n%s\nwant (the viewer attached throughout):\n%s", g, w)
			}
			if g, w := m.Modes(), want.Modes(); g != w {
				t.Errorf("late viewer's modes: got %+v, want %+v", g, w)
			}
			if !m.Modes().AltScreen || !m.Modes().AppCursor {
				t.Errorf("modes %+v: want the alternate screen and application cursor keys", m.Modes())
			}
		})
	}
}

// TestScreenFollowsResizes: the model reads each size change after exactly the output read
// before it, so its screen is a terminal's that was resized at that point.
func TestScreenFollowsResizes(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	wake, wakeFn := testutil.WakeChan()
	s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c",
		`printf 'first %0100d\n' 7; read x; printf 'second %060d\nREADY' 9; exec sleep 600`)
	c := collect(t, v, wake, nil)
	c.waitOutput(t, "\n", 10*time.Second)
	before := c.bytes()
	if _, err := v.Resize(40, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	c.waitOutput(t, "READY", 10*time.Second)
	after := c.bytes()[len(before):]
	want := model(80, 24, before)
	want.Resize(40, 10)
	want.Write(after)
	snap, err := r.Capture(s.ID(), "alice", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Cols != 40 || snap.Rows != 10 || snap.Offset != int64(len(before)+len(after)) || snap.Lost != 0 {
		t.Fatalf("capture: got %dx%d at %d lost %d, want 40x10 at %d lost 0", snap.Cols, snap.Rows, snap.Offset, snap.Lost, len(before)+len(after))
	}
	if g, w := string(snap.Paint), screenText(want); g != w {
		t.Errorf("captured text:\n%q\nwant:\n%q", g, w)
	}
	// The paint, as ANSI, rebuilds the same screen in a fresh terminal of its size.
	ansi, err := r.Capture(s.ID(), "alice", true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := screenText(model(40, 10, ansi.Paint)), screenText(want); g != w {
		t.Errorf("the ANSI capture's screen:\n%q\nwant:\n%q", g, w)
	}
}

// TestCaptureOfAnotherPrincipal: a session is captured only by its owner; to anyone else it
// does not exist. With screens off, capture says so.
func TestCaptureOfAnotherPrincipal(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	s, _ := openT(t, r, "alice", func() {}, "/bin/sh", "-c", "exec sleep 600")
	if _, err := r.Capture(s.ID(), "bob", false, 0); !errors.Is(err, ErrUnknownSession) {
		t.Errorf("bob's capture of alice's session: got %v, want unknown session", err)
	}
	o := testOptions()
	o.NoScreen = true
	r2 := NewRegistry(o, nil)
	s2, _ := openT(t, r2, "alice", func() {}, "/bin/sh", "-c", "exec sleep 600")
	if _, err := r2.Capture(s2.ID(), "alice", false, 0); !errors.Is(err, ErrNoScreen) {
		t.Errorf("capture with screens off: got %v, want ErrNoScreen", err)
	}
	// A paint is never forced on a registry without screens: the attach is raw.
	_, info, err := r2.AttachWith(s2.ID(), "alice", AttachOptions{From: -1, Screen: ScreenAlways}, nil)
	if err != nil || info.Screen != 0 {
		t.Errorf("attach with screens off: got %+v, %v; want a raw attach", info, err)
	}
}

// TestHandoverCarriesTheScreen: an upgrade in place hands each session's screen to the next
// image, which paints and captures the same screen although its ring lost the header long ago.
// A state from an image that kept no screen is rebuilt from the ring, and says what it lost.
func TestHandoverCarriesTheScreen(t *testing.T) {
	for _, tc := range []struct {
		name       string
		noScreen   bool // the handed state carries no screen
		wantHeader bool
	}{
		{"handed", false, true},
		{"rebuilt from the ring", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := testOptions()
			opts.ScrollbackBytes = 64 << 10
			r1 := NewRegistry(opts, nil)
			wake, w := testutil.WakeChan()
			s1, v1, err := r1.Open(Spec{Argv: []string{"/bin/sh", "-c", fullScreenScript}, Cols: 80, Rows: 24,
				Dir: os.TempDir(), Owner: "alice"}, 0, w)
			if err != nil {
				t.Fatal(err)
			}
			c := collect(t, v1, wake, nil)
			c.waitOutput(t, "DONE", 30*time.Second)
			before, err := r1.Capture(s1.ID(), "alice", false, 0)
			if err != nil {
				t.Fatal(err)
			}
			v1.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := r1.Handover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			h := &st.Sessions[0]
			if h.Screen == nil || h.ScreenOffset != h.RingStart+int64(len(h.Ring)) {
				t.Fatalf("handed screen: %d bytes at %d, want a paint at the output's end %d", len(h.Screen), h.ScreenOffset, h.RingStart+int64(len(h.Ring)))
			}
			if tc.noScreen {
				h.Screen = nil
			}
			dup, err := unix.FcntlInt(uintptr(h.Master), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			h.Master = dup
			s1.ptmx.Close()
			r2 := NewRegistry(opts, nil)
			if n, err := r2.Adopt(st); err != nil || n != 1 {
				t.Fatalf("Adopt: %d, %v", n, err)
			}
			s2, err := r2.Get(s1.ID(), "alice")
			if err != nil {
				t.Fatal(err)
			}
			cleanupSession(t, s2)
			after, err := r2.Capture(s2.ID(), "alice", false, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(string(after.Paint), "HEADER"); got != tc.wantHeader {
				t.Fatalf("adopted screen:\n%s\nheader shown %v, want %v", after.Paint, got, tc.wantHeader)
			}
			if tc.wantHeader {
				if string(after.Paint) != string(before.Paint) || after.Lost != 0 {
					t.Errorf("adopted screen (lost %d):\n%s\nwant (lost 0):\n%s", after.Lost, after.Paint, before.Paint)
				}
			} else if after.Lost != h.RingStart {
				t.Errorf("rebuilt screen: lost %d, want the ring's start %d", after.Lost, h.RingStart)
			}
		})
	}
}

// TestScreenResizeStormWhileStreaming: hundreds of resizes, absurd ones included, while the
// program streams: the model follows without harm, ends at the size last applied, and its
// capture and paint work.
func TestScreenResizeStormWhileStreaming(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	wake, wakeFn := testutil.WakeChan()
	s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c",
		`i=0; while [ $i -lt 3000 ]; do printf '\033[%d;1H\033[1;31mline %d\033[m\n' $((i % 50)) $i; i=$((i+1)); done; stty -echo; printf 'STREAMED'; read x; printf 'STORM-END'; exec sleep 600`)
	c := collect(t, v, wake, nil)
	sizes := [][2]int{{1, 1}, {2, 1}, {1000, 1000}, {80, 24}, {3, 500}, {500, 3}, {132, 43}}
	for i := range 600 {
		z := sizes[i%len(sizes)]
		if _, err := v.Resize(z[0], z[1]); err != nil {
			t.Fatalf("resize %v: %v", z, err)
		}
	}
	if _, err := v.Resize(100, 30); err != nil {
		t.Fatal(err)
	}
	// The last line comes after the last resize, at the size it applied: printed before it, at
	// a taller size, it would have scrolled off with the shrink, depending on timing.
	c.waitOutput(t, "STREAMED", 30*time.Second)
	if _, err := s.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	c.waitOutput(t, "STORM-END", 30*time.Second)
	snap, err := r.Capture(s.ID(), "alice", true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Cols != 100 || snap.Rows != 30 {
		t.Fatalf("after the storm: %dx%d, want the size last applied, 100x30", snap.Cols, snap.Rows)
	}
	if !strings.Contains(screenText(model(100, 30, snap.Paint)), "STORM-END") {
		t.Errorf("the paint after the storm does not show the program's last output")
	}
	s.scr.mu.Lock()
	mem := s.scr.term.MemBytes()
	s.scr.mu.Unlock()
	if mem > 4<<20 {
		t.Errorf("model holds %d bytes after the storm, want a bounded few", mem)
	}
}

// TestScreenBacklogKeepsWhatTheRingDrops: a model that has not read output the ring drops reads
// it later from its backlog, and loses nothing; only past maxBacklog does it lose, and then it
// counts exactly what it lost.
func TestScreenBacklogKeepsWhatTheRingDrops(t *testing.T) {
	s := fakeSession(4096)
	s.opts.feeder = &screenFeeder{running: true} // never fed behind the test's back
	s.scr = newScreen(80, 24, s.opts)
	var all []byte
	for i := range 2000 { // 2000 lines, about 30 KiB through a 4 KiB ring
		line := fmt.Appendf(nil, "line %05d of the log\r\n", i)
		all = append(all, line...)
		s.ingest(line)
	}
	if snap, err := s.Capture(false, 0); err != nil || snap.Lost != 0 || snap.Offset != int64(len(all)) {
		t.Fatalf("capture: %+v, %v; want the whole output read, nothing lost", snap, err)
	}
	if g, w := screenText(s.scr.term), screenText(model(80, 24, all)); g != w {
		t.Fatalf("screen from the backlog:\n%s\nwant:\n%s", g, w)
	}
	// Far behind: more than maxBacklog while the model reads nothing.
	chunk := bytes.Repeat([]byte("x"), 4096)
	var pushed int64
	for pushed < maxBacklog+2<<20 {
		s.ingest(chunk)
		pushed += int64(len(chunk))
	}
	s.mu.Lock()
	kept := int64(len(s.scr.backlog))
	s.mu.Unlock()
	if kept > maxBacklog {
		t.Fatalf("backlog %d bytes, want at most %d", kept, maxBacklog)
	}
	snap, err := s.Capture(false, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Lost: what left the ring and the backlog before the model read it.
	if want := pushed - kept - int64(s.ring.size()); snap.Lost != want {
		t.Errorf("lost %d, want %d (pushed %d, backlog %d, ring %d)", snap.Lost, want, pushed, kept, s.ring.size())
	}
}

// TestPaintPastTheSubscriptionEnd: output that arrives between an attach's subscription and
// its paint is in the paint, and the attach's end moves with it: offset ≤ end, as the
// protocol's live ≤ end requires, and the viewer reads on from the paint's offset.
func TestPaintPastTheSubscriptionEnd(t *testing.T) {
	t.Parallel()
	o := testOptions()
	var subscribedEnd int64
	o.testHookBeforePaint = func(s *Session) {
		subscribedEnd = s.Info().End
		if _, err := s.Write([]byte("between\n")); err != nil {
			t.Errorf("write between the subscription and the paint: %v", err)
			return
		}
		testutil.WaitFor(t, 10*time.Second, "the output to pass the subscription's end", func() bool {
			return s.Info().End >= subscribedEnd+2*int64(len("between\r\n"))
		})
	}
	r := NewRegistry(o, nil)
	wake, wakeFn := testutil.WakeChan()
	s, v := openT(t, r, "alice", wakeFn, "/bin/cat")
	c := collect(t, v, wake, nil)
	if _, err := s.Write([]byte("before\n")); err != nil {
		t.Fatal(err)
	}
	c.waitOutput(t, "before\r\nbefore\r\n", 10*time.Second)
	v2, info, err := r.AttachWith(s.ID(), "alice", AttachOptions{From: s.Info().End, Screen: ScreenAlways}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v2.Close)
	if info.Offset <= subscribedEnd {
		t.Fatalf("attach %+v: the paint's offset did not pass the subscription's end %d; the test did not test", info, subscribedEnd)
	}
	if info.End != info.Offset {
		t.Errorf("attach %+v: end %d is not the paint's offset %d", info, info.End, info.Offset)
	}
	if !strings.Contains(string(v2.paint), "between") {
		t.Errorf("the paint does not hold the output that came before it:\n%q", v2.paint)
	}
}
