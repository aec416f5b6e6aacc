package gateway

import (
	"fmt"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	otelmetric "go.opentelemetry.io/otel/metric"

	"github.com/muxterm/muxterm/otel"
)

// DefaultMaxSockets bounds the sockets one principal holds at once.
const DefaultMaxSockets = 16

// socketLimit counts the sockets each principal holds. Its zero value is ready to use and it is
// safe for concurrent use; nothing blocks under its lock.
type socketLimit struct {
	// mu guards n (principal name → sockets held; absent means 0).
	mu sync.Mutex
	n  map[string]int
}

// acquire takes one of name's max sockets, or reports false if name holds max already.
func (l *socketLimit) acquire(name string, limit int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[name] >= limit {
		return false
	}
	if l.n == nil {
		l.n = make(map[string]int)
	}
	l.n[name]++
	return true
}

// release returns one socket of name, taken by a successful acquire.
func (l *socketLimit) release(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[name] <= 1 {
		delete(l.n, name)
		return
	}
	l.n[name]--
}

// held returns the sockets name holds, for tests.
func (l *socketLimit) held(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[name]
}

// maxSockets is the bound on one principal's sockets.
func (g *Gateway) maxSockets() int {
	if g.opts.MaxSockets <= 0 {
		return DefaultMaxSockets
	}
	return g.opts.MaxSockets
}

// admitSocket takes one of p's sockets for an upgrade that passed every other check, or
// refuses it with 429 Too Many Requests and Connection: close, naming the limit, and reports
// false. The caller releases the socket (g.socketsOf.release(p.Name)) when the socket ends.
// The count is per authenticated principal: a read-only viewer's sockets are its own, not its
// owner's.
func (g *Gateway) admitSocket(w http.ResponseWriter, r *http.Request, p Principal) bool {
	limit := g.maxSockets()
	if g.socketsOf.acquire(p.Name, limit) {
		return true
	}
	why := fmt.Sprintf("limit_exceeded: maxSockets: at most %d sockets per principal", limit)
	g.log.Info("websocket refused", "status", http.StatusTooManyRequests, "reason", "maxSockets",
		"principal", p.Name, "remote", r.RemoteAddr)
	g.tel.Instruments.UpgradesRejected.Add(r.Context(), 1,
		otelmetric.WithAttributes(attribute.String(otel.AttrReason, "maxSockets")))
	refuse(w, http.StatusTooManyRequests, why)
	return false
}
