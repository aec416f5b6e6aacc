//go:build e2e

package e2e

import (
	binenc "encoding/binary"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// A session.open reply on a slow link, against the binary (issue 15 point 4; the same
// measurement as mux.TestReplyLatencyOnSlowLink, through the gateway's own listener and
// connection guard): a client that reads 40 KB/s through an 8 KiB receive buffer, three
// channels running yes, 2 s of backlog, then session.open. The gateway keeps at most 16 KiB
// unsent in its kernel (TCP_NOTSENT_LOWAT): the reply comes in well under 3 s (over 15 s
// before).
func TestReplyLatencyOnSlowLinkBinary(t *testing.T) {
	const rate, bound = 40 << 10, 3 * time.Second
	g := startGateway(t, "--allow-cmd", "*", "--max-input-rate", "0")
	nd := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<10)
		}); err != nil {
			return err
		}
		return serr
	}}
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}, NetDialContext: nd.DialContext,
		ReadBufferSize: 1024, HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial(g.WS, http.Header{"Authorization": {"Bearer " + g.Token}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var wmu sync.Mutex // requests here, acks in the reader
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
	reply := make(chan time.Time, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(time.Second * 1024 / rate) // the link's pace, 1 KiB a tick
		defer tick.Stop()
		buf := make([]byte, 1024)
		for {
			typ, r, err := ws.NextReader()
			if err != nil {
				return
			}
			var msg []byte
			for {
				select {
				case <-tick.C:
				case <-stop:
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
					binenc.BigEndian.PutUint32(a[:], uint32(len(f.Payload)))
					_ = write(websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameAck, f.Channel, a[:]))
				}
				continue
			}
			var m struct{ ID *int }
			if json.Unmarshal(msg, &m) == nil && m.ID != nil && *m.ID == 99 {
				reply <- time.Now()
				return
			}
		}
	}()
	time.Sleep(2 * time.Second) // the backlog builds at the link's speed: no event to wait for
	start := time.Now()
	send(`{"jsonrpc":"2.0","id":99,"method":"session.open","params":{"channel":9,"cols":80,"rows":24,"cmd":["true"]}}`)
	select {
	case at := <-reply:
		took := at.Sub(start)
		t.Logf("session.open reply after %v with three flooding channels at %d KB/s", took, rate>>10)
		if took >= bound {
			t.Errorf("session.open reply took %v on a %d KB/s link, want under %v", took, rate>>10, bound)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("no session.open reply within 15 s on a %d KB/s link", rate>>10)
	}
}
