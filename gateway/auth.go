package gateway

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"

	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/proto"
)

// This file finds who is asking: the token of a request (Authorization: Bearer, the cookie,
// a share link's subprotocol or header, the cluster token of another node's relay), its
// principal, and the checks an upgrade passes before it is served.

// bearer reports whether an Authorization header uses the Bearer scheme.
func bearer(h string) bool {
	scheme, _, _ := strings.Cut(h, " ")
	return strings.EqualFold(scheme, "Bearer")
}

// errNoSubprotocol is the refusal of an upgrade that offers no subprotocol we speak.
const errNoSubprotocol = "unsupported subprotocol; supported: " + proto.Subprotocol

// auth turns ?token= into the HttpOnly cookie and redirects to a clean URL, so the token
// does not stay in the address bar.
func (g *Gateway) auth(c echo.Context) error {
	if !g.hostAllowed(c.Request().Host) { // DNS rebinding: never set a cookie for a foreign name
		refuse(c.Response(), http.StatusForbidden, "host not allowed")
		return nil
	}
	tok := c.QueryParam("token")
	if _, ok := g.principal(tok); !ok {
		if c.Request().Header.Get("Sec-Fetch-Mode") == "navigate" && g.opts.Frontend != nil {
			// A person opened an old sign-in URL (the gateway restarted with a new token): the
			// UI explains how to sign in, rather than a bare 401.
			c.Response().Header().Set("Cache-Control", "no-store")
			c.Response().Header().Set("Referrer-Policy", "no-referrer")
			return c.Redirect(http.StatusSeeOther, g.opts.BasePath+"?signin=invalid")
		}
		refuse(c.Response(), http.StatusUnauthorized, "invalid token")
		return nil
	}
	c.SetCookie(&http.Cookie{Name: g.cookie, Value: tok, Path: g.opts.BasePath, HttpOnly: true,
		Secure: g.opts.TLS, SameSite: http.SameSiteStrictMode})
	c.Response().Header().Set("Cache-Control", "no-store")
	c.Response().Header().Set("Referrer-Policy", "no-referrer")
	return c.Redirect(http.StatusSeeOther, g.opts.BasePath)
}

// authCheck answers 204 when the request carries a valid token (the cookie, or a bearer
// header) and 401 when it does not. The UI asks it when its WebSocket fails, since a refused
// upgrade is only a close event to a page: 401 here means "sign in", anything else "the gateway
// is down". It reveals nothing /auth?token= does not, and a cookie needs no Origin here (a
// same-origin GET carries none; SameSite=Strict keeps other sites' requests without the cookie).
func (g *Gateway) authCheck(c echo.Context) error {
	h := c.Response().Header()
	h.Set("Cache-Control", "no-store")
	if !g.hostAllowed(c.Request().Host) {
		refuse(c.Response(), http.StatusForbidden, "host not allowed")
		return nil
	}
	// A share page names its link's token in a header of its own, which neither a cookie nor a
	// proxy's Basic Authorization can stand in for.
	tok := c.Request().Header.Get(HeaderShareToken)
	if a := c.Request().Header.Get("Authorization"); tok == "" && a != "" && bearer(a) {
		_, rest, _ := strings.Cut(a, " ")
		tok = strings.TrimSpace(rest)
	} else if ck, err := c.Request().Cookie(g.cookie); tok == "" && err == nil {
		tok = ck.Value
	}
	p, ok := g.authenticate(tok)
	if !ok {
		refuse(c.Response(), http.StatusUnauthorized, "missing or invalid token")
		return nil
	}
	if p.share != nil { // the share page learns whether it may type
		mode := "read-only"
		if p.share.write {
			mode = "read-write"
		}
		h.Set(HeaderShare, mode)
	}
	return c.NoContent(http.StatusNoContent)
}

// authenticate finds the principal of tok: a configured token's, or a live share link's (a
// principal confined to the link's session, read-only unless the link grants writing).
func (g *Gateway) authenticate(tok string) (Principal, bool) {
	if p, ok := g.principal(tok); ok {
		return p, true
	}
	if s, ok := g.shares.lookup(tok); ok {
		return Principal{Name: "share-" + s.id[:12], ReadOnly: !s.write, ViewOf: s.owner, share: s}, true
	}
	return Principal{}, false
}

// shareToken is the token a browser's upgrade carries as a subprotocol (muxterm.share.<token>).
func shareToken(r *http.Request) string {
	for _, sp := range websocket.Subprotocols(r) {
		if t, ok := strings.CutPrefix(sp, proto.SubprotocolSharePrefix); ok {
			return t
		}
	}
	return ""
}

