package cluster

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/muxterm/muxterm/internal/record"
	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// Recordings in a cluster (docs/scaling.md, Recordings on several nodes). Each node records its
// own sessions into its --record directory, as a single gateway does. When a recording ends
// (session.RecordOptions.OnEnd → RecordingEnded), the node uploads the file into the JetStream
// object store RecordingsBucket, named by the recording's id, with the header's facts and a
// signature in the object's metadata. recording.list on any node merges its own directory, the
// store and the other live nodes' recordings (asked of them through a socket acting for the
// principal, as a relay); recording.read reads its own directory, else relays the read to the
// live node that owns the session (a recording still being written), else reads the store.
//
// The object's metadata is signed with the cluster's signing key (sign.go) and covers the
// content's SHA-256: a NATS client without the cluster token can read the recordings (they are
// not encrypted: docs/security.md) but cannot make a node list or serve one as a principal's.

// RecordingsBucket is the object store of the cluster's recordings: object <recording id>.
const RecordingsBucket = "muxterm-recordings"

// Bounds of the recordings' store.
const (
	// MaxStoredRecording: a larger recording is not uploaded (it stays on its node's disk,
	// listed and read there); a read from the store holds the whole object in memory once.
	MaxStoredRecording = 64 << 20
	// recordingCacheBytes bounds the objects a node keeps in memory for recording.read's
	// pages (a player reads a recording 64 KiB at a time), least recently read out first.
	recordingCacheBytes = 64 << 20
	// uploadAttempts bounds the tries of one upload (a JetStream election, a full store).
	uploadAttempts = 5
	// maxUploadQueue bounds the ended recordings waiting for their upload.
	maxUploadQueue = 4096
)

// The object's metadata keys.
const (
	metaOwner   = "owner"
	metaName    = "name"
	metaCommand = "command"
	metaStarted = "started" // Unix ms
	metaCols    = "cols"
	metaRows    = "rows"
	metaBytes   = "bytes"
	metaSHA256  = "sha256"
	metaNode    = "node"
	metaSig     = "sig"
)

// recordings is a node's side of the cluster's recordings.
type recordings struct {
	wakeOnce sync.Once
	wake     chan struct{} // an upload was queued (wakeC)

	// mu guards the fields below; a leaf, no I/O under it.
	mu     sync.Mutex
	ret    record.Retention // SetRecordings: the bucket's TTL and size bound
	upload bool             // SetRecordings was called: this node records
	store  jetstream.ObjectStore
	// configured: this process created the store or set its retention (recordingStore).
	configured bool
	q          []upload
	idle       chan struct{} // closed when q drains; nil while it is empty
	cache      map[string]*cached
	cached     int64
	lastUse    uint64
}

type upload struct {
	path string
	info session.RecordingInfo
}

// cached is one object's content, for the object version (NUID) it was read from.
type cached struct {
	nuid string
	data []byte
	used uint64
}

func (r *recordings) wakeC() chan struct{} {
	r.wakeOnce.Do(func() { r.wake = make(chan struct{}, 1) })
	return r.wake
}

// SetRecordings makes this node upload its ended recordings, and sets the store's retention
// (a TTL of ret.MaxAge, and no more than ret.MaxBytes in all, the oldest removed first). Called
// before Start, on a node that records (--record).
func (n *Node) SetRecordings(ret record.Retention) {
	n.recs.mu.Lock()
	n.recs.upload, n.recs.ret = true, ret
	n.recs.mu.Unlock()
}

// RecordingEnded is session.RecordOptions.OnEnd: it queues the upload of the ended recording at
// path. It never blocks.
func (n *Node) RecordingEnded(path string, info session.RecordingInfo) {
	r := &n.recs
	r.mu.Lock()
	if len(r.q) >= maxUploadQueue {
		r.mu.Unlock()
		n.log.Warn("recordings: upload queue full; recording stays on this node only", "recording", info.ID)
		return
	}
	r.q = append(r.q, upload{path, info})
	if r.idle == nil {
		r.idle = make(chan struct{})
	}
	r.mu.Unlock()
	select {
	case r.wakeC() <- struct{}{}:
	default:
	}
}

