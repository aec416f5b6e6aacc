package mux

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/muxterm/muxterm/proto"
)

// TestRefusalsCoalesceWhileQueued: refusals of one kind on one channel join the one that waits
// in the queue, counting frames and bytes; another channel or another reason gets its own; once
// the writer has taken the queue, the next refusal is a new message.
func TestRefusalsCoalesceWhileQueued(t *testing.T) {
	c := &conn{ctx: context.Background(), wake: make(chan struct{}, 1)}
	frame := func(ch uint32, payload int) []byte {
		b := make([]byte, proto.HeaderLen+payload)
		b[0] = byte(proto.FrameInput)
		binary.BigEndian.PutUint32(b[1:], ch)
		return b
	}
	rate := withChannel(proto.ErrLimitExceeded("inputRate", "over"), 1)
	queue := withChannel(proto.ErrLimitExceeded("inputQueue", "full"), 1)
	for range 100 {
		c.refuseFrame(frame(1, 1024), 1024, rate)
	}
	c.refuseFrame(frame(1, 10), 10, queue)
	c.refuseFrame(frame(2, 5), 5, withChannel(proto.ErrLimitExceeded("inputRate", "over"), 2))
	c.refuseFrame(frame(1, 1024), 1024, rate)

	type data struct {
		Limit   string `json:"limit"`
		Channel uint32 `json:"channel"`
		Frames  int    `json:"frames"`
		Bytes   int64  `json:"bytes"`
	}
	taken := func() []data {
		c.mu.Lock()
		msgs := c.ctrl
		c.ctrl = nil
		clear(c.refusals)
		c.mu.Unlock()
		var out []data
		for _, m := range msgs {
			var r struct {
				Error struct {
					Data data `json:"data"`
				} `json:"error"`
			}
			if err := json.Unmarshal(m.ref.message(), &r); err != nil {
				t.Fatal(err)
			}
			out = append(out, r.Error.Data)
		}
		return out
	}
	got := taken()
	want := []data{{"inputRate", 1, 101, 101 * 1024}, {"inputQueue", 1, 1, 10}, {"inputRate", 2, 1, 5}}
	if len(got) != len(want) {
		t.Fatalf("got %d messages %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("message %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	c.refuseFrame(frame(1, 7), 7, rate)
	if got := taken(); len(got) != 1 || got[0] != (data{"inputRate", 1, 1, 7}) {
		t.Errorf("after the writer took the queue: got %+v, want one new refusal of 1 frame, 7 bytes", got)
	}
}
