package mux

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// slowLinkRate and slowLinkRcvBuf model a slow client link: a client that reads 40 KB/s
// through a small receive buffer (so the sender's kernel, not the client's, holds the backlog).
const (
	slowLinkRate   = 40 << 10
	slowLinkRcvBuf = 8 << 10
)

// replyLatencyOnSlowLink opens three flooding channels on a socket whose client reads at
// slowLinkRate, lets the backlog build for warm, then sends session.open and returns how long
// its reply took, giving up after limit (issue 15 point 4).
func replyLatencyOnSlowLink(t *testing.T, url string, warm, limit time.Duration) time.Duration {
	t.Helper()
	nd := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, slowLinkRcvBuf)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}, NetDialContext: nd.DialContext,
		ReadBufferSize: 1024}
	ws, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var wmu sync.Mutex // one writer at a time: requests here, acks in the reader
	write := func(typ int, b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return ws.WriteMessage(typ, b)
	}
	send := func(s string) {
		if err := write(websocket.TextMessage, []byte(s)); err != nil {
			t.Error(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	for ch := 1; ch <= 3; ch++ {
		send(`{"jsonrpc":"2.0","id":` + strconv.Itoa(10+ch) + `,"method":"session.open","params":{"channel":` +
			strconv.Itoa(ch) + `,"cols":80,"rows":24,"cmd":["yes","flood"]}}`)
	}
	replies := make(chan time.Time, 1)
	readErr := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Read at slowLinkRate: 1 KiB at a time, paced by a ticker (the link's speed, not a
		// synchronization), acknowledging every output frame.
		tick := time.NewTicker(time.Second * 1024 / slowLinkRate)
		defer tick.Stop()
		for {
			typ, r, err := ws.NextReader()
			if err != nil {
				readErr <- err
				return
			}
			var msg []byte
			buf := make([]byte, 1024)
			for {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
				n, err := r.Read(buf)
				msg = append(msg, buf[:n]...)
				if err != nil {
					break
				}
			}
			if typ == websocket.BinaryMessage {
				if f, err := proto.ParseFrame(msg); err == nil && f.Type == proto.FrameOutput {
					var a [4]byte
					binary.BigEndian.PutUint32(a[:], uint32(len(f.Payload)))
					_ = write(websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameAck, f.Channel, a[:]))
				}
				continue
			}
			var m struct {
				ID *int `json:"id"`
			}
			if json.Unmarshal(msg, &m) == nil && m.ID != nil && *m.ID == 99 {
				replies <- time.Now()
				return
			}
		}
	}()
	time.Sleep(warm) // the backlog builds at the link's speed: there is no event to wait for
	start := time.Now()
	send(`{"jsonrpc":"2.0","id":99,"method":"session.open","params":{"channel":9,"cols":80,"rows":24,"cmd":["true"]}}`)
	select {
	case at := <-replies:
		return at.Sub(start)
	case err := <-readErr:
		t.Fatalf("read: %v", err)
	case <-time.After(limit):
	}
	return limit
}

// A control reply on a slow link waits at most a small bound behind output: the output the
// gateway hands to the kernel ahead of it is bounded (TCP_NOTSENT_LOWAT), not the whole send
// buffer (issue 15 point 4).
func TestReplyLatencyOnSlowLink(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	const bound = 3 * time.Second
	took := replyLatencyOnSlowLink(t, s.url, 2*time.Second, 15*time.Second)
	t.Logf("session.open reply after %v with three flooding channels at %d KB/s", took, slowLinkRate>>10)
	if took >= bound {
		t.Errorf("session.open reply took %v on a %d KB/s link, want under %v", took, slowLinkRate>>10, bound)
	}
}