// uploader uploads the queued recordings, in order, until the node closes.
func (n *Node) uploader() {
	r := &n.recs
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-r.wakeC():
		}
		for {
			r.mu.Lock()
			if len(r.q) == 0 {
				if r.idle != nil {
					close(r.idle)
					r.idle = nil
				}
				r.mu.Unlock()
				break
			}
			u := r.q[0]
			r.mu.Unlock()
			n.uploadWithRetries(u)
			r.mu.Lock()
			r.q = r.q[1:]
			r.mu.Unlock()
		}
	}
}

// flushUploads waits until the queued uploads are done, or ctx ends.
func (n *Node) flushUploads(ctx context.Context) error {
	n.recs.mu.Lock()
	idle := n.recs.idle
	n.recs.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("recordings: uploads: %w", ctx.Err())
	}
}

func (n *Node) uploadWithRetries(u upload) {
	for attempt := 1; ; attempt++ {
		err := n.upload(u)
		if err == nil {
			return
		}
		if errors.Is(err, errTooLarge) || attempt == uploadAttempts || n.ctx.Err() != nil {
			n.log.Error("recordings: not stored for the cluster; it stays on this node's disk only",
				"recording", u.info.ID, "attempts", attempt, "err", err)
			return
		}
		n.log.Warn("recordings: upload failed; retrying", "recording", u.info.ID, "attempt", attempt, "err", err)
		select {
		case <-n.ctx.Done():
		case <-time.After(min(time.Duration(1<<attempt)*100*time.Millisecond, 5*time.Second)):
		}
	}
}

var errTooLarge = errors.New("larger than the store's bound")

// recordingStore is the object store, nil and no error when no node created it yet. The
// uploader (create) creates it, or sets its retention, once per process; readers only look it
// up, so a list or a read never waits to place a bucket's replicas.
func (n *Node) recordingStore(ctx context.Context, create bool) (jetstream.ObjectStore, error) {
	r := &n.recs
	r.mu.Lock()
	obs, configured, ret := r.store, r.configured, r.ret
	r.mu.Unlock()
	if obs != nil && (configured || !create) {
		return obs, nil
	}
	var err error
	if create {
		obs, err = n.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: RecordingsBucket,
			Description: "muxterm recordings: <recording id> → its asciicast file", TTL: ret.MaxAge,
			Storage: jetstream.FileStorage, Replicas: n.cfg.Replicas})
	} else {
		obs, err = jsRetry(ctx, jsAttempt, func(ctx context.Context) (jetstream.ObjectStore, error) {
			return n.js.ObjectStore(ctx, RecordingsBucket)
		})
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("recordings: object store %s: %w", RecordingsBucket, err)
	}
	r.mu.Lock()
	r.store = obs
	r.configured = r.configured || create
	r.mu.Unlock()
	return obs, nil
}

// recordingFields: what a stored recording's signature covers.
func recordingFields(id string, m map[string]string) []string {
	return []string{id, m[metaOwner], m[metaName], m[metaCommand], m[metaStarted], m[metaCols], m[metaRows],
		m[metaBytes], m[metaSHA256], m[metaNode]}
}

// upload stores the recording at u.path (never through a symbolic link) as object u.info.ID.
func (n *Node) upload(u upload) error {
	f, err := os.OpenFile(u.path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", u.path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", u.path, err)
	}
	size := st.Size()
	if size > MaxStoredRecording {
		return fmt.Errorf("%s: %d bytes: %w (%d)", u.path, size, errTooLarge, MaxStoredRecording)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, size)); err != nil {
		return fmt.Errorf("read %s: %w", u.path, err)
	}
	in := u.info
	m := map[string]string{metaOwner: in.Owner, metaName: in.Name, metaCommand: in.Command,
		metaStarted: strconv.FormatInt(in.Started.UnixMilli(), 10), metaCols: strconv.Itoa(in.Cols),
		metaRows: strconv.Itoa(in.Rows), metaBytes: strconv.FormatInt(size, 10),
		metaSHA256: hex.EncodeToString(h.Sum(nil)), metaNode: n.cfg.Name}
	m[metaSig] = n.sign.sum("recording", recordingFields(in.ID, m)...)
	ctx, cancel := context.WithTimeout(n.ctx, 4*opTimeout)
	defer cancel()
	obs, err := n.recordingStore(ctx, true)
	if err != nil {
		return err
	}
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: in.ID, Metadata: m}, io.NewSectionReader(f, 0, size)); err != nil {
		return fmt.Errorf("put %s: %w", in.ID, err)
	}
	n.log.Debug("recordings: stored", "recording", in.ID, "bytes", size)
	n.pruneStore(ctx, obs)
	return nil
}

