package mux

import (
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// restartFlush writes what is queued, the gateway.restart notification, then closes with 1012.
// Unlike shutdownFlush it tells no channel it is closed: every session lives on in the next
// image, and detachAll leaves each read-write channel's resume hold behind.
func (c *conn) restartFlush() {
	_ = c.flushControl()
	_ = c.write(websocket.TextMessage, proto.MarshalNotification(proto.MethodRestart,
		proto.RestartParams{ResumeHoldMs: c.resumeHoldMs()}))
	_ = c.ws.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(proto.CloseServiceRestart, "gateway restarting"),
		time.Now().Add(c.opts.WriteWait))
}
