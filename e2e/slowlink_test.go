//go:build e2e

package e2e

import (
	"net/http"
	"testing"

	"github.com/muxterm/muxterm/internal/testutil/rawmux"
)

// A session.open reply on a slow link, against the binary (the same
// measurement as mux.TestReplyLatencyOnSlowLink, through the gateway's own listener and
// connection guard): a client that reads 40 KB/s through an 8 KiB receive buffer, three
// channels running yes, 32 KiB read, then session.open. The gateway keeps at most 16 KiB
// unsent in its kernel (TCP_NOTSENT_LOWAT): the reply comes behind well under 3 s of the
// link's output (behind the channels' whole credit, over 15 s, before).
func TestReplyLatencyOnSlowLinkBinary(t *testing.T) {
	g := startGateway(t, "--allow-cmd", "*", "--max-input-rate", "0")
	const limit = 3 * rawmux.SlowLinkRate // 3 s of the link
	r := rawmux.ReplyOnSlowLink(t, g.WS, http.Header{"Authorization": {"Bearer " + g.Token}}, limit)
	t.Logf("session.open reply behind %d bytes of output, after %v, with three flooding channels at %d KB/s",
		r.Ahead, r.Took, rawmux.SlowLinkRate>>10)
	if r.Cut {
		t.Errorf("session.open reply behind more than %d bytes of output (%v) on a %d KB/s link",
			limit, r.Took, rawmux.SlowLinkRate>>10)
	}
}
