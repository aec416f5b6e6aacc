package mux

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

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

// rawClient speaks muxterm.v1 by hand, to see what the Go client does not show: notifications
// and the exact results. Its reader routes responses by id, records notifications in order, and
// collects and acknowledges output per channel.
type rawClient struct {
	t   *testing.T
	ws  *websocket.Conn
	wmu sync.Mutex // one writer at a time

	mu      sync.Mutex
	nextID  int
	waiting map[int]chan []byte
	notes   []rawNote
	out     map[uint32][]byte
	seen    int // notes consumed by nextNote
	changed chan struct{}
	done    chan struct{}
}

type rawNote struct {
	Method string         `json:"method"`
	Params map[string]any `json:"params"`
}

func dialRawClient(t *testing.T, url string) *rawClient {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}}
	ws, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &rawClient{t: t, ws: ws, waiting: map[int]chan []byte{}, out: map[uint32][]byte{},
		changed: make(chan struct{}, 1), done: make(chan struct{})}
	go c.readLoop()
	t.Cleanup(c.close)
	c.call("initialize", map[string]any{})
	return c
}

func (c *rawClient) close() {
	c.ws.Close()
	<-c.done
}

func (c *rawClient) readLoop() {
	defer close(c.done)
	for {
		typ, b, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		c.mu.Lock()
		if typ == websocket.BinaryMessage {
			if f, err := proto.ParseFrame(b); err == nil && f.Type == proto.FrameOutput {
				c.out[f.Channel] = append(c.out[f.Channel], f.Payload...)
				var n [4]byte
				binary.BigEndian.PutUint32(n[:], uint32(len(f.Payload)))
				c.mu.Unlock()
				c.write(websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameAck, f.Channel, n[:]))
				c.mu.Lock()
			}
		} else {
			var m struct {
				ID *int `json:"id"`
				rawNote
			}
			if json.Unmarshal(b, &m) == nil {
				if m.ID != nil && c.waiting[*m.ID] != nil {
					c.waiting[*m.ID] <- b
					delete(c.waiting, *m.ID)
				} else if m.ID == nil && m.Method != "" {
					c.notes = append(c.notes, m.rawNote)
				}
			}
		}
		c.mu.Unlock()
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
}

func (c *rawClient) write(typ int, b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.WriteMessage(typ, b)
}

// call sends a request and returns its whole response.
func (c *rawClient) call(method string, params any) []byte {
	c.t.Helper()
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	ch := make(chan []byte, 1)
	c.waiting[id] = ch
	c.mu.Unlock()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		c.t.Fatal(err)
	}
	c.write(websocket.TextMessage, b)
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		c.t.Fatalf("no response to %s", method)
		return nil
	}
}

// result calls method and decodes its result into out, failing on an error response.
func (c *rawClient) result(method string, params any, out any) {
	c.t.Helper()
	r := c.call(method, params)
	var m struct {
		Result json.RawMessage `json:"result"`
		Error  *proto.Error    `json:"error"`
	}
	if err := json.Unmarshal(r, &m); err != nil || m.Error != nil {
		c.t.Fatalf("%s: got %s, want a result", method, r)
	}
	if out != nil {
		if err := json.Unmarshal(m.Result, out); err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *rawClient) input(channel uint32, s string) {
	c.write(websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameInput, channel, []byte(s)))
}

func (c *rawClient) output(channel uint32) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out[channel])
}

// waitFor waits until cond (called with c.mu held) holds.
func (c *rawClient) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-c.changed:
		case <-c.done:
			c.t.Fatalf("socket closed waiting for %s", what)
		case <-deadline:
			c.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (c *rawClient) waitOutput(channel uint32, want string) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("%q on channel %d", want, channel), func() bool {
		return bytes.Contains(c.out[channel], []byte(want))
	})
}

// nextNote returns the next notification of method not returned before (others are skipped).
func (c *rawClient) nextNote(method string) map[string]any {
	c.t.Helper()
	var got map[string]any
	c.waitFor("a "+method+" notification", func() bool {
		for ; c.seen < len(c.notes); c.seen++ {
			if c.notes[c.seen].Method == method {
				got = c.notes[c.seen].Params
				c.seen++
				return true
			}
		}
		return false
	})
	return got
}

// pendingNotes returns the notifications of method received so far and not returned by
// nextNote.
func (c *rawClient) pendingNotes(method string) []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []map[string]any
	for _, n := range c.notes[c.seen:] {
		if n.Method == method {
			out = append(out, n.Params)
		}
	}
	return out
}

