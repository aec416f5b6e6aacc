// Package wstest runs loopback muxterm.v1 WebSocket servers for tests. Imported by _test.go
// files only.
package wstest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// Serve starts a loopback HTTP server that upgrades every request to a WebSocket of the
// muxterm.v1 subprotocol and runs handle on it (on the request's goroutine), and returns the
// server's ws:// URL. When the test ends it calls stop (nil for none), which must make every
// handle return, waits for them, and closes the server.
func Serve(t testing.TB, handle func(ws *websocket.Conn, r *http.Request), stop func()) string {
	t.Helper()
	up := websocket.Upgrader{Subprotocols: []string{proto.Subprotocol}}
	var wg sync.WaitGroup // handle calls
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		wg.Add(1)
		defer wg.Done()
		handle(ws, r)
	}))
	t.Cleanup(func() {
		if stop != nil {
			stop()
		}
		wg.Wait()
		hs.Close()
	})
	return "ws" + strings.TrimPrefix(hs.URL, "http")
}
