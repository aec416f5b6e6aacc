package mux

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// A client that floods requests without reading the responses is closed with 1008, and the
// close frame reaches it although it goes on sending: the gateway shuts its side down after the
// close frame and drains what the client sends, instead of closing a socket with unread input,
// which resets the connection and can discard the close frame (the client saw 1006).
//
// On a loaded machine one run in several may still end in a reset (seen once in 5 runs with
// other test binaries competing for both CPUs, never alone in 30): the test wants the close in
// all but one run and logs the exception, so a regression to the old behaviour (4 of 5 reset)
// fails it.
func TestFloodedSocketSees1008(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	resets := 0
	defer func() {
		if resets > 1 {
			t.Errorf("%d of 5 runs ended in a reset instead of close 1008, want at most 1", resets)
		}
	}()
	for run := range 5 {
		nd := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<10)
			})
		}}
		d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}, NetDialContext: nd.DialContext}
		ws, _, err := d.Dial(s.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		sent := make(chan int, 1)
		go func() {
			// Requests, never reading, until the gateway stops taking them.
			n := 0
			_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`))
			for ; n < 20000; n++ {
				_ = ws.SetWriteDeadline(time.Now().Add(2 * time.Second))
				if err := ws.WriteMessage(websocket.TextMessage,
					[]byte(`{"jsonrpc":"2.0","id":`+strconv.Itoa(n+1)+`,"method":"session.list","params":{}}`)); err != nil {
					break
				}
			}
			sent <- n
		}()
		var n int
		start := time.Now()
		select {
		case n = <-sent:
		case <-time.After(20 * time.Second):
			t.Fatal("the flood did not stop")
		}
		// Now read everything, as a client that was merely slow would.
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		read := 0
		for {
			if _, _, err = ws.ReadMessage(); err != nil {
				break
			}
			read++
		}
		ws.Close()
		if read > n {
			// The gateway kept up (the kernel's buffers held every response): no close to see.
			t.Logf("run %d: all %d responses read, the gateway kept up", run, n)
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation {
			resets++
			t.Logf("run %d: after %d requests sent in %v and %d messages read: got %v, want close 1008", run, n, time.Since(start), read, err)
		} else {
			t.Logf("run %d: %d requests sent in %v, %d messages read, then %v", run, n, time.Since(start), read, err)
		}
	}
}
