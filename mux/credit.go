package mux

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// errAckOverflow reports an ack for more bytes than are in flight on the
// channel. The caller answers it with ErrBadFrame (id null) and keeps going:
// it is the peer's fault, not a broken invariant (protocol.md §2).
var errAckOverflow = errors.New("mux: ack exceeds the bytes in flight")

// credit counts bytes a channel may still send: window minus bytes in flight
// (sent and not yet acknowledged), as in protocol.md §3.
//
// It is shared by exactly two goroutines: the write loop calls take once it has
// taken output from the viewer and before it writes it, and the read loop calls
// give when an ack arrives. Both use
// compare-and-swap on inflight, so neither ever blocks the other, and
// available may be called from anywhere. The invariant 0 <= inflight <= window
// holds at every step: take panics rather than exceed it (a writer bug, like
// the overflow panic in http2's flow.go) and give refuses rather than go below
// zero (a misbehaving peer).
type credit struct {
	window int64 // immutable after newCredit; > 0

	inflight atomic.Int64 // bytes sent and not yet acked; 0..window
}

// newCredit returns the credit of a fresh channel: nothing in flight, the
// whole window available. window must be positive; the multiplexer validates
// its configuration before any channel exists, so a bad window is a bug.
func newCredit(window int64) *credit {
	if window <= 0 {
		panic(fmt.Sprintf("mux: credit window %d, want > 0", window))
	}
	return &credit{window: window}
}

// available returns how many more payload bytes the channel may send now:
// window - inflight, never negative. A concurrent give can only make it grow.
func (c *credit) available() int64 {
	return max(c.window-c.inflight.Load(), 0)
}

// take records that the writer is about to send n payload bytes. The writer
// must never send more than available() allows, so n < 0 or n > available() is a broken
// invariant and panics.
func (c *credit) take(n int64) {
	for {
		cur := c.inflight.Load()
		if n < 0 || n > c.window-cur {
			panic(fmt.Sprintf("mux: credit take %d with %d of %d in flight", n, cur, c.window))
		}
		if c.inflight.CompareAndSwap(cur, cur+n) {
			return
		}
	}
}

// give records that the peer acknowledged n payload bytes. An ack for more
// than is in flight (or a negative count) returns errAckOverflow itself, not
// wrapped, and changes nothing; the peer is wrong, the channel goes on.
func (c *credit) give(n int64) error {
	for {
		cur := c.inflight.Load()
		if n < 0 || n > cur {
			return errAckOverflow
		}
		if c.inflight.CompareAndSwap(cur, cur-n) {
			return nil
		}
	}
}
