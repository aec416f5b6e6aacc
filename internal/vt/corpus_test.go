package vt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/muxterm/muxterm/internal/vt/internal/corpus"
)

// replay feeds a recording to a new terminal, resizes at their places.
func replay(t *testing.T, path string, o Options) *Terminal {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := corpus.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	var term *Terminal
	for _, r := range rs {
		switch {
		case r.Data == nil && term == nil:
			term = New(r.Cols, r.Rows, o)
		case r.Data == nil:
			term.Resize(r.Cols, r.Rows)
		default:
			term.Write(r.Data)
		}
	}
	return term
}

func TestCorpus(t *testing.T) {
	files, _ := filepath.Glob("testdata/corpus/*.rec")
	if len(files) == 0 {
		t.Fatal("no testdata/corpus/*.rec")
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".rec")
		t.Run(name, func(t *testing.T) {
			for _, sb := range []int{0, 1000} {
				term := replay(t, f, Options{ScrollbackLines: sb})
				checkRoundTrip(t, name, term)
				if testing.Verbose() && sb == 0 {
					t.Logf("%s", term.AppendText(nil, SnapshotOptions{}))
				}
			}
		})
	}
}

func TestCorpusSpots(t *testing.T) {
	last := func(term *Terminal) string {
		return string(appendText(nil, term.scr().row(term.rows-1).l))
	}
	t.Run("vim", func(t *testing.T) {
		term := replay(t, "testdata/corpus/vim.rec", Options{})
		m := term.Modes()
		if !m.AltScreen || m.MouseTracking == 0 {
			t.Errorf("got alt screen %v, mouse tracking %d; want the alternate screen and mouse tracking on", m.AltScreen, m.MouseTracking)
		}
		if txt := string(term.AppendText(nil, SnapshotOptions{})); !strings.Contains(txt, "inserted line") {
			t.Errorf("got screen %q, want the inserted text", txt)
		}
	})
	t.Run("tmux", func(t *testing.T) {
		term := replay(t, "testdata/corpus/tmux.rec", Options{})
		if got := last(term); !strings.Contains(got, "[vtrec]") && !strings.Contains(got, "0:") {
			t.Errorf("got last row %q, want tmux's status line", got)
		}
	})
	t.Run("less", func(t *testing.T) {
		term := replay(t, "testdata/corpus/less.rec", Options{})
		if got := string(term.AppendText(nil, SnapshotOptions{})); !strings.HasPrefix(got, "line 000") {
			t.Errorf("got screen %q, want the file's top", got)
		}
	})
	t.Run("resize", func(t *testing.T) {
		term := replay(t, "testdata/corpus/resize.rec", Options{ScrollbackLines: 100})
		if c, r := term.Size(); c != 120 || r != 40 {
			t.Errorf("got size %dx%d, want 120x40", c, r)
		}
	})
	t.Run("ls", func(t *testing.T) {
		term := replay(t, "testdata/corpus/ls.rec", Options{ScrollbackLines: 1000})
		if got := term.sb.len(); got < 250 {
			t.Errorf("got %d history lines, want the listing's", got)
		}
	})
}
