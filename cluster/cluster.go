package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/muxterm/muxterm/internal/procfs"
	"github.com/muxterm/muxterm/session"
)

// Names in NATS.
const (
	DirectoryBucket = "muxterm-sessions" // key s.<node>.<session id>
	heartbeatSubj   = "muxterm.heartbeat."
	helloSubj       = "muxterm.hello" // a node that starts asks every node for a heartbeat now
	// ReasonNodeLost is session.closed's and session_closed's reason for a session whose
	// owner node stopped answering (its heartbeats stopped for 3/4 of the TTL, or its socket to the
	// relay broke).
	ReasonNodeLost = "node_lost"
)

// Defaults for Config.
const (
	DefaultTTL      = 5 * time.Second
	DefaultReplicas = 3
	startTimeout    = 60 * time.Second
	// markerTTL: the marker a removed entry leaves expires after this, so a bucket of churning
	// sessions does not keep one marker per session ever closed. Watchers see the removal at once.
	markerTTL = time.Minute
	opTimeout = 5 * time.Second
)

var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidNodeName reports why name cannot be a node name (it is a NATS subject token), or nil.
func ValidNodeName(name string) error {
	if !nodeNameRE.MatchString(name) {
		return fmt.Errorf("node name %q: want 1 to 64 of A-Z a-z 0-9 _ -", name)
	}
	return nil
}

// Placement decides where session.open runs.
type Placement string

// Placements.
const (
	PlaceLocal         Placement = "local"
	PlaceLeastSessions Placement = "least-sessions"
)

// Config configures a Node.
type Config struct {
	// NATS is the URL (or comma-separated URLs) of the NATS cluster to join. Embedded nodes set
	// it to their own server's client URL.
	NATS string
	// Name is this node's name (unique in the cluster); URL is where other nodes reach its
	// /ws (ws://host:port/ws).
	Name, URL string
	// Token is the node-to-node credential a relay presents to the owner. The key that signs
	// and checks directory entries and heartbeats derives from it (signer).
	Token string
	// RelayTLS, if set, is the TLS configuration a relay dials a wss:// node URL with (a
	// private CA: --cluster-ca); nil uses the system roots.
	RelayTLS *tls.Config
	// TTL: a node whose heartbeat was not heard for 3/4 of it is lost, noticed within 0.8 of
	// it (silence). Default DefaultTTL.
	TTL time.Duration
	// Replicas of the directory bucket (1 to 5; at most the JetStream servers). Default 3.
	Replicas  int
	Placement Placement
	// Sessions counts this node's sessions (for least-sessions placement).
	Sessions func() int
	Logger   *slog.Logger
	// OnUnverified, if set, counts a directory entry, heartbeat or stored recording ignored
	// because its signature does not verify (kind "entry", "heartbeat" or "recording").
	OnUnverified func(kind string)
}

// Entry is one session in the directory.
type Entry struct {
	ID        string    `json:"-"`
	Node      string    `json:"node"`
	Principal string    `json:"principal"`
	Name      string    `json:"name"`
	Created   time.Time `json:"created"`
	State     string    `json:"state"` // "running"
	// Boot is the owner's boot id when it wrote the entry: an entry of an earlier boot is a
	// session that died with that run, whatever the sweep has not deleted yet.
	Boot string `json:"boot,omitempty"`
	// Sig signs the entry and its key with the cluster's signing key (signer).
	Sig string `json:"sig,omitempty"`
}

// peer is what this node knows of another node.
type peer struct {
	url      string
	boot     string
	sessions int
	seen     time.Time // local clock: when its last heartbeat arrived
	alive    bool
}

// Node is this gateway's membership in the cluster.
type Node struct {
	// immutable after Start:
	cfg       Config
	log       *slog.Logger
	sign      signer
	boot      string
	nc        *nats.Conn
	js        jetstream.JetStream
	dir       jetstream.KeyValue
	keep      map[string]bool // session ids the sweep keeps (KeepOnStart)
	ctx       context.Context // ends with Close
	stop      context.CancelFunc
	wg        sync.WaitGroup // the node's goroutines and relay teardowns
	closeOnce sync.Once
	// publishing is set once Start has started the publisher (Close flushes only then).
	publishing atomic.Bool

	// mu guards entries, tombs, peers, relays, closed and warned. It is a leaf: nothing is taken
	// under it and no I/O is done with it held (a relay is told it lost its node after mu is
	// released).
	mu      sync.Mutex
	entries map[string]Entry     // session id → entry, every node's, from the watcher and the announcements
	tombs   map[string]time.Time // session id → when its removal was announced (tombTTL)
	peers   map[string]*peer     // node name → what its heartbeats said
	relays  map[*relay]struct{}
	closed  bool // close has begun: startRelay refuses new relays
	waiting bool // close waits on wg: relay.Close runs its teardown outside wg
	started time.Time
	warned  map[string]bool // kind and source of the unverified messages logged (unverified)

	pool relayPool // the sockets relays share (relaypool.go)

	// natsUser and natsPassword are set by SetNATSAuth before Start, and read by it.
	natsUser, natsPassword string

	// kvQ: the bucket's writes of this node's sessions (publisher); annQ: their announcements
	// (announcer). Both in the order the registry added and removed them.
	kvQ, annQ *eventQueue
	// localMu guards local: this node's sessions, as the registry's Observer told them (ask's
	// answers, reannounce). Taken from the Observer with Registry.mu held; only an eventQueue's
	// mu is taken under it.
	localMu sync.Mutex
	local   map[string]session.Event

	recs recordings // the cluster's recordings (recordings.go)
}

