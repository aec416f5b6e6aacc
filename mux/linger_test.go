package mux

import (
	"errors"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// A client that goes on sending after our close frame is let go when the linger ends (protocol.md
// §6). A review read the read loop as pushing the deadline by PongWait on every message, which
// would keep such a client for good; this test passes with and without the clamp added for it
// (closeSocket's drain sets the deadline too), so it guards the behaviour, not that change.
func TestLingerEndsWhileTheClientKeepsSending(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}}
	ws, _, err := d.Dial(s.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)); err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteMessage(websocket.TextMessage, []byte{'"', 0xff, '"'}); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := ws.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) && ce.Code == websocket.CloseInvalidFramePayloadData {
			break
		}
		if err != nil {
			t.Fatalf("before the close: %v", err)
		}
	}
	closedAt := time.Now()
	// Keep sending (as a client that ignores the close would), well past the linger.
	deadline := closedAt.Add(closeLinger + 5*time.Second)
	tick := time.NewTicker(200 * time.Millisecond) // the client's pace, not a synchronization
	defer tick.Stop()
	for range tick.C {
		nc := ws.NetConn()
		_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
		// A raw frame: gorilla refuses to write after it read a close.
		if _, err := nc.Write([]byte{0x81, 0x82, 0, 0, 0, 0, '{', '}'}); err != nil {
			ended := time.Since(closedAt)
			if ended > closeLinger+2*time.Second {
				t.Errorf("the gateway let the client go %v after its close, want within the linger (%v)", ended, closeLinger)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway still reads a client that keeps sending %v after its close (linger %v)", time.Since(closedAt), closeLinger)
		}
	}
}