// pruneStore removes the oldest stored recordings while the store holds more than the
// retention's MaxBytes (the bucket's TTL removes the old ones by itself).
func (n *Node) pruneStore(ctx context.Context, obs jetstream.ObjectStore) {
	n.recs.mu.Lock()
	limit := n.recs.ret.MaxBytes
	n.recs.mu.Unlock()
	if limit <= 0 {
		return
	}
	infos, err := obs.List(ctx)
	if err != nil {
		n.log.Warn("recordings: retention: list the store", "err", err)
		return
	}
	var total uint64
	for _, in := range infos {
		total += in.Size
	}
	slices.SortFunc(infos, func(a, b *jetstream.ObjectInfo) int { return a.ModTime.Compare(b.ModTime) })
	for _, in := range infos {
		if total <= uint64(limit) {
			return
		}
		if err := obs.Delete(ctx, in.Name); err != nil {
			n.log.Warn("recordings: retention: delete", "recording", in.Name, "err", err)
			continue
		}
		total -= in.Size
		n.log.Info("recordings: removed from the store by retention", "recording", in.Name, "bytes", in.Size)
	}
}

// storedInfo is a stored recording's facts from its metadata; ok false when its signature
// does not verify.
func (n *Node) storedInfo(oi *jetstream.ObjectInfo) (owner string, ri proto.RecordingInfo, ok bool) {
	m := oi.Metadata
	if oi.Deleted || m == nil || !validID(oi.Name) || !n.sign.verify(m[metaSig], "recording", recordingFields(oi.Name, m)...) {
		return "", ri, false
	}
	started, _ := strconv.ParseInt(m[metaStarted], 10, 64)
	cols, _ := strconv.Atoi(m[metaCols])
	rows, _ := strconv.Atoi(m[metaRows])
	size, _ := strconv.ParseInt(m[metaBytes], 10, 64)
	return m[metaOwner], proto.RecordingInfo{Recording: oi.Name, Session: oi.Name, Name: m[metaName],
		Command: m[metaCommand], Started: started, Cols: cols, Rows: rows, Bytes: size}, true
}

// Recordings implements mux.Remote: the recordings principal may see (all for an admin) on
// the other live nodes (being written, or not uploaded yet) and in the store, oldest first.
func (n *Node) Recordings(ctx context.Context, principal string, admin bool, id string) ([]proto.RecordingInfo, error) {
	var out []proto.RecordingInfo
	seen := map[string]bool{}
	for _, r := range n.nodesRecordings(ctx, principal, admin, id) {
		if !seen[r.Recording] {
			seen[r.Recording] = true
			out = append(out, r)
		}
	}
	obs, err := n.recordingStore(ctx, false)
	if err != nil {
		return nil, err
	}
	if obs != nil {
		infos, err := listStore(ctx, obs)
		if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
			return nil, fmt.Errorf("recordings: list the store: %w", err)
		}
		for _, oi := range infos {
			owner, ri, ok := n.storedInfo(oi)
			if !ok {
				if !oi.Deleted {
					n.unverified("recording", oi.Name)
				}
				continue
			}
			if (admin || owner == principal) && (id == "" || id == ri.Recording) && !seen[ri.Recording] {
				seen[ri.Recording] = true
				out = append(out, ri)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b proto.RecordingInfo) int { return cmp.Compare(a.Started, b.Started) })
	return out, nil
}

