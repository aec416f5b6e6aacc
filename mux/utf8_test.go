package mux

import (
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// rawDial opens a socket with gorilla alone, so a test can send what no client would.
func rawDial(t *testing.T, s *server) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}}
	ws, _, err := d.Dial(s.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	if err := ws.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return ws
}

// TestInvalidUTF8TextIsRefusedWith1007: a text message that is not UTF-8 (here in the id, the
// method, a param) closes the socket with 1007, before or after initialize, and the gateway
// never sends a text frame that is not UTF-8 (protocol.md §6).
func TestInvalidUTF8TextIsRefusedWith1007(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	const init = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`
	cases := []struct {
		name  string
		first []string
		bad   string
	}{
		{"id", []string{init}, "{\"jsonrpc\":\"2.0\",\"id\":\"\xff\xfe\",\"method\":\"session.list\",\"params\":{}}"},
		{"method", []string{init}, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"\xc3(\",\"params\":{}}"},
		{"param", []string{init}, "{\"jsonrpc\":\"2.0\",\"id\":\"\xed\xa0\x80\",\"method\":\"session.attach\",\"params\":{\"channel\":1,\"session\":\"\xff\"}}"},
		{"before initialize", nil, "{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"initialize\",\"params\":{}}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := rawDial(t, s)
			for _, m := range append(tc.first, tc.bad, `{"jsonrpc":"2.0","id":3,"method":"session.list","params":{}}`) {
				if err := ws.WriteMessage(websocket.TextMessage, []byte(m)); err != nil {
					t.Fatal(err)
				}
			}
			texts := 0
			for {
				typ, b, err := ws.ReadMessage()
				if err != nil {
					var ce *websocket.CloseError
					if !errors.As(err, &ce) || ce.Code != websocket.CloseInvalidFramePayloadData {
						t.Fatalf("got %v, want close 1007", err)
					}
					break
				}
				if typ == websocket.TextMessage && !utf8.Valid(b) {
					t.Fatalf("the gateway sent a text frame that is not UTF-8: %q", b)
				}
				texts++
			}
			if want := len(tc.first); texts != want {
				t.Errorf("got %d text messages before the close, want %d (initialize's result only; nothing behind the bad message)", texts, want)
			}
		})
	}
}