// principal finds the token's principal in constant time per token.
func (g *Gateway) principal(tok string) (Principal, bool) {
	if tok == "" {
		return Principal{}, false
	}
	var found Principal
	ok := 0
	for t, p := range g.opts.Tokens {
		if subtle.ConstantTimeCompare([]byte(t), []byte(tok)) == 1 {
			found, ok = p, 1
		}
	}
	return found, ok == 1
}

// refuse writes an error and closes the connection, so nothing pipelined behind a refused
// request is served.
func refuse(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Connection", "close")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	if msg == errNoSubprotocol {
		h.Set("Sec-WebSocket-Protocol", proto.Subprotocol) // name what we speak
	}
	w.WriteHeader(status)
	_, _ = fmt.Fprintln(w, msg)
}

// checkUpgrade authenticates an upgrade and checks Host, Origin and the subprotocol. It
// returns the principal, or the status and message of the refusal.
func (g *Gateway) checkUpgrade(r *http.Request) (Principal, int, string) {
	if !g.hostAllowed(r.Host) {
		return Principal{}, http.StatusForbidden, "host not allowed"
	}
	origin := r.Header.Get("Origin")
	if origin != "" && !g.originAllowed(origin, r.Host) {
		return Principal{}, http.StatusForbidden, "origin not allowed"
	}
	// A page opened from a share link offers the link's token as a subprotocol: it is what the
	// page asks to be, whatever cookie the browser also holds for this gateway, or whatever
	// Authorization a proxy in front adds (Basic).
	tok := shareToken(r)
	ck, ckErr := r.Cookie(g.cookie)
	h := r.Header.Get("Authorization")
	switch {
	case tok != "":
	case h != "" && (ckErr != nil || bearer(h)):
		// A browser behind a proxy with its own (Basic) auth sends that header too: then the
		// cookie counts.
		if !bearer(h) {
			return Principal{}, http.StatusUnauthorized, "authorization must be Bearer"
		}
		_, rest, _ := strings.Cut(h, " ")
		tok = strings.TrimSpace(rest)
	case ckErr == nil:
		if origin == "" {
			// A cookie is sent by browsers, which always send Origin on a WebSocket upgrade.
			return Principal{}, http.StatusForbidden, "cookie without Origin"
		}
		tok = ck.Value
	}
	p, ok := g.authenticate(tok)
	if rp, relay, why := g.relayPrincipal(r, tok); relay {
		if why != "" {
			return Principal{}, http.StatusBadRequest, why
		}
		p, ok = rp, true
	}
	if !ok {
		return Principal{}, http.StatusUnauthorized, "missing or invalid token"
	}
	if !websocket.IsWebSocketUpgrade(r) {
		return Principal{}, http.StatusBadRequest, "not a websocket upgrade"
	}
	if !slices.Contains(websocket.Subprotocols(r), proto.Subprotocol) {
		return Principal{}, http.StatusBadRequest, errNoSubprotocol
	}
	return p, 0, ""
}

// relayPrincipal: a socket that presents the cluster token is another node's relay, acting for
// the principal it names. The owner then checks ownership as for that principal's own socket.
func (g *Gateway) relayPrincipal(r *http.Request, tok string) (Principal, bool, string) {
	ct := g.opts.ClusterToken
	if ct == "" || subtle.ConstantTimeCompare([]byte(ct), []byte(tok)) != 1 {
		return Principal{}, false, ""
	}
	name := r.Header.Get(proto.HeaderOnBehalfOf)
	if err := validPrincipalName(name); err != nil {
		return Principal{}, true, "cluster token without a valid " + proto.HeaderOnBehalfOf
	}
	var lease time.Duration
	if v := r.Header.Get(proto.HeaderRelayLease); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < mux.MinRelayLease.Milliseconds() || ms > mux.MaxRelayLease.Milliseconds() {
			return Principal{}, true, fmt.Sprintf("%s: want milliseconds from %d to %d", proto.HeaderRelayLease,
				mux.MinRelayLease.Milliseconds(), mux.MaxRelayLease.Milliseconds())
		}
		lease = time.Duration(ms) * time.Millisecond
	}
	// Name is the relay's, so relays do not count against the principal's own socket bound;
	// ViewOf makes Owner() the principal it acts for.
	return Principal{Name: relayPrincipalName, ViewOf: name, ReadOnly: r.Header.Get(proto.HeaderReadOnly) == "1",
		relayLease: lease}, true, ""
}

// relayPrincipalName names the sockets of other nodes' relays (logs, the socket bound).
const relayPrincipalName = "cluster-relay"
