package rawmux

import (
	"encoding/binary"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/proto"
)

// The slow link: a client that reads SlowLinkRate through a small receive buffer, so that the
// sender's kernel, not the client's, holds the backlog (the TCP_NOTSENT_LOWAT bound, mux/lowat.go).
const (
	SlowLinkRate   = 40 << 10
	slowLinkRcvBuf = 8 << 10
	// slowLinkWarm is how much output the client reads before it sends its request: enough
	// acknowledgements for the sender's kernel to have grown its send buffer, so a gateway that
	// does not bound what it leaves unsent there has filled it with the channels' whole credit.
	slowLinkWarm = 32 << 10
)

// SlowLinkResult is what a control reply waited behind on a slow link.
type SlowLinkResult struct {
	Ahead int           // bytes of output read between sending the request and reading its reply
	Took  time.Duration // the reply's latency: Ahead at SlowLinkRate, what a user feels
	// Cut reports that Ahead passed the caller's limit before the reply came: the client gave
	// up reading (Ahead is then just over the limit and Took is how long that took).
	Cut bool
}

// ReplyOnSlowLink dials url (with header, nil for none) through an 8 KiB receive buffer, opens
// three channels flooding output (yes), reads at SlowLinkRate acknowledging every frame, and
// once it has read slowLinkWarm bytes sends session.open and measures what its reply waited
// behind. It stops reading once more than limit bytes of output came ahead of the reply.
func ReplyOnSlowLink(t testing.TB, url string, header http.Header, limit int) SlowLinkResult {
	t.Helper()
	nd := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, slowLinkRcvBuf)
		}); err != nil {
			return err
		}
		return serr
	}}
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}, NetDialContext: nd.DialContext,
		ReadBufferSize: 1024, HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial(url, header)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	var wmu sync.Mutex // one writer at a time: requests here, acks in the reader
	write := func(typ int, b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return ws.WriteMessage(typ, b)
	}
	send := func(s string) {
		if err := write(websocket.TextMessage, []byte(s)); err != nil {
			t.Errorf("send: %v", err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	for ch := 1; ch <= 3; ch++ {
		send(`{"jsonrpc":"2.0","id":` + strconv.Itoa(10+ch) + `,"method":"session.open","params":{"channel":` +
			strconv.Itoa(ch) + `,"cols":80,"rows":24,"cmd":["yes","flood"]}}`)
	}

	// read counts the output bytes the reader has taken off the link; sentAt is read's value
	// when the request went out (-1 before).
	var read, sentAt atomic.Int64
	sentAt.Store(-1)
	warm := make(chan struct{})    // closed by the reader at slowLinkWarm bytes
	end := make(chan int64, 1)     // the reader's last sentAt-relative count, on the reply or the limit
	readErr := make(chan error, 1) // the reader's error, if the socket ends first
	stop := make(chan struct{})
	done := make(chan struct{})
	defer func() {
		close(stop)
		ws.Close()
		<-done
	}()
	go func() {
		defer close(done)
		// 1 KiB a tick: the link's pace, not a synchronization.
		tick := time.NewTicker(time.Second * 1024 / SlowLinkRate)
		defer tick.Stop()
		buf := make([]byte, 1024)
		for {
			typ, r, err := ws.NextReader()
			if err != nil {
				readErr <- err
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
					binary.BigEndian.PutUint32(a[:], uint32(len(f.Payload)))
					_ = write(websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameAck, f.Channel, a[:]))
				}
				n := read.Add(int64(len(msg)))
				if n >= slowLinkWarm && n-int64(len(msg)) < slowLinkWarm {
					close(warm)
				}
				if s := sentAt.Load(); s >= 0 && n-s > int64(limit) {
					end <- n - s
					return
				}
				continue
			}
			var m struct {
				ID *int `json:"id"`
			}
			if json.Unmarshal(msg, &m) == nil && m.ID != nil && *m.ID == 99 {
				end <- read.Load() - sentAt.Load()
				return
			}
		}
	}()

	// Deadlines only: each wait ends on its event, well before these on any host.
	warmFor := time.Duration(30*slowLinkWarm/SlowLinkRate) * time.Second
	select {
	case <-warm:
	case err := <-readErr:
		t.Fatalf("read before %d bytes of output: %v", slowLinkWarm, err)
	case <-time.After(warmFor):
		t.Fatalf("%d bytes of output not read within %v", slowLinkWarm, warmFor)
	}
	start := time.Now()
	sentAt.Store(read.Load())
	send(`{"jsonrpc":"2.0","id":99,"method":"session.open","params":{"channel":9,"cols":80,"rows":24,"cmd":["true"]}}`)
	replyFor := time.Duration(30*limit/SlowLinkRate) * time.Second
	select {
	case ahead := <-end:
		return SlowLinkResult{Ahead: int(ahead), Took: time.Since(start), Cut: ahead > int64(limit)}
	case err := <-readErr:
		t.Fatalf("read before the session.open reply: %v", err)
	case <-time.After(replyFor):
		t.Fatalf("no session.open reply nor %d bytes of output within %v", limit, replyFor)
	}
	return SlowLinkResult{}
}
