package mux

import (
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// rawConn is a bare WebSocket client that sees every message in order.
type rawConn struct {
	t  *testing.T
	ws *websocket.Conn
}

func dialRaw(t *testing.T, url string) *rawConn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}}
	ws, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	r := &rawConn{t: t, ws: ws}
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	r.next(func(m map[string]any, _ []byte) bool { return m["id"] == 1.0 })
	return r
}

func (r *rawConn) send(s string) {
	r.t.Helper()
	if err := r.ws.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
		r.t.Fatal(err)
	}
}

// next reads until match accepts a text message (decoded, and raw) and returns it; binary
// frames are acknowledged when ack is set and otherwise passed to match with a nil map.
func (r *rawConn) next(match func(m map[string]any, b []byte) bool) map[string]any {
	r.t.Helper()
	_ = r.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		typ, b, err := r.ws.ReadMessage()
		if err != nil {
			r.t.Fatalf("read: %v", err)
		}
		if typ != websocket.TextMessage {
			if match(nil, b) {
				return nil
			}
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			r.t.Fatalf("bad json %q: %v", b, err)
		}
		if match(m, b) {
			return m
		}
	}
}

// A client that reuses a channel number the instant its session.closed arrives gets the
// channel, never channel_in_use: the writer frees the number before it
// writes the notification. The hook holds the writer right after that write until the reuse
// has been decided, so the order is forced.
func TestChannelReusableWhenClosedArrives(t *testing.T) {
	decided := make(chan struct{})
	opts := ServerOptions{testHookAfterClosed: func(c *conn, ch *channel) {
		// Until the read loop has answered the reuse: with the channel (it is no longer ch) or
		// with an error (queued in ctrl).
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			c.mu.Lock()
			done := c.channels[ch.id] != ch || len(c.ctrl) > 0
			c.mu.Unlock()
			if done {
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(decided)
	}}
	s := newServer(t, opts, nil)
	r := dialRaw(t, s.url)
	r.send(`{"jsonrpc":"2.0","id":2,"method":"session.open","params":{"channel":1,"cols":80,"rows":24,"cmd":["sh","-c","echo READY; exec sleep 100"]}}`)
	res := r.next(func(m map[string]any, _ []byte) bool { return m != nil && m["id"] == 2.0 })
	sess := res["result"].(map[string]any)["session"].(string)
	r.send(`{"jsonrpc":"2.0","id":3,"method":"session.kill","params":{"session":"` + sess + `"}}`)
	r.next(func(m map[string]any, _ []byte) bool { return m != nil && m["method"] == "session.closed" })
	r.send(`{"jsonrpc":"2.0","id":4,"method":"session.open","params":{"channel":1,"cols":80,"rows":24,"cmd":["sh","-c","exec sleep 100"]}}`)
	var raw []byte
	r.next(func(m map[string]any, b []byte) bool { raw = b; return m != nil && m["id"] == 4.0 })
	if strings.Contains(string(raw), "error") {
		t.Errorf("open on the channel number session.closed freed: got %s, want a result", raw)
	}
	select {
	case <-decided:
	case <-time.After(5 * time.Second):
		t.Fatal("the closed hook did not run")
	}
}

// session.closed after a kill follows every byte printed before the kill point (nothing the program printed before the kill is lost), so with the window full it waits
// for acknowledgements; a client that does not want the rest detaches, and the detach's result
// frees the channel at once. Acknowledging instead brings the rest, then session.closed right
// after the byte at the kill result's offset.
func TestClosedAfterKillWaitsForTheWindowOrADetach(t *testing.T) {
	const window = 64 << 10
	const printed = 400000
	for _, ack := range []bool{false, true} {
		name := "detach"
		if ack {
			name = "ack"
		}
		t.Run(name, func(t *testing.T) {
			s := newServer(t, ServerOptions{Window: window}, nil)
			r := dialRaw(t, s.url)
			r.send(`{"jsonrpc":"2.0","id":2,"method":"session.open","params":{"channel":1,"cols":80,"rows":24,"cmd":["sh","-c","stty raw -echo; head -c 400000 /dev/zero | tr '\\0' x; exec sleep 100"]}}`)
			res := r.next(func(m map[string]any, _ []byte) bool { return m != nil && m["id"] == 2.0 })
			sess := res["result"].(map[string]any)["session"].(string)
			got := 0
			countOutput := func(b []byte) {
				if f, err := proto.ParseFrame(b); err == nil && f.Type == proto.FrameOutput {
					got += len(f.Payload)
				}
			}
			// Everything printed is in the ring (the kill point comes after it), the window is full.
			id := 10
			for end := 0.0; end < printed; {
				id++
				r.send(`{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"session.list","params":{}}`)
				want := float64(id)
				m := r.next(func(m map[string]any, b []byte) bool {
					if m == nil {
						countOutput(b)
						return false
					}
					return m["id"] == want
				})
				end = m["result"].(map[string]any)["sessions"].([]any)[0].(map[string]any)["end"].(float64)
			}
			r.send(`{"jsonrpc":"2.0","id":3,"method":"session.kill","params":{"session":"` + sess + `"}}`)
			kill := r.next(func(m map[string]any, b []byte) bool {
				if m == nil {
					countOutput(b)
					return false
				}
				if m["method"] == "session.closed" {
					t.Fatalf("session.closed before the kill result with %d of %d bytes sent", got, printed)
				}
				return m["id"] == 3.0
			})
			offset := int(kill["result"].(map[string]any)["offset"].(float64))
			if offset != printed {
				t.Fatalf("kill offset %d, want %d", offset, printed)
			}
			// A request answered after the kill result, and still no session.closed: it waits.
			r.send(`{"jsonrpc":"2.0","id":5,"method":"session.list","params":{}}`)
			r.next(func(m map[string]any, b []byte) bool {
				if m == nil {
					countOutput(b)
					return false
				}
				if m["method"] == "session.closed" {
					t.Fatalf("session.closed with %d of %d bytes sent and none acknowledged", got, printed)
				}
				return m["id"] == 5.0
			})
			if got != window {
				t.Errorf("bytes sent before any ack: got %d, want the window %d", got, window)
			}
			if !ack {
				r.send(`{"jsonrpc":"2.0","id":6,"method":"session.detach","params":{"channel":1}}`)
				r.next(func(m map[string]any, _ []byte) bool { return m != nil && m["id"] == 6.0 })
				r.send(`{"jsonrpc":"2.0","id":7,"method":"session.open","params":{"channel":1,"cols":80,"rows":24,"cmd":["sh","-c","exec sleep 100"]}}`)
				var raw []byte
				r.next(func(m map[string]any, b []byte) bool { raw = b; return m != nil && m["id"] == 7.0 })
				if strings.Contains(string(raw), "error") {
					t.Errorf("open on the channel a detach freed after a kill: got %s, want a result", raw)
				}
				return
			}
			ackFrame := func(n int) {
				var b [4]byte
				binary.BigEndian.PutUint32(b[:], uint32(n))
				if err := r.ws.WriteMessage(websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameAck, 1, b[:])); err != nil {
					t.Fatal(err)
				}
			}
			ackFrame(got)
			r.next(func(m map[string]any, b []byte) bool {
				if m == nil {
					if f, err := proto.ParseFrame(b); err == nil && f.Type == proto.FrameOutput {
						got += len(f.Payload)
						ackFrame(len(f.Payload))
					}
					return false
				}
				return m["method"] == "session.closed"
			})
			if got != offset {
				t.Errorf("bytes before session.closed: got %d, want the kill offset %d", got, offset)
			}
		})
	}
}