// New returns a Node that is not started; Observe may be used at once (the registry's
// Observer), its events are published once Start has swept the stale entries.
func New(cfg Config) (*Node, error) {
	if err := ValidNodeName(cfg.Name); err != nil {
		return nil, err
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = DefaultReplicas
	}
	if cfg.Placement == "" {
		cfg.Placement = PlaceLocal
	}
	if cfg.Placement != PlaceLocal && cfg.Placement != PlaceLeastSessions {
		return nil, fmt.Errorf("placement %q: want local or least-sessions", cfg.Placement)
	}
	if cfg.Sessions == nil {
		cfg.Sessions = func() int { return 0 }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.Name), sign: newSigner(cfg.Token), boot: bootID(),
		entries: make(map[string]Entry), tombs: make(map[string]time.Time), warned: make(map[string]bool),
		peers: make(map[string]*peer), relays: make(map[*relay]struct{}),
		kvQ: newEventQueue(), annQ: newEventQueue(), local: make(map[string]session.Event)}, nil
}

// bootID names this process for the other nodes: a node whose boot changes restarted, and the
// relays to it are lost. It is the pid and the process's start time, which an upgrade in place
// (an exec in the same process) keeps, so the sessions that cross the exec keep their relays;
// random if /proc cannot tell.
func bootID() string {
	if st, err := procfs.ReadStat(os.Getpid()); err == nil {
		return fmt.Sprintf("%d-%d", st.PID, st.StartTime)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// KeepOnStart names this node's sessions that Start's sweep must not delete: those an upgrade in
// place handed over, which the registry adopts (and writes again) once Start returns. Called
// before Start.
func (n *Node) KeepOnStart(ids []string) {
	n.keep = make(map[string]bool, len(ids))
	for _, id := range ids {
		n.keep[id] = true
	}
}

// SetNATS sets Config.NATS before Start (an embedded server's URL is known only once it runs).
func (n *Node) SetNATS(url string) { n.cfg.NATS = url }

// SetNATSAuth sets the user and password the node's NATS connection presents (an embedded
// server's, EmbeddedCredentials), before Start.
func (n *Node) SetNATSAuth(user, password string) { n.natsUser, n.natsPassword = user, password }

// Name is this node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Observe is the registry's Observer: it queues the announcement and the directory write of a
// session added or removed here. It never blocks.
func (n *Node) Observe(e session.Event) {
	n.localMu.Lock()
	if e.Opened {
		n.local[e.ID] = e
	} else {
		delete(n.local, e.ID)
	}
	n.annQ.push(e) // under localMu: in the same order as reannounce sees local
	n.localMu.Unlock()
	n.kvQ.push(e)
}

// Start connects to NATS, creates the directory bucket if needed (waiting for the JetStream
// cluster to form), deletes this node's stale entries (a previous run's), loads and watches
// the directory, and starts the heartbeat. ctx bounds the start only.
func (n *Node) Start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	copts := []nats.Option{nats.Name("muxterm-" + n.cfg.Name), nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond), nats.RetryOnFailedConnect(true)}
	if n.natsUser != "" {
		copts = append(copts, nats.UserInfo(n.natsUser, n.natsPassword))
	}
	nc, err := nats.Connect(n.cfg.NATS, copts...)
	if err != nil {
		return fmt.Errorf("cluster: connect %s: %w", n.cfg.NATS, err)
	}
	n.nc = nc
	if n.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return fmt.Errorf("cluster: jetstream: %w", err)
	}
	// Heard first: the directory may take seconds to come up (a JetStream server that just
	// restarted, as an upgrade in place restarts an embedded one), and the other nodes must
	// not declare this one lost meanwhile; relays that dial it wait in the listen backlog.
	n.ctx, n.stop = context.WithCancel(context.Background())
	n.wg.Go(n.heartbeatLoop)
	abort := func() {
		n.stop()
		n.wg.Wait()
		nc.Close()
	}
	cfg := jetstream.KeyValueConfig{Bucket: DirectoryBucket, History: 1, Replicas: n.cfg.Replicas, LimitMarkerTTL: markerTTL,
		Description: "muxterm session directory: s.<node>.<session> → owner, principal, name, created, state"}
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		n.dir, err = n.js.CreateOrUpdateKeyValue(actx, cfg)
		acancel()
		if err == nil {
			break
		}
		n.log.Debug("cluster: directory bucket not ready", "err", err)
		select {
		case <-ctx.Done():
			abort()
			return fmt.Errorf("cluster: directory bucket %s (replicas %d): %w", DirectoryBucket, cfg.Replicas, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err := n.sweep(ctx); err != nil {
		abort()
		return err
	}
	sub, err := nc.Subscribe(heartbeatSubj+"*", n.onHeartbeat)
	if err != nil {
		n.Close()
		return fmt.Errorf("cluster: subscribe heartbeats: %w", err)
	}
	// The other subscriptions end with the connection.
	if _, err := nc.Subscribe(helloSubj, func(*nats.Msg) {
		n.beat()
		n.reannounce()
	}); err != nil {
		_ = sub.Unsubscribe()
		n.Close()
		return fmt.Errorf("cluster: subscribe hello: %w", err)
	}
	// Announcements before the bucket's load: nothing falls between the two.
	if _, err := nc.Subscribe(announceSubj+"*", n.onAnnounce); err != nil {
		_ = sub.Unsubscribe()
		n.Close()
		return fmt.Errorf("cluster: subscribe announcements: %w", err)
	}
	if _, err := nc.Subscribe(askSubj, n.onAsk); err != nil {
		_ = sub.Unsubscribe()
		n.Close()
		return fmt.Errorf("cluster: subscribe asks: %w", err)
	}
	n.wg.Go(n.announcer)
	if err := nc.Publish(helloSubj, nil); err != nil {
		n.log.Warn("cluster: hello", "err", err)
	}
	w, err := n.dir.WatchAll(n.ctx)
	if err != nil {
		_ = sub.Unsubscribe()
		n.Close()
		return fmt.Errorf("cluster: watch directory: %w", err)
	}
	loaded := make(chan struct{})
	n.mu.Lock()
	n.started = time.Now()
	n.mu.Unlock()
	n.wg.Go(func() { n.watch(w, loaded) })
	select {
	case <-loaded:
	case <-ctx.Done():
		n.Close()
		return fmt.Errorf("cluster: load directory: %w", ctx.Err())
	}
	n.wg.Go(n.monitor)
	n.publishing.Store(true)
	n.wg.Go(n.publisher)
	n.wg.Go(n.uploader)
	n.log.Info("cluster joined", "nats", n.cfg.NATS, "url", n.cfg.URL, "ttl", n.cfg.TTL, "replicas", n.cfg.Replicas)
	return nil
}

// sweep deletes this node's entries left by a previous run (their PTYs died with it), except
// those KeepOnStart named.
func (n *Node) sweep(ctx context.Context) error {
	kl, err := n.dir.ListKeysFiltered(ctx, "s."+n.cfg.Name+".*")
	if err != nil {
		return fmt.Errorf("cluster: list stale entries: %w", err)
	}
	var keys []string
	kept := 0
	for k := range kl.Keys() {
		if parts := strings.Split(k, "."); len(parts) == 3 && n.keep[parts[2]] {
			kept++ // handed over by an upgrade in place: still running
			continue
		}
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := n.dir.Purge(ctx, k, jetstream.PurgeTTL(markerTTL)); err != nil {
			return fmt.Errorf("cluster: delete stale entry %s: %w", k, err)
		}
	}
	if len(keys) > 0 || kept > 0 {
		n.log.Info("cluster: swept stale entries", "count", len(keys), "kept_handed_over", kept)
	}
	return nil
}

func entryKey(node, id string) string { return "s." + node + "." + id }

// watch keeps entries current from the directory; loaded is closed once the initial values
// are in.
func (n *Node) watch(w jetstream.KeyWatcher, loaded chan struct{}) {
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-n.ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				if loaded != nil {
					close(loaded)
					loaded = nil
				}
				continue
			}
			parts := strings.Split(e.Key(), ".")
			if len(parts) != 3 {
				continue
			}
			node, id := parts[1], parts[2]
			if e.Operation() != jetstream.KeyValuePut {
				n.mu.Lock()
				if cur, ok := n.entries[id]; ok && cur.Node == node {
					delete(n.entries, id)
				}
				delete(n.tombs, id)
				n.mu.Unlock()
				continue
			}
			var ent Entry
			if err := json.Unmarshal(e.Value(), &ent); err != nil {
				n.log.Warn("cluster: bad directory entry", "key", e.Key(), "err", err)
				continue
			}
			if !n.sign.entryOK(e.Key(), ent) {
				n.unverified("entry", node)
				continue
			}
			ent.ID, ent.Node = id, node
			n.mu.Lock()
			if _, removed := n.tombs[id]; !removed { // else a write that an election held back
				n.entries[id] = ent
			}
			n.mu.Unlock()
		}
	}
}

