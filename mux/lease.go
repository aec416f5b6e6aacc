package mux

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// Bounds of a relay's requested lease (ServerOptions.RelayLease).
const (
	MinRelayLease = 50 * time.Millisecond
	MaxRelayLease = time.Hour
)

// lease fences a relay's socket (docs/protocol.md §1, "At most once"): the socket's messages
// are taken only while the lease holds. The lease is granted by pings this side sends, each
// carrying its send time on this side's monotonic clock; the pong of a ping sent at t extends
// the lease to t + d. Because t is when the ping left, not when its pong was read, a pong that
// waited in a buffer (this process stopped, a socket stuck) extends nothing that has passed, and
// the relay, which got the ping after t, knows this side takes nothing of its socket after its
// own receipt time + d: until then it does not answer node_lost.
//
// start and d are immutable; expiry is owned by readLoop (the pong handler runs in it).
type lease struct {
	d      time.Duration
	start  time.Time
	expiry time.Duration // since start; 0: no pong yet, nothing is taken
}

func newLease(d time.Duration) *lease { return &lease{d: d, start: time.Now()} }

// ping is the payload of a lease ping sent at now.
func (l *lease) ping(now time.Time) []byte {
	return fmt.Appendf(nil, "%s%d", proto.LeasePing, now.Sub(l.start).Nanoseconds())
}

// renew extends the lease by a pong's payload; a payload that is not a lease ping's, or names a
// time still to come, extends nothing.
func (l *lease) renew(data string, now time.Time) {
	rest, ok := strings.CutPrefix(data, proto.LeasePing)
	if !ok {
		return
	}
	ns, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || ns < 0 || time.Duration(ns) > now.Sub(l.start) {
		return
	}
	if e := time.Duration(ns) + l.d; e > l.expiry {
		l.expiry = e
	}
}

// holds reports whether the lease holds at now.
func (l *lease) holds(now time.Time) bool { return now.Sub(l.start) < l.expiry }

// leasePeriod is the interval of lease pings: five per lease, so four may be late or lost
// before the lease lapses on a healthy socket.
func (l *lease) period() time.Duration { return l.d / 5 }

// leaseLoop sends a lease ping every period, from its own goroutine so that a writer busy with
// output never delays one (WriteControl may be called beside the writer). It ends with the
// connection.
func (c *conn) leaseLoop() {
	t := time.NewTicker(c.lease.period())
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-c.ctx.Done():
			return
		}
		if err := c.leasePing(); err != nil {
			c.fail(fmt.Errorf("lease ping: %w", err))
			return
		}
	}
}

func (c *conn) leasePing() error {
	return c.ws.WriteControl(websocket.PingMessage, c.lease.ping(time.Now()), time.Now().Add(c.opts.WriteWait))
}

// fenced reports whether the socket is a relay's whose lease has lapsed; it then closes the
// socket, discarding whatever the relay sent that was not taken: the relay may already have
// told its client node_lost, and input it sent must not run after that.
func (c *conn) fenced() bool {
	if c.lease == nil || c.lease.holds(time.Now()) {
		return false
	}
	c.log.Warn("relay socket: its lease lapsed (no pong of a ping sent within the lease); what it sent is discarded and the socket closed",
		"lease", c.lease.d)
	c.closeWith(websocket.ClosePolicyViolation, "relay lease lapsed")
	return true
}

// tookInput tells a leased relay that an input frame of n bytes on channel num was taken off
// the socket (applied or refused), so it stops counting it against its queue toward this node.
func (c *conn) tookInput(num uint32, n int) {
	if c.lease == nil {
		return
	}
	c.send(proto.MarshalNotification(proto.MethodRelayInput, proto.RelayInputParams{Channel: num, Bytes: int64(n)}))
}
