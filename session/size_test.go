package session

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
)

// sizeScript prints "SIZE <rows> <cols> <tag>" (stty size inside the PTY) for every line it reads.
const sizeScript = `stty -echo; echo READY; while read tag; do echo "SIZE $(stty size) $tag"; done`

// sizeProbe asks the program inside s for its terminal size: it writes a tagged line with
// Session.Write (no viewer: it does not count as typing) and waits for the answer.
type sizeProbe struct {
	s *Session
	c *collector
	n int
}

func (p *sizeProbe) expect(t *testing.T, rows, cols int) {
	t.Helper()
	p.n++
	tag := fmt.Sprintf("probe%d", p.n)
	if _, err := p.s.Write([]byte(tag + "\n")); err != nil {
		t.Fatal(err)
	}
	end := " " + tag + "\r\n"
	p.c.waitOutput(t, end, 5*time.Second)
	out := string(p.c.bytes())
	out = out[:strings.Index(out, end)]
	if got, want := out[strings.LastIndex(out, "SIZE "):], fmt.Sprintf("SIZE %d %d", rows, cols); got != want {
		t.Fatalf("stty size inside the session: got %q, want %q", got, want)
	}
	if got, _ := p.s.Size(); got != (Size{cols, rows}) {
		t.Fatalf("Session.Size: got %+v, want %dx%d", got, cols, rows)
	}
}

// TestWindowSizePolicies: an opener at 80x24 and a second read-write viewer at 60x40; the PTY's
// size (stty size inside it) follows the policy, and once the second viewer leaves it is the
// opener's again. A read-only viewer's size never counts. Before the window-size policy the
// PTY kept whatever size was set last, the second viewer's, after it left.
func TestWindowSizePolicies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy  WindowSize
		both    Size // with both viewers sized
		aTyped  Size // after the opener typed
		bTyped  Size // after the second viewer typed
		aloneBy Size // after the second viewer left
	}{
		{WindowLatest, Size{60, 40}, Size{80, 24}, Size{60, 40}, Size{80, 24}},
		{WindowSmallest, Size{60, 24}, Size{60, 24}, Size{60, 24}, Size{80, 24}},
		{WindowLargest, Size{80, 40}, Size{80, 40}, Size{80, 40}, Size{80, 24}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			t.Parallel()
			o := testOptions()
			o.WindowSize = tc.policy
			r := NewRegistry(o, nil)
			wake, wakeFn := testutil.WakeChan()
			s, a := openT(t, r, "alice", wakeFn, "/bin/sh", "-c", sizeScript)
			c := collect(t, a, wake, nil)
			c.waitOutput(t, "READY", 5*time.Second)
			p := &sizeProbe{s: s, c: c}
			p.expect(t, 24, 80)
			_, gen0 := s.Size()

			b, _, err := r.Attach(s.ID(), "alice", -1, nil)
			if err != nil {
				t.Fatal(err)
			}
			p.expect(t, 24, 80) // attached without a size: it does not count yet
			got, err := b.Resize(60, 40)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.both {
				t.Errorf("Resize(60, 40) applied %+v, want %+v", got, tc.both)
			}
			p.expect(t, tc.both.Rows, tc.both.Cols)
			if _, gen := s.Size(); (gen == gen0) != (tc.both == Size{80, 24}) {
				t.Errorf("size generation: got %d after a change from %d", gen, gen0)
			}

			// A read-only viewer's size never counts, however small.
			ro, _, err := r.AttachPassive(s.ID(), "alice", -1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := ro.Resize(10, 5); err != nil || got != tc.both {
				t.Errorf("read-only Resize(10, 5): got %+v %v, want the size unchanged %+v", got, err, tc.both)
			}
			if _, err := ro.Write([]byte("ro\n")); err != nil {
				t.Fatal(err)
			}
			c.waitOutput(t, " ro\r\n", 5*time.Second)
			p.expect(t, tc.both.Rows, tc.both.Cols)

			if _, err := a.Write([]byte("a\n")); err != nil {
				t.Fatal(err)
			}
			c.waitOutput(t, " a\r\n", 5*time.Second)
			p.expect(t, tc.aTyped.Rows, tc.aTyped.Cols)
			if _, err := b.Write([]byte("b\n")); err != nil {
				t.Fatal(err)
			}
			c.waitOutput(t, " b\r\n", 5*time.Second)
			p.expect(t, tc.bTyped.Rows, tc.bTyped.Cols)

			ro.Close()
			p.expect(t, tc.bTyped.Rows, tc.bTyped.Cols)
			b.Close()
			p.expect(t, tc.aloneBy.Rows, tc.aloneBy.Cols)
			if winsizeOf(t, s) != tc.aloneBy {
				t.Errorf("PTY size after the second viewer left: got %+v, want %+v", winsizeOf(t, s), tc.aloneBy)
			}
		})
	}
}

