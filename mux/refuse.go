package mux

import (
	"encoding/binary"
	"maps"

	"github.com/muxterm/muxterm/proto"
)

// This file holds the coalescing of refusals of binary frames (protocol.md §5, "Refused
// frames"). A client that streams input past a limit gets one error per frame it sends; queued
// one message each, a burst of them outgrows maxQueuedCtrl before a client that reads at a
// modest pace can take them, and the socket would be closed for responses the gateway itself
// piled up. Instead, a refusal of a frame joins the refusal of the same kind for the same
// channel that is still queued (not yet taken by the writer): one error per burst, whose
// data.frames and data.bytes count every frame it stands for.

// refusalKey identifies the refusals that coalesce: the channel the frame named (0 when the
// header was short), the error's code and its data.limit (empty for errors without one).
type refusalKey struct {
	channel uint32
	code    int
	limit   string
}

// refusal is one queued error that stands for frames refused frames carrying bytes of payload.
// Its fields are guarded by conn.mu while it is in conn.refusals; once the writer has taken it
// out (with the queue, under conn.mu) only the writer reads it.
type refusal struct {
	err    *proto.Error
	frames int
	bytes  int64
}

// message marshals r with its counts, as the writer sends it.
func (r *refusal) message() []byte {
	data := make(map[string]any, len(r.err.Data)+2)
	maps.Copy(data, r.err.Data)
	data["frames"] = r.frames
	data["bytes"] = r.bytes
	return proto.MarshalResponse(nullID, nil, &proto.Error{Code: r.err.Code, Message: r.err.Message, Data: data})
}

// refuseFrame answers binary frame b (payload bytes of payload) with e, coalesced with a
// refusal of the same kind for the same channel that waits in the queue. A new refusal counts
// toward maxQueuedCtrl as any message does; one that joins a queued refusal queues nothing.
func (c *conn) refuseFrame(b []byte, payload int, e *proto.Error) {
	var key refusalKey
	if len(b) >= proto.HeaderLen {
		key.channel = binary.BigEndian.Uint32(b[1:proto.HeaderLen])
	}
	key.code = e.Code
	key.limit, _ = e.Data["limit"].(string)
	c.mu.Lock()
	if r := c.refusals[key]; r != nil {
		r.frames++
		r.bytes += int64(payload)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	r := &refusal{err: e, frames: 1, bytes: int64(payload)}
	c.enqueue(ctrlMsg{ref: r}, &key)
}
