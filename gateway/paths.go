package gateway

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
)

// wsPath is the one path that upgrades.
const wsPath = "/ws"

// upgradeOnlyAtWS runs before routing: a WebSocket upgrade request for anything but exactly
// GET /ws (any other spelling: /ws/, /WS, /%77s, //ws, ...; any other method) is refused with
// 404 or 405 and Connection: close, so nothing pipelined behind it is served and no route but
// serveWS ever sees an upgrade. The path is not logged: it may hold anything, a token included.
func (g *Gateway) upgradeOnlyAtWS(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !websocket.IsWebSocketUpgrade(r) {
			return next(c)
		}
		exact := r.URL.Path == wsPath && (r.URL.RawPath == "" || r.URL.RawPath == wsPath)
		if exact && r.Method == http.MethodGet {
			return next(c)
		}
		status, why := http.StatusNotFound, "not found: WebSocket upgrades are served at GET /ws only"
		if exact {
			status, why = http.StatusMethodNotAllowed, "method not allowed: WebSocket upgrades are served at GET /ws only"
			c.Response().Header().Set("Allow", http.MethodGet)
		}
		g.log.Info("websocket refused", "status", status, "reason", "not GET /ws", "remote", r.RemoteAddr)
		refuse(c.Response(), status, why)
		return nil
	}
}

// NormBasePath checks a --base-path and returns it with one leading and one trailing slash
// ("term" and "/term" are "/term/"; "" and "/" are "/"). It may hold path segments of
// letters, digits and "-._~" only: no "..", no query, nothing to escape.
func NormBasePath(p string) (string, error) {
	p = "/" + strings.Trim(p, "/") + "/"
	if p == "//" {
		return "/", nil
	}
	for _, seg := range strings.Split(strings.Trim(p, "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", errors.New("a path of segments such as /term/ (no empty, . or .. segment)")
		}
		for _, r := range seg {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~", r)) {
				return "", errors.New("a path of letters, digits and -._~ such as /term/")
			}
		}
	}
	return p, nil
}

// underBase serves a gateway mounted at a base path other than "/": the base without its
// slash redirects to the base, a path under it reaches the routes with the base taken off
// (/term/ws is /ws), and anything else is not found, with Connection: close.
func underBase(base string, next http.Handler) http.Handler {
	trimmed := strings.TrimSuffix(base, "/")
	strip := http.StripPrefix(trimmed, next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == trimmed && r.Method == http.MethodGet:
			http.Redirect(w, r, base, http.StatusPermanentRedirect)
		case strings.HasPrefix(r.URL.Path, base) && (r.URL.RawPath == "" || strings.HasPrefix(r.URL.RawPath, base)):
			strip.ServeHTTP(w, r)
		default:
			refuse(w, http.StatusNotFound, "not found: this gateway serves under "+base)
		}
	})
}
