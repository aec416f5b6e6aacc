//go:build e2e

package e2e

import (
	bin "encoding/binary"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// TestRefusedInputBurstKeepsAReadingClient streams 4 MiB of input in 1 KiB frames, four times
// the input rate's burst, from a client that reads every message but only one per 2 ms (a slow
// link, a busy page). Each frame past the rate, or past what the program has read, is refused;
// the refusals of one burst coalesce
// into one error whose data.frames and data.bytes count them, so the client is never closed for
// responses the gateway itself queued, and what the refusals did not count reached the
// program, byte for byte (the program, in raw mode, copies its input to its output).
func TestRefusedInputBurstKeepsAReadingClient(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "sh")
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}, HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial(g.WS, http.Header{"Authorization": {"Bearer " + g.Token}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.Close()
	var writeMu sync.Mutex // gorilla allows one writer at a time: the input goroutine and the acks
	write := func(typ int, b []byte) error {
		writeMu.Lock()
		defer writeMu.Unlock()
		return ws.WriteMessage(typ, b)
	}
	send := func(method string, id int, params any) {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		if err := write(websocket.TextMessage, b); err != nil {
			t.Fatal(err)
		}
	}
	send("initialize", 1, map[string]any{})
	send("session.open", 2, map[string]any{"channel": 1, "cols": 80, "rows": 24,
		"cmd": []string{"sh", "-c", "stty raw -echo && echo READY && exec cat"}})

	type message struct {
		typ int
		b   []byte
		err error
	}
	msgs := make(chan message, 64)
	go func() { // the reader: every message, one per 2 ms; ends when the socket does
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
			typ, b, err := ws.ReadMessage()
			msgs <- message{typ, b, err}
			if err != nil {
				close(msgs)
				return
			}
			<-tick.C
		}
	}()

	const frames, frameBytes = 4096, 1024
	var (
		output, refusedFrames, refusedBytes, refusals int
		ready, sent                                   bool
		writeErr                                      = make(chan error, 1)
	)
	ack := func(n int) {
		f := make([]byte, proto.HeaderLen+4)
		f[0] = byte(proto.FrameAck)
		bin.BigEndian.PutUint32(f[1:], 1)
		bin.BigEndian.PutUint32(f[proto.HeaderLen:], uint32(n))
		if err := write(websocket.BinaryMessage, f); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(60 * time.Second)
	for {
		if sent && output == frames*frameBytes-refusedBytes {
			break
		}
		var m message
		select {
		case m = <-msgs:
		case err := <-writeErr:
			if err != nil {
				t.Fatalf("input: %v", err)
			}
			writeErr = nil
			sent = true
			continue
		case <-deadline:
			t.Fatalf("after 60 s: output %d bytes, want %d - %d refused (%d frames in %d errors)",
				output, frames*frameBytes, refusedBytes, refusedFrames, refusals)
		}
		if m.err != nil {
			t.Fatalf("read: %v (output %d bytes, want %d - %d refused; %d refusal errors for %d frames); the gateway's log:\n%s",
				m.err, output, frames*frameBytes, refusedBytes, refusals, refusedFrames, g.Logs())
		}
		if m.typ == websocket.BinaryMessage {
			n := len(m.b) - proto.HeaderLen
			if !ready {
				// READY comes before the program reads input; it is not input's echo (raw
				// mode: no output processing, so its newline is a bare \n).
				if string(m.b[proto.HeaderLen:]) != "READY\n" {
					t.Fatalf("first output %q, want READY\\n", m.b[proto.HeaderLen:])
				}
				n = 0
				ready = true
				go func() { // the writer: every frame at once
					f := make([]byte, proto.HeaderLen+frameBytes)
					f[0] = byte(proto.FrameInput)
					bin.BigEndian.PutUint32(f[1:], 1)
					for i := range frames {
						for j := proto.HeaderLen; j < len(f); j++ {
							f[j] = 'a' + byte(i%26)
						}
						if err := write(websocket.BinaryMessage, f); err != nil {
							writeErr <- err
							return
						}
					}
					writeErr <- nil
				}()
			}
			output += n
			ack(len(m.b) - proto.HeaderLen)
			continue
		}
		var r struct {
			ID    *int         `json:"id"`
			Error *proto.Error `json:"error"`
		}
		if err := json.Unmarshal(m.b, &r); err != nil {
			t.Fatalf("bad message %q: %v", m.b, err)
		}
		if r.Error == nil {
			continue
		}
		// Past the rate (inputRate), or faster than the program reads (inputQueue).
		if limit := r.Error.Data["limit"]; r.ID != nil || r.Error.Kind() != "limit_exceeded" ||
			(limit != "inputRate" && limit != "inputQueue") {
			t.Fatalf("unexpected error %s", m.b)
		}
		refusals++
		fr, _ := r.Error.Data["frames"].(float64)
		by, _ := r.Error.Data["bytes"].(float64)
		if fr < 1 || by != fr*frameBytes || r.Error.Data["channel"] != float64(1) {
			t.Fatalf("refusal %s: want frames >= 1, bytes = frames × %d, channel 1", m.b, frameBytes)
		}
		refusedFrames += int(fr)
		refusedBytes += int(by)
	}
	if refusedFrames == 0 {
		t.Fatalf("no frame was refused: the input rate was never reached (%d bytes through)", output)
	}
	t.Logf("%d of %d frames refused, in %d errors; %d bytes reached the program", refusedFrames, frames, refusals, output)
	// How many refusals coalesce depends on how fast this reader takes them (the rule itself is
	// TestRefusalsCoalesceWhileQueued's): what matters here is that the socket stayed open and
	// every byte is accounted for.
}
