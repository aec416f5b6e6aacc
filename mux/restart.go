package mux

import (
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// MethodRestart is the notification a socket gets before it is closed with 1012 for an upgrade
// in place. Its sessions keep running; the client reconnects and re-attaches each channel from
// its offset within params.resumeHoldMs.
const MethodRestart = "gateway.restart"

// CloseServiceRestart is the close code of an upgrade in place (RFC 6455 §7.4.1 registry: 1012
// service restart).
const CloseServiceRestart = 1012

// restartParams are gateway.restart's params.
type restartParams struct {
	ResumeHoldMs int64 `json:"resumeHoldMs"`
}

// restartFlush writes what is queued, the gateway.restart notification, then closes with 1012.
// Unlike shutdownFlush it tells no channel it is closed: every session lives on in the next
// image, and detachAll leaves each read-write channel's resume hold behind.
func (c *conn) restartFlush() {
	_ = c.flushControl()
	_ = c.write(websocket.TextMessage, proto.MarshalNotification(MethodRestart,
		restartParams{ResumeHoldMs: c.resumeHoldMs()}))
	_ = c.ws.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(CloseServiceRestart, "gateway restarting"),
		time.Now().Add(c.opts.WriteWait))
}
