package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/proto"
)

var _ mux.Remote = (*Node)(nil)

// List returns principal's sessions on the other live nodes, oldest first, each with its node.
func (n *Node) List(principal string) []proto.SessionInfo {
	n.mu.Lock()
	var es []Entry
	for _, e := range n.entries {
		if e.Principal != principal || e.Node == n.cfg.Name {
			continue
		}
		if _, ok := n.aliveLocked(e.Node); ok && n.currentLocked(e) {
			es = append(es, e)
		}
	}
	n.mu.Unlock()
	sort.Slice(es, func(i, j int) bool { return es[i].Created.Before(es[j].Created) })
	out := make([]proto.SessionInfo, 0, len(es))
	for _, e := range es {
		out = append(out, proto.SessionInfo{Session: e.ID, Name: e.Name, Node: e.Node,
			Created: e.Created.UTC().Format(time.RFC3339Nano)})
	}
	return out
}

// owner finds the live node that owns principal's session id and its URL. Whether principal may
// know the session exists is decided first: another principal's session, live or not, is
// mux.ErrNotRemote, as is one the directory does not know (the caller answers unknown_session,
// what a random id gets). Only then is a session of a lost node session_closed {reason:
// node_lost}.
func (n *Node) owner(ctx context.Context, principal, id string) (node, url string, err error) {
	e, ok := n.lookup(ctx, id)
	if !ok || e.Principal != principal || e.Node == n.cfg.Name {
		return "", "", mux.ErrNotRemote
	}
	// A node named by the directory but not heard from yet (this node just started) is waited
	// for, at most until it would be declared lost.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		n.mu.Lock()
		url, alive := n.aliveLocked(e.Node)
		current := n.currentLocked(e)
		n.mu.Unlock()
		if !current {
			return "", "", mux.ErrNotRemote // died with an earlier run of its node
		}
		if !alive {
			return "", "", proto.ErrSessionClosed(id, ReasonNodeLost)
		}
		if url != "" {
			return e.Node, url, nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return "", "", fmt.Errorf("owner %s of %s: %w", e.Node, id, ctx.Err())
		}
	}
}

// dial opens a socket to a node's /ws acting for principal, with the cluster token, under a
// lease (relaySock): the owner takes what the socket carries only while the lease holds.
func (n *Node) dial(ctx context.Context, url, principal string, readOnly bool) (*relaySock, error) {
	s := &relaySock{d: n.relayLease(), takenBytes: make(map[uint32]int64), relays: make(map[uint32]*relay)}
	h := http.Header{}
	h.Set(proto.HeaderOnBehalfOf, principal)
	if readOnly {
		h.Set(proto.HeaderReadOnly, "1")
	}
	h.Set(proto.HeaderRelayLease, strconv.FormatInt(s.d.Milliseconds(), 10))
	var d *websocket.Dialer
	if n.cfg.RelayTLS != nil {
		d = &websocket.Dialer{TLSClientConfig: n.cfg.RelayTLS, HandshakeTimeout: opTimeout}
	}
	c, err := client.Dial(ctx, url, client.DialOptions{Token: n.cfg.Token, Header: h, Dialer: d,
		Name: "muxterm-relay/" + n.cfg.Name, ManualAck: true, OnServerError: s.onServerError,
		OnPing: s.pinged, OnNotification: s.notified})
	if err != nil {
		return nil, fmt.Errorf("relay: dial %s: %w", url, err)
	}
	s.c, s.maxChannels = c, c.Init().Limits.MaxChannels
	if s.maxChannels <= 0 {
		s.maxChannels = maxPooledChannels
	}
	return s, nil
}

// Attach implements mux.Remote: a relay bound to the owner's session.
func (n *Node) Attach(ctx context.Context, principal string, readOnly bool, p proto.AttachParams, notify func()) (mux.Relay, proto.AttachResult, error) {
	node, url, err := n.owner(ctx, principal, p.Session)
	if err != nil {
		return nil, proto.AttachResult{}, err
	}
	r := &relay{n: n, notify: notify, principal: principal, readOnly: readOnly}
	sock, err := n.acquire(ctx, url, principal, readOnly)
	if err != nil {
		return nil, proto.AttachResult{}, n.dialErr(node, p.Session, err)
	}
	// The owner paints (or not) as the client asked, at the size it declares; the relay's own
	// re-attaches stay a byte stream (a paint would reach the client unannounced).
	o := client.AttachOptions{From: p.From, Screen: p.Screen, ResumeScreen: proto.ScreenNever}
	if !readOnly {
		o.Cols, o.Rows = p.Cols, p.Rows
	}
	ch, res, err := sock.c.AttachWith(ctx, p.Session, o)
	if err != nil {
		n.release(sock, 0)
		return nil, res, err // the owner's error, e.g. unknown_session for another principal
	}
	if res.TTY != nil && !*res.TTY {
		// A session on pipes is attached on its own node: a relay would merge its stderr into
		// its output and could not close its stdin.
		dctx, cancel := context.WithTimeout(context.Background(), relayDetachWait)
		_ = ch.Detach(dctx)
		cancel()
		n.release(sock, 0)
		return nil, proto.AttachResult{}, proto.ErrInvalidRequest(fmt.Sprintf(
			"session %s runs on pipes at node %s: attach it through that node", p.Session, node))
	}
	rl, err := n.startRelay(r, node, p.Session, &binding{c: sock.c, sock: sock, ch: ch})
	if err != nil {
		return nil, res, err
	}
	return rl, res, nil
}

