package mux

import (
	"testing"

	"github.com/muxterm/muxterm/internal/testutil/rawmux"
)

// A control reply on a slow link waits behind a bounded amount of output: what the gateway
// hands to the kernel ahead of it is bounded (TCP_NOTSENT_LOWAT), not the whole send buffer.
// The bound is in bytes, counted off the link, so a loaded host cannot break
// it: about 16 KiB unsent + the 32 KiB frame being written + the client's window; without the
// bound the reply waits behind the three channels' credit (768 KiB).
func TestReplyLatencyOnSlowLink(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	const limit = 3 * rawmux.SlowLinkRate // 3 s of the link
	r := rawmux.ReplyOnSlowLink(t, s.url, nil, limit)
	t.Logf("session.open reply behind %d bytes of output, after %v, with three flooding channels at %d KB/s",
		r.Ahead, r.Took, rawmux.SlowLinkRate>>10)
	if r.Cut {
		t.Errorf("session.open reply behind more than %d bytes of output (%v) on a %d KB/s link",
			limit, r.Took, rawmux.SlowLinkRate>>10)
	}
}
