package gateway

import (
	"net/http"

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
		g.log.Info("upgrade refused", "status", status, "reason", "not GET /ws", "remote", r.RemoteAddr)
		refuse(c.Response(), status, why)
		return nil
	}
}
