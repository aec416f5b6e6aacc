// Package rawmux is a muxterm.v1 client written by hand for tests: it shows what the Go client
// does not (every notification in order, the exact responses) and shares no code with the
// server or with package client. Its reader routes responses by id, records notifications, and
// collects and acknowledges output per channel. Imported by _test.go files only.
package rawmux

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// Client is one socket. Its methods may be called from the test's goroutine while its reader
// runs; Close ends the reader and is registered with t.Cleanup by Dial.
type Client struct {
	t   testing.TB
	ws  *websocket.Conn
	wmu sync.Mutex // one writer at a time (gorilla allows one)

	// mu guards the fields below.
	mu      sync.Mutex
	nextID  int
	waiting map[int]chan []byte
	notes   []Note
	seen    int // notes consumed by NextNote
	out     map[uint32][]byte
	errOut  map[uint32][]byte // stderr frames' payloads (a pipe session's, with capabilities.pipes)
	changed chan struct{}     // capacity 1: something arrived
	done    chan struct{}     // closed when the reader ends
}

// Note is a notification as received.
type Note struct {
	Method string         `json:"method"`
	Params map[string]any `json:"params"`
}

// Dial connects to url with header (nil for none), starts the reader and calls initialize.
func Dial(t testing.TB, url string, header http.Header) *Client {
	t.Helper()
	return DialCaps(t, url, header, map[string]any{})
}

// DialCaps is Dial whose initialize declares capabilities (as {"pipes": true}).
func DialCaps(t testing.TB, url string, header http.Header, capabilities map[string]any) *Client {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}, HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial(url, header)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	c := &Client{t: t, ws: ws, waiting: map[int]chan []byte{}, out: map[uint32][]byte{},
		errOut: map[uint32][]byte{}, changed: make(chan struct{}, 1), done: make(chan struct{})}
	go c.readLoop()
	t.Cleanup(c.Close)
	c.Result("initialize", map[string]any{"capabilities": capabilities}, nil)
	return c
}

// Close closes the socket and waits for the reader.
func (c *Client) Close() {
	c.ws.Close()
	<-c.done
}

func (c *Client) readLoop() {
	defer close(c.done)
	for {
		typ, b, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		if typ == websocket.BinaryMessage {
			if f, err := proto.ParseFrame(b); err == nil && (f.Type == proto.FrameOutput || f.Type == proto.FrameStderr) {
				c.mu.Lock()
				if f.Type == proto.FrameStderr {
					c.errOut[f.Channel] = append(c.errOut[f.Channel], f.Payload...)
				} else {
					c.out[f.Channel] = append(c.out[f.Channel], f.Payload...)
				}
				c.mu.Unlock()
				var n [4]byte
				binary.BigEndian.PutUint32(n[:], uint32(len(f.Payload)))
				c.write(websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameAck, f.Channel, n[:]))
			}
		} else {
			var m struct {
				ID *int `json:"id"`
				Note
			}
			if json.Unmarshal(b, &m) == nil {
				c.mu.Lock()
				if m.ID != nil && c.waiting[*m.ID] != nil {
					c.waiting[*m.ID] <- b
					delete(c.waiting, *m.ID)
				} else if m.ID == nil && m.Method != "" {
					c.notes = append(c.notes, m.Note)
				}
				c.mu.Unlock()
			}
		}
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
}

func (c *Client) write(typ int, b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.WriteMessage(typ, b)
}

// Call sends a request and returns its whole response.
func (c *Client) Call(method string, params any) []byte {
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

// Result calls method and decodes its result into out (if non-nil), failing on an error
// response.
func (c *Client) Result(method string, params any, out any) {
	c.t.Helper()
	r := c.Call(method, params)
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

// Input sends s as input on channel.
func (c *Client) Input(channel uint32, s string) {
	c.write(websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameInput, channel, []byte(s)))
}

// Output returns a copy of everything received on channel.
func (c *Client) Output(channel uint32) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out[channel])
}

// Stderr returns a copy of everything received on channel in stderr frames.
func (c *Client) Stderr(channel uint32) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.errOut[channel])
}

// waitFor waits until cond (called with c.mu held) holds, woken by each message received.
func (c *Client) waitFor(what string, cond func() bool) {
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

// WaitOutput waits until channel's output contains want and returns the output up to the end
// of its last occurrence.
func (c *Client) WaitOutput(channel uint32, want string) string {
	c.t.Helper()
	var out string
	c.waitFor(fmt.Sprintf("%q on channel %d", want, channel), func() bool {
		i := bytes.LastIndex(c.out[channel], []byte(want))
		if i < 0 {
			return false
		}
		out = string(c.out[channel][:i+len(want)])
		return true
	})
	return out
}

// NextNote returns the next notification of method not returned before (others are skipped).
func (c *Client) NextNote(method string) map[string]any {
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

// PendingNotes returns the notifications of method received so far and not returned by
// NextNote.
func (c *Client) PendingNotes(method string) []map[string]any {
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

// ExpectSize checks that the next session.size notification says cols x rows for channel.
func (c *Client) ExpectSize(channel uint32, cols, rows int) {
	c.t.Helper()
	n := c.NextNote("session.size")
	if n["channel"] != float64(channel) || n["cols"] != float64(cols) || n["rows"] != float64(rows) {
		c.t.Fatalf("session.size: got %v, want channel %d, %dx%d", n, channel, cols, rows)
	}
}
