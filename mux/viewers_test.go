package mux

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/internal/testutil/rawmux"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// newViewersServer runs Serve with a registry of opts; a socket dialled with ?ro=1 is a
// read-only viewer of the same principal's sessions.
func newViewersServer(t *testing.T, opts session.Options) (reg *session.Registry, url string) {
	t.Helper()
	opts.Shell = "/bin/sh"
	opts.KillGrace = 100 * time.Millisecond
	reg = session.NewRegistry(opts, nil)
	up := websocket.Upgrader{Subprotocols: []string{proto.Subprotocol}}
	ctx, cancel := context.WithCancelCause(context.Background())
	var wg sync.WaitGroup
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		wg.Add(1)
		defer wg.Done()
		_ = Serve(ctx, ws, ServerOptions{Registry: reg, Principal: principal,
			ReadOnly: r.URL.Query().Get("ro") == "1", AllowCmd: func([]string) bool { return true }})
	}))
	t.Cleanup(func() {
		cancel(ErrShutdown)
		wg.Wait()
		hs.Close()
		sctx, c2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer c2()
		if err := reg.Shutdown(sctx); err != nil {
			t.Errorf("registry shutdown: %v", err)
		}
	})
	return reg, "ws" + strings.TrimPrefix(hs.URL, "http")
}

const sizeScript = `stty -echo; echo READY; while read tag; do echo "SIZE $(stty size) $tag"; done`

// TestWindowSizePolicyOverSockets: an opener at 80x24 and a second read-write viewer attaching
// at 60x40 on another socket, then the opener resizing to 70x30, then the second viewer leaving:
// every result, every session.size notification (to both, and to a read-only viewer whose size
// never counts) and stty size inside the session follow the policy.
func TestWindowSizePolicyOverSockets(t *testing.T) {
	for _, tc := range []struct {
		policy  session.WindowSize
		both    session.Size // after the second viewer attached
		resized session.Size // after the opener resized to 70x30
		leave   string       // how the second viewer leaves
	}{
		{session.WindowLatest, session.Size{Cols: 60, Rows: 40}, session.Size{Cols: 70, Rows: 30}, "socket end"},
		{session.WindowSmallest, session.Size{Cols: 60, Rows: 24}, session.Size{Cols: 60, Rows: 30}, "detach"},
		{session.WindowLargest, session.Size{Cols: 80, Rows: 40}, session.Size{Cols: 70, Rows: 40}, "socket end"},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			_, url := newViewersServer(t, session.Options{WindowSize: tc.policy})
			a := rawmux.Dial(t, url, nil)
			var open proto.OpenResult
			a.Result("session.open", map[string]any{"channel": 1, "cols": 80, "rows": 24,
				"cmd": []string{"sh", "-c", sizeScript}}, &open)
			a.WaitOutput(1, "READY")
			probes := 0
			// probe types through client c on channel ch (under latest, typing picks the size)
			// and checks stty size in the opener's output.
			probe := func(c *rawmux.Client, ch uint32, size session.Size) {
				t.Helper()
				probes++
				tag := fmt.Sprintf("p%d", probes)
				c.Input(ch, tag+"\n")
				end := " " + tag + "\r\n"
				a.WaitOutput(1, end)
				out := string(a.Output(1))
				out = out[:strings.Index(out, end)]
				if got, want := out[strings.LastIndex(out, "SIZE "):], fmt.Sprintf("SIZE %d %d", size.Rows, size.Cols); got != want {
					t.Fatalf("stty size: got %q, want %q", got, want)
				}
			}

			b := rawmux.Dial(t, url, nil)
			var att proto.AttachResult
			b.Result("session.attach", map[string]any{"channel": 7, "session": open.Session, "cols": 60, "rows": 40}, &att)
			if (session.Size{Cols: att.Cols, Rows: att.Rows}) != tc.both {
				t.Errorf("attach result size: got %dx%d, want %+v", att.Cols, att.Rows, tc.both)
			}
			if tc.both != (session.Size{Cols: 80, Rows: 24}) {
				a.ExpectSize(1, tc.both.Cols, tc.both.Rows)
			}
			probe(b, 7, tc.both)

			ro := rawmux.Dial(t, url+"?ro=1", nil)
			var roAtt proto.AttachResult
			ro.Result("session.attach", map[string]any{"channel": 3, "session": open.Session, "cols": 10, "rows": 5}, &roAtt)
			if (session.Size{Cols: roAtt.Cols, Rows: roAtt.Rows}) != tc.both {
				t.Errorf("read-only attach: got %dx%d, want the size unchanged %+v", roAtt.Cols, roAtt.Rows, tc.both)
			}
			if r := ro.Call("session.resize", map[string]any{"channel": 3, "cols": 10, "rows": 5}); !strings.Contains(string(r), `"forbidden"`) {
				t.Errorf("read-only resize: got %s, want forbidden", r)
			}
			probe(b, 7, tc.both)

			var applied proto.ResizeResult
			a.Result("session.resize", map[string]any{"channel": 1, "cols": 70, "rows": 30}, &applied)
			if (session.Size{Cols: applied.Cols, Rows: applied.Rows}) != tc.resized {
				t.Errorf("resize to 70x30: applied %+v, want %+v", applied, tc.resized)
			}
			for _, c := range []struct {
				c  *rawmux.Client
				ch uint32
			}{{a, 1}, {b, 7}, {ro, 3}} {
				if tc.resized != tc.both {
					c.c.ExpectSize(c.ch, tc.resized.Cols, tc.resized.Rows)
				}
			}
			probe(a, 1, tc.resized)

			switch tc.leave {
			case "detach":
				b.Result("session.detach", map[string]any{"channel": 7}, nil)
			case "socket end":
				b.Close()
			}
			alone := session.Size{Cols: 70, Rows: 30}
			if alone != tc.resized {
				a.ExpectSize(1, alone.Cols, alone.Rows)
				ro.ExpectSize(3, alone.Cols, alone.Rows)
			}
			probe(a, 1, alone)
			for _, c := range []*rawmux.Client{a, ro} {
				if extra := c.PendingNotes("session.size"); len(extra) > 0 {
					t.Errorf("session.size without a change of size: %v", extra)
				}
			}
		})
	}
}