// nodesRecordings asks each other live node that owns sessions principal may see (all for an
// admin) for that principal's recordings there, through a socket acting for the principal. A
// node that does not answer is left out (its stored recordings are listed from the store).
func (n *Node) nodesRecordings(ctx context.Context, principal string, admin bool, id string) []proto.RecordingInfo {
	type target struct{ node, url, principal string }
	var targets []target
	seen := map[target]bool{}
	n.mu.Lock()
	for _, e := range n.entries {
		if e.Node == n.cfg.Name || (!admin && e.Principal != principal) || (id != "" && e.ID != id) {
			continue
		}
		url, alive := n.aliveLocked(e.Node)
		if t := (target{e.Node, url, e.Principal}); alive && url != "" && n.currentLocked(e) && !seen[t] {
			seen[t] = true
			targets = append(targets, t)
		}
	}
	n.mu.Unlock()
	var out []proto.RecordingInfo
	for _, t := range targets {
		s, err := n.dial(ctx, t.url, t.principal, false)
		if err != nil {
			n.log.Warn("recordings: list at the owner", "owner", t.node, "err", err)
			continue
		}
		rs, err := s.c.Recordings(ctx, id)
		s.c.Close()
		if err != nil {
			n.log.Warn("recordings: list at the owner", "owner", t.node, "err", err)
			continue
		}
		out = append(out, rs...)
	}
	return out
}

// ReadRecording implements mux.Remote: a recording being written on another live node is read
// there (through a socket acting for its owner, once this node has decided the asker may read
// it); any other from the store.
func (n *Node) ReadRecording(ctx context.Context, principal string, admin bool, p proto.RecordingReadParams) (proto.RecordingReadResult, error) {
	if !validID(p.Recording) {
		return proto.RecordingReadResult{}, mux.ErrNotRemote
	}
	if e, ok := n.lookup(ctx, p.Recording); ok && e.Node != n.cfg.Name && (admin || e.Principal == principal) {
		n.mu.Lock()
		url, alive := n.aliveLocked(e.Node)
		current := n.currentLocked(e)
		n.mu.Unlock()
		if alive && current && url != "" {
			res, err := n.readAtOwner(ctx, url, e.Principal, p)
			var pe *proto.Error
			switch {
			case err == nil:
				return res, nil
			case errors.As(err, &pe) && pe.Kind() == proto.KindUnknownSession:
				// Not recorded there (or no longer): perhaps stored.
			case errors.As(err, &pe):
				return res, err
			default:
				n.log.Warn("recordings: read at the owner", "owner", e.Node, "recording", p.Recording, "err", err)
			}
		}
	}
	return n.readStored(ctx, principal, admin, p)
}

func (n *Node) readAtOwner(ctx context.Context, url, principal string, p proto.RecordingReadParams) (proto.RecordingReadResult, error) {
	s, err := n.dial(ctx, url, principal, false)
	if err != nil {
		return proto.RecordingReadResult{}, err
	}
	defer s.c.Close()
	return s.c.ReadRecording(ctx, p.Recording, p.Offset, p.Length)
}

// readStored reads p's range of a stored recording; another principal's is mux.ErrNotRemote,
// as a recording that does not exist.
func (n *Node) readStored(ctx context.Context, principal string, admin bool, p proto.RecordingReadParams) (proto.RecordingReadResult, error) {
	obs, err := n.recordingStore(ctx, false)
	if err != nil || obs == nil {
		return proto.RecordingReadResult{}, cmp.Or(err, mux.ErrNotRemote)
	}
	oi, err := jsRetry(ctx, jsAttempt, func(ctx context.Context) (*jetstream.ObjectInfo, error) {
		return obs.GetInfo(ctx, p.Recording)
	})
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return proto.RecordingReadResult{}, mux.ErrNotRemote
	}
	if err != nil {
		return proto.RecordingReadResult{}, fmt.Errorf("recordings: %s in the store: %w", p.Recording, err)
	}
	owner, ri, ok := n.storedInfo(oi)
	if !ok {
		n.unverified("recording", oi.Name)
		return proto.RecordingReadResult{}, mux.ErrNotRemote
	}
	if !admin && owner != principal {
		return proto.RecordingReadResult{}, mux.ErrNotRemote
	}
	size := ri.Bytes
	res := proto.RecordingReadResult{Recording: p.Recording, Offset: p.Offset, Data: []byte{}, Size: size, EOF: true}
	if p.Offset >= size {
		return res, nil
	}
	data, err := n.storedContent(ctx, obs, oi)
	if err != nil {
		return proto.RecordingReadResult{}, err
	}
	end := min(size, p.Offset+int64(p.Length))
	res.Data = bytes.Clone(data[p.Offset:end])
	res.EOF = end >= size
	return res, nil
}