// relayDetachWait bounds the detach of a relayed attach the node refuses (a pipe session's).
const relayDetachWait = 5 * time.Second

// Capture implements mux.Remote: the owner holds the screen.
func (n *Node) Capture(ctx context.Context, principal string, readOnly bool, p proto.CaptureParams) (proto.CaptureResult, error) {
	node, url, err := n.owner(ctx, principal, p.Session)
	if err != nil {
		return proto.CaptureResult{}, err
	}
	s, err := n.dial(ctx, url, principal, readOnly)
	if err != nil {
		return proto.CaptureResult{}, n.dialErr(node, p.Session, err)
	}
	defer s.c.Close()
	return s.c.Capture(ctx, p.Session, client.CaptureOptions{ANSI: p.Format == proto.CaptureANSI, Scrollback: p.Scrollback})
}

// dialErr: an owner that cannot be reached is reported as lost; one whose TLS certificate this
// node does not trust is a configuration error, said as such (the node is not lost).
func (n *Node) dialErr(node, id string, err error) error {
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		n.log.Error("relay: the owner's TLS certificate is not trusted (check --cluster-ca)", "owner", node, "session", id, "err", err)
		return proto.ErrInternal(fmt.Sprintf("relay to node %s: its TLS certificate is not trusted by this node (--cluster-ca): %v", node, cv.Err))
	}
	n.log.Warn("relay: owner unreachable", "owner", node, "session", id, "err", err)
	return proto.ErrSessionClosed(id, ReasonNodeLost)
}

// Open implements mux.Remote: with least-sessions placement, the open goes to the live node
// with the fewest sessions when that is not this one.
func (n *Node) Open(ctx context.Context, principal string, p proto.OpenParams, notify func()) (mux.Relay, proto.OpenResult, bool, error) {
	if n.cfg.Placement != PlaceLeastSessions {
		return nil, proto.OpenResult{}, false, nil
	}
	// Each node's sessions as the directory says (current to within its propagation time);
	// this node's own count is exact. Fewest wins; a tie stays here, then goes to the first name.
	best, bestURL, bestN := "", "", n.cfg.Sessions()
	n.mu.Lock()
	counts := make(map[string]int, len(n.peers))
	for _, e := range n.entries {
		if n.currentLocked(e) {
			counts[e.Node]++
		}
	}
	for name, pr := range n.peers {
		c := counts[name]
		if pr.alive && pr.url != "" && (c < bestN || (c == bestN && best != "" && name < best)) {
			best, bestURL, bestN = name, pr.url, c
		}
	}
	n.mu.Unlock()
	if best == "" {
		return nil, proto.OpenResult{}, false, nil
	}
	r := &relay{n: n, notify: notify, principal: principal}
	// Its own socket, not a pooled one: an open is a slow request on the owner, bounded per
	// socket (pendingRequests), and many clients' opens must not share that bound.
	sock, err := n.dial(ctx, bestURL, principal, false)
	if err != nil {
		return nil, proto.OpenResult{}, false, nil // placement is a preference: open here
	}
	sock.users = 1
	ch, err := sock.c.Open(ctx, client.OpenOptions{Cmd: p.Cmd, Cwd: p.Cwd, Env: p.Env, Cols: p.Cols, Rows: p.Rows, Name: p.Name})
	if err != nil {
		sock.c.Close()
		return nil, proto.OpenResult{}, true, err
	}
	rl, err := n.startRelay(r, best, ch.Session(), &binding{c: sock.c, sock: sock, ch: ch})
	if err != nil {
		return nil, proto.OpenResult{}, true, err
	}
	return rl, proto.OpenResult{Session: ch.Session(), Pid: ch.Pid()}, true, nil
}

// Kill implements mux.Remote.
func (n *Node) Kill(ctx context.Context, principal, id string) (proto.KillResult, error) {
	node, url, err := n.owner(ctx, principal, id)
	if err != nil {
		return proto.KillResult{}, err
	}
	s, err := n.dial(ctx, url, principal, false)
	if err != nil {
		return proto.KillResult{}, n.dialErr(node, id, err)
	}
	defer s.c.Close()
	return s.c.Kill(ctx, id)
}

// Lease implements mux.Remote: the lease is taken on the owner, where the reaper runs.
func (n *Node) Lease(ctx context.Context, principal, id string, ttlMs int64) (proto.LeaseResult, error) {
	node, url, err := n.owner(ctx, principal, id)
	if err != nil {
		return proto.LeaseResult{}, err
	}
	s, err := n.dial(ctx, url, principal, false)
	if err != nil {
		return proto.LeaseResult{}, n.dialErr(node, id, err)
	}
	defer s.c.Close()
	var res proto.LeaseResult
	err = s.c.Call(ctx, proto.MethodSessionLease, proto.LeaseParams{Session: id, TTLMs: ttlMs}, &res)
	return res, err
}