// publisher writes this node's directory entries from the queue Observe fills, in order,
// retrying a write that fails (JetStream electing a leader) until it succeeds or the node
// closes.
func (n *Node) publisher() {
	n.drain(n.kvQ, func(b []session.Event) bool {
		for _, e := range b {
			for attempt := 0; ; attempt++ {
				err := n.publish(e)
				if err == nil {
					break
				}
				n.log.Warn("cluster: directory write failed; retrying", "session", e.ID, "opened", e.Opened, "err", err, "attempt", attempt)
				select {
				case <-n.ctx.Done():
					return false
				case <-time.After(min(time.Duration(attempt+1)*100*time.Millisecond, time.Second)):
				}
			}
		}
		return true
	})
}

func (n *Node) publish(e session.Event) error {
	ctx, cancel := context.WithTimeout(n.ctx, opTimeout)
	defer cancel()
	key := entryKey(n.cfg.Name, e.ID)
	if !e.Opened {
		if err := n.dir.Purge(ctx, key, jetstream.PurgeTTL(markerTTL)); err != nil {
			return fmt.Errorf("delete %s: %w", key, err)
		}
		return nil
	}
	b, _ := json.Marshal(n.sign.signEntry(key, n.entryOf(e)))
	if _, err := n.dir.Put(ctx, key, b); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Close stops the heartbeat and the watchers, waits for the relays' teardowns and closes the
// NATS connection. The directory writes queued so far are flushed first (at most opTimeout).
func (n *Node) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	n.CloseWithin(ctx)
}