// storedContent is the content of the stored object oi, from the cache or the store, checked
// against its signed size and SHA-256.
func (n *Node) storedContent(ctx context.Context, obs jetstream.ObjectStore, oi *jetstream.ObjectInfo) ([]byte, error) {
	r := &n.recs
	r.mu.Lock()
	r.lastUse++
	if c := r.cache[oi.Name]; c != nil && c.nuid == oi.NUID {
		c.used = r.lastUse
		r.mu.Unlock()
		return c.data, nil
	}
	r.mu.Unlock()
	m := oi.Metadata
	if size, _ := strconv.ParseInt(m[metaBytes], 10, 64); size > MaxStoredRecording {
		return nil, fmt.Errorf("recordings: %s: %d bytes, larger than the store's bound", oi.Name, size)
	}
	// No bound per attempt: a large recording may take a while to arrive.
	data, err := jsRetry(ctx, 0, func(ctx context.Context) ([]byte, error) { return obs.GetBytes(ctx, oi.Name) })
	if err != nil {
		return nil, fmt.Errorf("recordings: get %s: %w", oi.Name, err)
	}
	sum := sha256.Sum256(data)
	if strconv.Itoa(len(data)) != m[metaBytes] || hex.EncodeToString(sum[:]) != m[metaSHA256] {
		n.unverified("recording", oi.Name)
		return nil, fmt.Errorf("recordings: %s: the stored content does not match its signed size and digest", oi.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cache == nil {
		r.cache = map[string]*cached{}
	}
	if old := r.cache[oi.Name]; old != nil {
		r.cached -= int64(len(old.data))
		delete(r.cache, oi.Name)
	}
	for r.cached+int64(len(data)) > recordingCacheBytes && len(r.cache) > 0 {
		var lru string
		for id, c := range r.cache {
			if lru == "" || c.used < r.cache[lru].used {
				lru = id
			}
		}
		r.cached -= int64(len(r.cache[lru].data))
		delete(r.cache, lru)
	}
	r.lastUse++
	r.cache[oi.Name] = &cached{nuid: oi.NUID, data: data, used: r.lastUse}
	r.cached += int64(len(data))
	return data, nil
}

// StoreMissing queues the upload of the recordings in infos (a node's own directory, as
// session.Registry.Recordings lists it for an admin) that the store lacks and that are not
// being written: those a crash, a stop that ran out of time, failed uploads or a start
// outside the cluster left on this node only. It lists the store on a goroutine of its own,
// asking again every 0.5 s for at most a minute while the store does not answer, and returns at
// once; called after Start.
func (n *Node) StoreMissing(dir string, infos []session.RecordingInfo) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.ctx == nil {
		return
	}
	n.wg.Go(func() {
		// The store may not answer yet (a JetStream server that just started, an election):
		// asked again until it does, for at most startTimeout.
		var stored map[string]bool
		deadline := time.Now().Add(startTimeout)
		for attempt := 1; ; attempt++ {
			var err error
			if stored, err = n.storedNames(); err == nil {
				break
			}
			if time.Now().After(deadline) {
				n.log.Warn("recordings: not compared with the store; this node's unstored recordings stay on its disk only", "err", err, "attempts", attempt)
				return
			}
			n.log.Debug("recordings: store not ready", "err", err)
			select {
			case <-n.ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
		queued := 0
		for _, in := range infos {
			if !in.Active && !stored[in.ID] {
				n.RecordingEnded(session.RecordingPath(dir, in.ID), in)
				queued++
			}
		}
		if queued > 0 {
			n.log.Info("recordings: storing those of this node the store lacks", "count", queued)
		}
	})
}

// storedNames are the names of the store's recordings (none while no node created it).
func (n *Node) storedNames() (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(n.ctx, opTimeout)
	defer cancel()
	obs, err := n.recordingStore(ctx, false)
	if err != nil || obs == nil {
		return map[string]bool{}, err
	}
	list, err := listStore(ctx, obs)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, fmt.Errorf("recordings: list the store: %w", err)
	}
	stored := make(map[string]bool, len(list))
	for _, oi := range list {
		stored[oi.Name] = true
	}
	return stored, nil
}