// seqScript prints a known sequence, then WAITING, then waits for a line and echoes it.
func seqScript(n int) string {
	return fmt.Sprintf(`stty raw -echo; seq 1 %d; echo WAITING; read x; echo "LIVE-$x"`, n)
}

func seqOutput(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	b.WriteString("WAITING\n")
	return b.Bytes()
}

// TestAttachLiveOffset: an attach after the program printed reports live = the offset where
// the attach took effect, so the first live - offset bytes on the channel are exactly what was
// printed before it (the replay) and everything after is what the program printed afterwards,
// also when from is older than the ring.
func TestAttachLiveOffset(t *testing.T) {
	for _, tc := range []struct {
		name       string
		scrollback int
		lines      int
		from       any // nil: absent
	}{
		{"replay of everything", 1 << 20, 200, nil},
		{"from inside the ring", 1 << 20, 200, 100},
		{"from older than the ring", 4096, 3000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, url := newViewersServer(t, session.Options{ScrollbackBytes: tc.scrollback})
			a := rawmux.Dial(t, url, nil)
			var open proto.OpenResult
			a.Result("session.open", map[string]any{"channel": 1, "cols": 80, "rows": 24,
				"cmd": []string{"sh", "-c", seqScript(tc.lines)}}, &open)
			if open.Live != 0 {
				t.Errorf("open: live %d, want 0 (a new session has no replay)", open.Live)
			}
			before := seqOutput(tc.lines)
			a.WaitOutput(1, "WAITING\n")
			if got := a.Output(1); !bytes.Equal(got, before) {
				t.Fatalf("opener's output: got %d bytes, want the %d of the sequence", len(got), len(before))
			}

			b := rawmux.Dial(t, url, nil)
			// A raw replay (what this test is about; a paint of the screen is
			// TestAttachPaintsTheScreen's).
			params := map[string]any{"channel": 2, "session": open.Session, "screen": "never"}
			if tc.from != nil {
				params["from"] = tc.from
			}
			var att proto.AttachResult
			b.Result("session.attach", params, &att)
			if att.Live != int64(len(before)) || att.End != att.Live {
				t.Fatalf("attach: live %d end %d, want both %d (everything printed before the attach)", att.Live, att.End, len(before))
			}
			if tc.from != nil && tc.from.(int) < int(att.Offset) {
				if att.Lost != att.Offset-int64(tc.from.(int)) || att.Offset <= 0 {
					t.Errorf("attach from %v: offset %d lost %d, want lost = offset - from > 0", tc.from, att.Offset, att.Lost)
				}
			}
			a.Input(1, "now\n")
			b.WaitOutput(2, "LIVE-now\n")
			got := b.Output(2)
			replay := att.Live - att.Offset
			if int64(len(got)) < replay || !bytes.Equal(got[:replay], before[att.Offset:att.Live]) {
				t.Fatalf("the first live - offset = %d bytes: got %q…, want the output printed before the attach from offset %d",
					replay, got[:min(int64(len(got)), 40)], att.Offset)
			}
			if rest := string(got[replay:]); rest != "LIVE-now\n" {
				t.Errorf("output from live on: got %q, want %q", rest, "LIVE-now\n")
			}
		})
	}
}
