package mux

import (
	"encoding/json"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// TestBadFrameOnAKnownChannelNamesIt: an unknown frame type, an ack whose payload is not 4 bytes
// and a client-sent output frame on a bound channel are bad_frame errors carrying data.channel
// (protocol.md §2); on channel 0, or a channel not bound, there is no channel to name.
func TestBadFrameOnAKnownChannelNamesIt(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	ws := rawDial(t, s)
	for _, m := range []string{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,
		`{"jsonrpc":"2.0","id":2,"method":"session.open","params":{"channel":7,"cmd":["sleep","60"],"cols":80,"rows":24}}`} {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	for opened := false; !opened; {
		_, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			ID     json.RawMessage
			Result json.RawMessage
		}
		opened = json.Unmarshal(b, &r) == nil && string(r.ID) == "2" && r.Result != nil
	}
	for _, tc := range []struct {
		name    string
		frame   []byte
		channel any // float64 from JSON, or nil for none
	}{
		{"unknown type on a bound channel", proto.AppendFrame(nil, 9, 7, []byte("x")), float64(7)},
		{"ack of 3 bytes on a bound channel", proto.AppendFrame(nil, proto.FrameAck, 7, []byte{0, 0, 1}), float64(7)},
		{"output frame on a bound channel", proto.AppendFrame(nil, proto.FrameOutput, 7, []byte("x")), float64(7)},
		{"stderr frame on a bound channel", proto.AppendFrame(nil, proto.FrameStderr, 7, []byte("x")), float64(7)},
		{"unknown type on channel 0", proto.AppendFrame(nil, 9, 0, nil), nil},
		{"unknown type on an unbound channel", proto.AppendFrame(nil, 9, 8, nil), nil},
		{"short frame", []byte{proto.FrameAck, 0, 0}, nil},
	} {
		if err := ws.WriteMessage(websocket.BinaryMessage, tc.frame); err != nil {
			t.Fatal(err)
		}
		var r struct {
			ID    json.RawMessage
			Error *struct {
				Data map[string]any
			}
		}
		for r.Error == nil {
			typ, b, err := ws.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			if typ == websocket.TextMessage {
				_ = json.Unmarshal(b, &r)
			}
		}
		if string(r.ID) != "null" || r.Error.Data["kind"] != "bad_frame" {
			t.Errorf("%s: got id %s, data %v; want id null, kind bad_frame", tc.name, r.ID, r.Error.Data)
		}
		if got := r.Error.Data["channel"]; got != tc.channel {
			t.Errorf("%s: data.channel %v, want %v", tc.name, got, tc.channel)
		}
	}
}