// expectSize checks that the next session.size notification says size, for channel.
func (c *rawClient) expectSize(channel uint32, size session.Size) {
	c.t.Helper()
	n := c.nextNote("session.size")
	if n["channel"] != float64(channel) || n["cols"] != float64(size.Cols) || n["rows"] != float64(size.Rows) {
		c.t.Fatalf("session.size: got %v, want channel %d, %dx%d", n, channel, size.Cols, size.Rows)
	}
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
			a := dialRawClient(t, url)
			var open proto.OpenResult
			a.result("session.open", map[string]any{"channel": 1, "cols": 80, "rows": 24,
				"cmd": []string{"sh", "-c", sizeScript}}, &open)
			a.waitOutput(1, "READY")
			probes := 0
			// probe types through client c on channel ch (under latest, typing picks the size)
			// and checks stty size in the opener's output.
			probe := func(c *rawClient, ch uint32, size session.Size) {
				t.Helper()
				probes++
				tag := fmt.Sprintf("p%d", probes)
				c.input(ch, tag+"\n")
				end := " " + tag + "\r\n"
				a.waitOutput(1, end)
				out := string(a.output(1))
				out = out[:strings.Index(out, end)]
				if got, want := out[strings.LastIndex(out, "SIZE "):], fmt.Sprintf("SIZE %d %d", size.Rows, size.Cols); got != want {
					t.Fatalf("stty size: got %q, want %q", got, want)
				}
			}

			b := dialRawClient(t, url)
			var att proto.AttachResult
			b.result("session.attach", map[string]any{"channel": 7, "session": open.Session, "cols": 60, "rows": 40}, &att)
			if (session.Size{Cols: att.Cols, Rows: att.Rows}) != tc.both {
				t.Errorf("attach result size: got %dx%d, want %+v", att.Cols, att.Rows, tc.both)
			}
			if tc.both != (session.Size{Cols: 80, Rows: 24}) {
				a.expectSize(1, tc.both)
			}
			probe(b, 7, tc.both)

			ro := dialRawClient(t, url+"?ro=1")
			var roAtt proto.AttachResult
			ro.result("session.attach", map[string]any{"channel": 3, "session": open.Session, "cols": 10, "rows": 5}, &roAtt)
			if (session.Size{Cols: roAtt.Cols, Rows: roAtt.Rows}) != tc.both {
				t.Errorf("read-only attach: got %dx%d, want the size unchanged %+v", roAtt.Cols, roAtt.Rows, tc.both)
			}
			if r := ro.call("session.resize", map[string]any{"channel": 3, "cols": 10, "rows": 5}); !strings.Contains(string(r), `"forbidden"`) {
				t.Errorf("read-only resize: got %s, want forbidden", r)
			}
			probe(b, 7, tc.both)

			var applied proto.ResizeResult
			a.result("session.resize", map[string]any{"channel": 1, "cols": 70, "rows": 30}, &applied)
			if (session.Size{Cols: applied.Cols, Rows: applied.Rows}) != tc.resized {
				t.Errorf("resize to 70x30: applied %+v, want %+v", applied, tc.resized)
			}
			for _, c := range []struct {
				c  *rawClient
				ch uint32
			}{{a, 1}, {b, 7}, {ro, 3}} {
				if tc.resized != tc.both {
					c.c.expectSize(c.ch, tc.resized)
				}
			}
			probe(a, 1, tc.resized)

			switch tc.leave {
			case "detach":
				b.result("session.detach", map[string]any{"channel": 7}, nil)
			case "socket end":
				b.close()
			}
			alone := session.Size{Cols: 70, Rows: 30}
			if alone != tc.resized {
				a.expectSize(1, alone)
				ro.expectSize(3, alone)
			}
			probe(a, 1, alone)
			for _, c := range []*rawClient{a, ro} {
				if extra := c.pendingNotes("session.size"); len(extra) > 0 {
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
			a := dialRawClient(t, url)
			var open proto.OpenResult
			a.result("session.open", map[string]any{"channel": 1, "cols": 80, "rows": 24,
				"cmd": []string{"sh", "-c", seqScript(tc.lines)}}, &open)
			if open.Live != 0 {
				t.Errorf("open: live %d, want 0 (a new session has no replay)", open.Live)
			}
			before := seqOutput(tc.lines)
			a.waitOutput(1, "WAITING\n")
			if got := a.output(1); !bytes.Equal(got, before) {
				t.Fatalf("opener's output: got %d bytes, want the %d of the sequence", len(got), len(before))
			}

			b := dialRawClient(t, url)
			params := map[string]any{"channel": 2, "session": open.Session}
			if tc.from != nil {
				params["from"] = tc.from
			}
			var att proto.AttachResult
			b.result("session.attach", params, &att)
			if att.Live != int64(len(before)) || att.End != att.Live {
				t.Fatalf("attach: live %d end %d, want both %d (everything printed before the attach)", att.Live, att.End, len(before))
			}
			if tc.from != nil && tc.from.(int) < int(att.Offset) {
				if att.Lost != att.Offset-int64(tc.from.(int)) || att.Offset <= 0 {
					t.Errorf("attach from %v: offset %d lost %d, want lost = offset - from > 0", tc.from, att.Offset, att.Lost)
				}
			}
			a.input(1, "now\n")
			b.waitOutput(2, "LIVE-now\n")
			got := b.output(2)
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