// CloseWithin is Close with the flush of the queued directory writes bounded by ctx (a
// graceful shutdown's deadline): they are best effort, a node that starts again sweeps what is
// left. It may be called more than once.
func (n *Node) CloseWithin(ctx context.Context) {
	n.closeOnce.Do(func() { n.close(ctx) })
}

func (n *Node) close(ctx context.Context) {
	n.mu.Lock()
	n.closed = true // before any Wait: no relay's flusher is added after it
	n.mu.Unlock()
	if n.stop == nil {
		if n.nc != nil {
			n.nc.Close()
		}
		return
	}
	if !n.publishing.Load() {
		// Start failed before the publisher ran: nothing was written.
		n.stop()
		n.wg.Wait()
		n.nc.Close()
		return
	}
	if err := n.flush(ctx); err != nil {
		n.log.Warn("cluster: directory writes not flushed before closing; a restart sweeps them", "err", err)
	}
	if err := n.flushUploads(ctx); err != nil {
		n.log.Warn("cluster: recordings not stored before closing; they stay on this node's disk", "err", err)
	}
	n.mu.Lock()
	rs := make([]*relay, 0, len(n.relays))
	for r := range n.relays {
		rs = append(rs, r)
	}
	n.mu.Unlock()
	for _, r := range rs {
		r.Close(false)
	}
	n.stop()
	n.mu.Lock()
	n.waiting = true // from here a relay's teardown is not added to wg (relay.Close)
	n.mu.Unlock()
	done := make(chan struct{})
	go func() {
		n.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		// A relay's client stuck in a write to an owner that stopped reading (bounded by the
		// client's WriteTimeout): not worth holding the shutdown for.
		n.log.Warn("cluster: closing without waiting for every relay", "err", ctx.Err())
	}
	n.nc.Close()
}

// Published implements mux.Remote: it returns once the announcements queued so far reached
// the NATS server (milliseconds, election or not); a node that misses one asks the owner.
func (n *Node) Published(ctx context.Context) error { return n.annQ.flush(ctx) }

// flush waits for the announcer and the publisher to drain their queues.
func (n *Node) flush(ctx context.Context) error {
	if err := n.annQ.flush(ctx); err != nil {
		return err
	}
	return n.kvQ.flush(ctx)
}

// Entries returns the directory as this node sees it, oldest first (tests, figures).
func (n *Node) Entries() []Entry {
	n.mu.Lock()
	out := make([]Entry, 0, len(n.entries))
	for _, e := range n.entries {
		out = append(out, e)
	}
	n.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

// lookup finds id's entry: in the view, else (not announced here yet, or the announcement
// lost) from its owner, whom ask finds.
func (n *Node) lookup(ctx context.Context, id string) (Entry, bool) {
	n.mu.Lock()
	e, ok := n.entries[id]
	n.mu.Unlock()
	if ok || !validID(id) {
		return e, ok
	}
	return n.ask(ctx, id)
}

// validID: session ids are 32 lowercase hex characters; anything else is no key.
func validID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
