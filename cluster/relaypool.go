package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/proto"
)

// relayPool holds the sockets this node's relays share: one per owner node, principal and access
// mode (the owner checks ownership as that principal, per socket), more once one holds as many
// channels as the owner takes per socket. A socket is dialled by the first relay that needs it
// and closed when its last relay lets it go; relays to the same owner then cost one descriptor,
// one client reader and one ack goroutine between them, and an attach after the first costs no
// dial. Its lease (docs/protocol.md §1, "At most once") is the socket's: when the owner fences
// it, every channel on it ends.
//
// mu guards socks and dialing; it is a leaf, held for no I/O.
type relayPool struct {
	mu      sync.Mutex
	socks   map[poolKey][]*relaySock
	dialing map[poolKey]chan struct{} // closed when the dial in progress for the key ends
}

// poolKey names the sockets that may be shared: the owner's URL (a restart that moves it is
// another key), the principal and the access mode the socket acts for.
type poolKey struct {
	url, principal string
	readOnly       bool
}

// relaySock is a socket to an owner that relays share (relayPool), with what they know of its
// lease on the owner (docs/protocol.md §1, "At most once"). The owner takes the socket's
// messages only within d of the send time of a lease ping whose pong it read; the relay answers
// each ping as it reads it, after the owner sent it, so the owner takes nothing from the socket
// after the relay's receipt of its latest ping + d. Until then the relay does not answer
// node_lost for a binding it ended itself (the owner stopped, the socket stuck): what it wrote
// may still be taken. A binding the owner's side ended (its close frame, end of stream or reset)
// takes nothing more at once.
//
// mu guards until, takenBytes and relays; the client's reader sets until and takenBytes, the
// relays read them. It is a leaf.
type relaySock struct {
	// immutable once dialled:
	d           time.Duration
	c           *client.Client
	key         poolKey
	maxChannels int // the owner's limits.maxChannels: channels this socket may carry

	users int // relays holding the socket (bound, or an attach in progress); guarded by relayPool.mu

	mu         sync.Mutex
	until      time.Time         // this node's clock: the owner takes nothing from the socket after it
	takenBytes map[uint32]int64  // per channel: input bytes the owner reported taking (relay.input)
	relays     map[uint32]*relay // the channels bound on the socket: their owner errors go there
}

// leaseMargin covers the difference of two hosts' clock rates over one lease (NTP slews by at
// most 500 ppm; this is 1 %).
func leaseMargin(d time.Duration) time.Duration { return d / 100 }

// maxPooledChannels bounds the channels of one pooled socket when the owner says nothing
// smaller (its limits.maxChannels).
const maxPooledChannels = mux.DefaultMaxChannels

// acquire returns a pooled socket to the owner at url for principal with room for one more
// channel, counted as taken; the caller binds its channel (bind) or gives it back (release).
// Concurrent acquires of a key wait for one dial instead of each dialling.
func (n *Node) acquire(ctx context.Context, url, principal string, readOnly bool) (*relaySock, error) {
	p := &n.pool
	key := poolKey{url, principal, readOnly}
	for {
		p.mu.Lock()
		for _, s := range p.socks[key] {
			if s.users < s.maxChannels && !s.ended() {
				s.users++
				p.mu.Unlock()
				return s, nil
			}
		}
		if wait := p.dialing[key]; wait != nil {
			p.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("relay: dial %s: %w", url, ctx.Err())
			}
		}
		if p.dialing == nil {
			p.dialing, p.socks = make(map[poolKey]chan struct{}), make(map[poolKey][]*relaySock)
		}
		done := make(chan struct{})
		p.dialing[key] = done
		p.mu.Unlock()

		s, err := n.dial(ctx, url, principal, readOnly)
		p.mu.Lock()
		delete(p.dialing, key)
		close(done)
		if err == nil {
			s.key, s.users = key, 1
			p.socks[key] = append(p.socks[key], s)
		}
		p.mu.Unlock()
		return s, err
	}
}

// release gives back one use of s, unbinding channel num from it when it was bound (0: none
// was); the last use closes the socket.
func (n *Node) release(s *relaySock, num uint32) {
	if num != 0 {
		s.mu.Lock()
		delete(s.relays, num)
		delete(s.takenBytes, num)
		s.mu.Unlock()
	}
	p := &n.pool
	p.mu.Lock()
	s.users--
	last := s.users == 0
	if last {
		socks := p.socks[s.key]
		for i, x := range socks {
			if x == s {
				p.socks[s.key] = append(socks[:i:i], socks[i+1:]...)
				break
			}
		}
		if len(p.socks[s.key]) == 0 {
			delete(p.socks, s.key)
		}
	}
	p.mu.Unlock()
	if last {
		s.c.Close()
	}
}

// bind routes the owner's id-less errors about channel num on s to r.
func (s *relaySock) bind(num uint32, r *relay) {
	s.mu.Lock()
	s.relays[num] = r
	s.mu.Unlock()
}

// ended reports whether the socket's client has ended (it is never handed out again).
func (s *relaySock) ended() bool {
	select {
	case <-s.c.Done():
		return true
	default:
		return false
	}
}

// onServerError hands an error the owner sent without a request id to the relay of the channel
// it names (data.channel: every error about a frame of a bound channel carries it); one that
// names none concerns no relayed channel.
func (s *relaySock) onServerError(e *proto.Error) {
	ch, ok := e.Channel()
	if !ok {
		return
	}
	s.mu.Lock()
	r := s.relays[ch]
	s.mu.Unlock()
	if r != nil {
		r.onServerError(e)
	}
}

// relayLease is the lease a relay asks of an owner: the heartbeat silence, so that a stopped
// owner's lease lapses about when its heartbeat is missed and node_lost is not later than before.
func (n *Node) relayLease() time.Duration { return n.silence() }

// pinged: the owner's lease ping arrived now (client reader; before its pong is written).
func (s *relaySock) pinged(data string) {
	if !strings.HasPrefix(data, proto.LeasePing) {
		return // a keepalive ping: it grants nothing
	}
	until := time.Now().Add(s.d + leaseMargin(s.d))
	s.mu.Lock()
	s.until = until
	s.mu.Unlock()
}

// notified handles the owner's relay.input notifications (client reader).
func (s *relaySock) notified(method string, params json.RawMessage) {
	if method != proto.MethodRelayInput {
		return
	}
	var p proto.RelayInputParams
	if json.Unmarshal(params, &p) != nil || p.Bytes < 0 {
		return
	}
	s.mu.Lock()
	if s.relays[p.Channel] != nil {
		s.takenBytes[p.Channel] += p.Bytes
	}
	s.mu.Unlock()
}

// taken is the input the owner reported taking of channel num.
func (s *relaySock) taken(num uint32) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takenBytes[num]
}

// fenceWait is how long, from now, the owner may still take what b's socket carries: 0 once
// the lease has lapsed or the owner's side ended the socket.
func (b *binding) fenceWait(now time.Time) time.Duration {
	if ownerEnded(b.c) {
		return 0
	}
	b.sock.mu.Lock()
	until := b.sock.until
	b.sock.mu.Unlock()
	return max(until.Sub(now), 0)
}

// ownerEnded reports whether c's socket was ended by the owner's side: a close frame, the end
// of the stream or a reset. Its owner then reads nothing more of it.
func ownerEnded(c *client.Client) bool {
	select {
	case <-c.Done():
	default:
		return false
	}
	err := c.Err()
	var ce *websocket.CloseError
	return errors.As(err, &ce) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}
