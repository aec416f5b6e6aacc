package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// Share links (docs/protocol.md §4, "Share links"): an owner's link to one session, read-only
// unless it grants writing, until it expires or is revoked. They live in this process's memory:
// a restart or an upgrade in place forgets them, and on a cluster a link works at the node that
// made it.

// share is one link. Immutable but for sockets, which shareStore.mu guards.
type share struct {
	id, token, owner, session string
	write                     bool
	expires                   time.Time
	timer                     *time.Timer
	// sockets are the cancels of the sockets open with the link; a revocation calls them.
	sockets map[*context.CancelCauseFunc]struct{}
}

func (s *share) info() proto.ShareInfo {
	return proto.ShareInfo{Share: s.id, Session: s.session, Write: s.write,
		Expires: s.expires.UTC().Format(time.RFC3339), Viewers: len(s.sockets)}
}

// shareStore holds the gateway's share links. It is safe for concurrent use; no lock is held
// while a socket's cancel runs.
type shareStore struct {
	reg *session.Registry

	// mu guards byID and byToken (and every share's sockets).
	mu      sync.Mutex
	byID    map[string]*share
	byToken map[string]*share
}

func newShareStore(reg *session.Registry) *shareStore {
	return &shareStore{reg: reg, byID: make(map[string]*share), byToken: make(map[string]*share)}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// MaxSharesPerPrincipal bounds one principal's live links (limit_exceeded "shares" beyond).
const MaxSharesPerPrincipal = 64

// Create makes a link to owner's session p.Session. A principal's links whose session ended are
// forgotten first (a link outlives nothing it shows), and beyond MaxSharesPerPrincipal live
// links a new one is refused.
func (st *shareStore) Create(owner string, p proto.ShareCreateParams) (proto.ShareInfo, *proto.Error) {
	if _, err := st.reg.Get(p.Session, owner); err != nil {
		return proto.ShareInfo{}, proto.ErrUnknownSession(p.Session)
	}
	st.mu.Lock()
	var mine []*share
	for _, o := range st.byID {
		if o.owner == owner {
			mine = append(mine, o)
		}
	}
	st.mu.Unlock()
	// The registry is asked with no lock of the store's held: nothing is taken under it.
	var ended []*share
	n := 0
	for _, o := range mine {
		if _, err := st.reg.Get(o.session, owner); err != nil {
			ended = append(ended, o)
			continue
		}
		n++
	}
	for _, o := range ended {
		o.timer.Stop()
		st.end(o)
	}
	if n >= MaxSharesPerPrincipal {
		return proto.ShareInfo{}, proto.ErrLimitExceeded("shares", fmt.Sprintf(
			"at most %d live share links per principal: revoke one (share.list, share.revoke)", MaxSharesPerPrincipal))
	}
	ttl := time.Duration(p.TTLMs) * time.Millisecond
	s := &share{id: randomHex(16), token: randomHex(32), owner: owner, session: p.Session, write: p.Write,
		expires: time.Now().Add(ttl), sockets: make(map[*context.CancelCauseFunc]struct{})}
	st.mu.Lock()
	st.byID[s.id] = s
	st.byToken[s.token] = s
	s.timer = time.AfterFunc(ttl, func() { st.end(s) })
	st.mu.Unlock()
	in := s.info()
	in.Token = s.token
	return in, nil
}

// List returns owner's live links to session.
func (st *shareStore) List(owner, sessionID string) (proto.ShareListResult, *proto.Error) {
	if _, err := st.reg.Get(sessionID, owner); err != nil {
		return proto.ShareListResult{}, proto.ErrUnknownSession(sessionID)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	out := proto.ShareListResult{Shares: []proto.ShareInfo{}}
	for _, s := range st.byID {
		if s.owner == owner && s.session == sessionID {
			out.Shares = append(out.Shares, s.info())
		}
	}
	return out, nil
}

// Revoke ends owner's link id and closes the sockets open with it.
func (st *shareStore) Revoke(owner, id string) (proto.ShareRevokeResult, *proto.Error) {
	st.mu.Lock()
	s := st.byID[id]
	st.mu.Unlock()
	if s == nil || s.owner != owner {
		return proto.ShareRevokeResult{}, proto.ErrInvalidParams("share", "no share link of yours has this id")
	}
	s.timer.Stop()
	return proto.ShareRevokeResult{Share: id, Closed: st.end(s)}, nil
}

// end forgets s and cancels its sockets (ErrRevoked: they close with 4003); it returns how many.
func (st *shareStore) end(s *share) int {
	st.mu.Lock()
	delete(st.byID, s.id)
	delete(st.byToken, s.token)
	cancels := make([]*context.CancelCauseFunc, 0, len(s.sockets))
	for c := range s.sockets {
		cancels = append(cancels, c)
	}
	clear(s.sockets)
	st.mu.Unlock()
	for _, c := range cancels {
		(*c)(mux.ErrRevoked)
	}
	return len(cancels)
}

// lookup returns the live link whose token is tok.
func (st *shareStore) lookup(tok string) (*share, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s, ok := st.byToken[tok]
	if !ok || !time.Now().Before(s.expires) {
		return nil, false
	}
	return s, true
}

// join counts a socket open with s, whose context cancel ends it when the link does; false if
// the link ended meanwhile. leave forgets it.
func (st *shareStore) join(s *share, cancel *context.CancelCauseFunc) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.byID[s.id] != s {
		return false
	}
	s.sockets[cancel] = struct{}{}
	return true
}

func (st *shareStore) leave(s *share, cancel *context.CancelCauseFunc) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(s.sockets, cancel)
}

// stop ends every link's timer (at shutdown).
func (st *shareStore) stop() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, s := range st.byID {
		s.timer.Stop()
	}
}