// TestWindowSizeKeptWithoutSizedViewers: when the last sized viewer leaves, the session keeps
// its size; the next viewer to declare one sets it.
func TestWindowSizeKeptWithoutSizedViewers(t *testing.T) {
	t.Parallel()
	o := testOptions()
	o.WindowSize = WindowSmallest
	r := NewRegistry(o, nil)
	s, a := openT(t, r, "alice", func() {}, "/bin/sh", "-c", "exec sleep 60")
	b, _, err := r.Attach(s.ID(), "alice", -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Resize(100, 20); err != nil {
		t.Fatal(err)
	}
	if got := winsizeOf(t, s); got != (Size{80, 20}) {
		t.Fatalf("smallest of 80x24 and 100x20: got %+v, want 80x20", got)
	}
	a.Close()
	if got := winsizeOf(t, s); got != (Size{100, 20}) {
		t.Fatalf("after the opener left: got %+v, want the remaining viewer's 100x20", got)
	}
	b.Close()
	if got := winsizeOf(t, s); got != (Size{100, 20}) {
		t.Fatalf("with no viewer left: got %+v, want the last size 100x20", got)
	}
	c, _, err := r.Attach(s.ID(), "alice", -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := c.Resize(90, 30); err != nil || got != (Size{90, 30}) {
		t.Fatalf("the only sized viewer: got %+v %v, want 90x30", got, err)
	}
}

// TestWindowSizeWakesViewers: a change of the applied size wakes every viewer (so each
// socket's writer reports it) and bumps the generation once; a resize that changes nothing
// applied wakes nobody.
func TestWindowSizeWakesViewers(t *testing.T) {
	t.Parallel()
	o := testOptions()
	o.WindowSize = WindowLargest
	r := NewRegistry(o, nil)
	s, a := openT(t, r, "alice", func() {}, "/bin/sh", "-c", "exec sleep 60")
	defer a.Close()
	wakeB, wakeFnB := testutil.WakeChan()
	b, _, err := r.AttachPassive(s.ID(), "alice", -1, wakeFnB)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, gen := s.Size()
	if got, err := a.Resize(70, 20); err != nil || got != (Size{70, 20}) {
		t.Fatalf("Resize(70, 20): got %+v %v", got, err)
	}
	select {
	case <-wakeB:
	default:
		t.Fatal("a size change did not wake the read-only viewer")
	}
	if g := s.SizeGen(); g != gen+1 {
		t.Errorf("generation: got %d, want %d", g, gen+1)
	}
	if _, err := a.Resize(70, 20); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wakeB:
		t.Error("a resize to the same size woke the viewers")
	default:
	}
}

func winsizeOf(t *testing.T, s *Session) Size {
	t.Helper()
	c, r := winsize(t, s)
	return Size{c, r}
}

// TestChildEnv: the session inherits the gateway's environment except the gateway's own
// variables and the denied ones, with TERM, COLORTERM and SHELL set by muxterm, and the
// client's variables last.
func TestChildEnv(t *testing.T) {
	for k, v := range map[string]string{
		"MUXTERM_TOKEN": "secret-token", "OTEL_EXPORTER_OTLP_HEADERS": "x", "SESSIONTEST_KEEP": "kept",
		"SESSIONTEST_SECRET_A": "a", "SESSIONTEST_DENIED": "d", "TERM": "dumb", "COLUMNS": "7",
		"EDITOR": "vi",
	} {
		t.Setenv(k, v)
	}
	env := childEnv("/bin/zsh", []string{"SESSIONTEST_SECRET_*", "SESSIONTEST_DENIED"}, []string{"EXTRA=1"})
	got := map[string][]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = append(got[k], v)
	}
	for _, k := range []string{"MUXTERM_TOKEN", "OTEL_EXPORTER_OTLP_HEADERS", "SESSIONTEST_SECRET_A", "SESSIONTEST_DENIED", "COLUMNS"} {
		if v, ok := got[k]; ok {
			t.Errorf("%s reached the session: %q", k, v)
		}
	}
	for k, want := range map[string]string{"SESSIONTEST_KEEP": "kept", "EDITOR": "vi", "TERM": "xterm-256color",
		"COLORTERM": "truecolor", "SHELL": "/bin/zsh", "EXTRA": "1", "PATH": os.Getenv("PATH")} {
		if v := got[k]; !slices.Equal(v, []string{want}) {
			t.Errorf("%s: got %q, want exactly [%q]", k, v, want)
		}
	}
}

func TestCheckEnvPattern(t *testing.T) {
	for _, ok := range []string{"FOO", "foo_bar", "AWS_*", "_X1", "*"} {
		if err := CheckEnvPattern(ok); err != nil {
			t.Errorf("CheckEnvPattern(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "1FOO", "A-B", "A*B", "**", "FOO BAR", "A=B"} {
		if err := CheckEnvPattern(bad); err == nil {
			t.Errorf("CheckEnvPattern(%q) = nil, want an error", bad)
		}
	}
}
