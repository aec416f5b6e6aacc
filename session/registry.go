package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var timeZero time.Time

// tombstones bounds how many recently closed ids the registry remembers, so an attach to one
// says why it is gone rather than that it never existed.
const tombstones = 4096

// Registry holds sessions by id. All methods are safe for concurrent use.
type Registry struct {
	opts Options
	now  func() time.Time

	// mu guards sessions, closed, the tombstones and echoGroups.
	//
	// The lock order of the whole gateway, written here once (docs/architecture.md shows the
	// same block, and internal/docscheck's test keeps the two equal). An arrow means "may be
	// taken while holding"; nothing else nests.
	//
	//	screen.mu ─▶ Registry.mu ─▶ Session.mu ─▶ fairShare.mu
	//	                  │              ├─▶ poller Poller.mu        (a registration, a re-arm, an unregistering)
	//	                  │              ├─▶ echoGroup.mu
	//	                  │              ├─▶ screenFeeder.mu
	//	                  │              ├─▶ record Recorder.mu     (the reader's ingest, sizes, markers)
	//	                  │              └─▶ mux conn.readyMu        (a viewer's wake)
	//	                  └─▶ cluster Node.localMu ─▶ eventQueue.mu   (the registry's Observer)
	//	screen.mu ─▶ Session.resizeMu ─▶ Session.mu   (a painted attach declares its size)
	//	Session.inMu ─▶ Session.mu, record Recorder.mu (input)
	//	Session.ptyMu ─▶ fdReserve.mu         child starts ─▶ orphanReaper.gate ─▶ orphanReaper.mu ◀─ Waiter.mu
	//	cluster relay.mu ─▶ client Channel.mu, client Client.mu
	//	client Client.wmu ─▶ client Channel.mu, client Client.mu
	//
	// Taking Session.mu alone is fine; taking Registry.mu while holding a Session.mu, or a
	// screen.mu while holding Registry.mu, a Session.mu or a Session.resizeMu, is a bug (a
	// painted attach holds its session's screen.mu while it subscribes and declares its size). A
	// held master is re-armed after fairShare.mu or echoGroup.mu is released, never under it.
	// Channel.mu and Client.mu are never held together. Nothing is taken under fairShare.mu,
	// Poller.mu, conn.mu, conn.readyMu, eventQueue.mu, Node.mu, Recorder.mu or any gateway
	// mutex. No lock is held across a blocking PTY read or write, a socket write (except the Go
	// client's Client.wmu, bounded by its write timeout), a wait for a process or a blocking
	// channel send. Which fields each mutex guards: go doc of its package, section "Locks".
	mu       sync.Mutex
	sessions map[string]*Session
	closed   bool                 // Shutdown began; Open refuses
	gone     map[string]tombstone // recently closed ids
	goneFIFO []string             // insertion order of gone, for eviction
	wg       sync.WaitGroup       // teardowns started by Shutdown
	// echoGroups are the owners' echo-first groups (echofirst.go), kept as long as the
	// registry: one per principal that ever opened or handed over a session here.
	echoGroups map[string]*echoGroup

	// survivors and survivorSessions count what Shutdown's kills left alive.
	survivors, survivorSessions atomic.Int64
}

type tombstone struct {
	owner  string
	reason Reason
	// The session's teardown: *res is valid after <-done. Not the session itself, so a
	// tombstone does not keep its scrollback alive.
	done <-chan struct{}
	res  *KillResult
	pid  int // the session's child, for a handover while its teardown runs (handover.go)
}

// NewRegistry returns an empty registry. now is the clock (nil: time.Now); the reaper's grace is
// measured with it.
func NewRegistry(opts Options, now func() time.Time) *Registry {
	if now == nil {
		now = time.Now
	}
	return &Registry{opts: opts.withDefaults(), now: now, sessions: make(map[string]*Session),
		gone: make(map[string]tombstone), echoGroups: make(map[string]*echoGroup)}
}

// echoGroupLocked returns owner's echo-first group, made on first use; r.mu is held.
func (r *Registry) echoGroupLocked(owner string) *echoGroup {
	g := r.echoGroups[owner]
	if g == nil {
		g = new(echoGroup)
		r.echoGroups[owner] = g
	}
	return g
}

// Options returns the registry's options with defaults applied.
func (r *Registry) Options() Options { return r.opts }

// Now returns the registry's clock.
func (r *Registry) Now() time.Time { return r.now() }

func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("session id: %v", err)) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// Open spawns a session owned by spec.Owner and registers it. With wake non-nil it also
// attaches a viewer from offset 0 in the same step, so the session is never unwatched between
// the two. maxPerOwner > 0 bounds the owner's sessions.
func (r *Registry) Open(spec Spec, maxPerOwner int, wake func()) (*Session, *Viewer, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, nil, fmt.Errorf("open: %w", ErrShuttingDown)
	}
	if maxPerOwner > 0 && r.countLocked(spec.Owner) >= maxPerOwner {
		r.mu.Unlock()
		return nil, nil, fmt.Errorf("open: %w (%d)", ErrTooMany, maxPerOwner)
	}
	echo := r.echoGroupLocked(spec.Owner)
	r.mu.Unlock()
	// Spawning forks and execs: never under the registry lock. A concurrent open may slip past
	// the limit check by one spawn each; the insert below re-checks.
	s, err := spawn(newID(), spec, &r.opts, echo, r.now)
	if err != nil {
		return nil, nil, fmt.Errorf("open: %w", err)
	}
	r.mu.Lock()
	if r.closed || (maxPerOwner > 0 && r.countLocked(spec.Owner) >= maxPerOwner) {
		closed := r.closed
		r.mu.Unlock()
		s.mu.Lock()
		s.beginCloseLocked(ReasonShutdown)
		s.mu.Unlock()
		s.teardown(context.Background())
		if closed {
			return nil, nil, fmt.Errorf("open: %w", ErrShuttingDown)
		}
		return nil, nil, fmt.Errorf("open: %w (%d)", ErrTooMany, maxPerOwner)
	}
	r.sessions[s.id] = s
	r.observe(s, true)
	var v *Viewer
	if wake != nil {
		s.mu.Lock()
		v, _, err = s.subscribeLocked(0, wake, false)
		if err == nil {
			v.size = Size{spec.Cols, spec.Rows} // the opener's size, which spawn applied
			s.useLocked(v)
		}
		s.mu.Unlock()
	}
	r.mu.Unlock()
	if err != nil {
		return nil, nil, fmt.Errorf("open: %w", err)
	}
	return s, v, nil
}

// observe tells Options.Observer that s was added or removed; r.mu is held.
func (r *Registry) observe(s *Session, opened bool) {
	if f := r.opts.Observer; f != nil {
		f(Event{ID: s.id, Owner: s.owner, Name: s.name, Created: s.created, Opened: opened})
	}
}

func (r *Registry) countLocked(owner string) int {
	n := 0
	for _, s := range r.sessions {
		if s.owner == owner {
			n++
		}
	}
	return n
}

// lookupLocked finds id for owner, telling a closed session from one that never existed.
// r.mu must be held.
func (r *Registry) lookupLocked(id, owner string) (*Session, error) {
	s, ok := r.sessions[id]
	if ok && s.owner == owner {
		return s, nil
	}
	if t, ok := r.gone[id]; ok && t.owner == owner {
		return nil, &ClosedError{ID: id, Reason: t.reason}
	}
	return nil, fmt.Errorf("session %s: %w", id, ErrUnknownSession)
}

// ErrSurvivors is Shutdown's error when processes outlived their session's kill.
var ErrSurvivors = errors.New("survived their kill")

// Get returns owner's session id.
func (r *Registry) Get(id, owner string) (*Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookupLocked(id, owner)
}

// Attach looks up owner's session id and subscribes a viewer from offset from (negative: the
// oldest retained byte), atomically under both locks: a reaper's claim either happened before
// (the attach fails with ErrSessionClosed) or happens after and sees the viewer.
func (r *Registry) Attach(id, owner string, from int64, wake func()) (*Viewer, AttachInfo, error) {
	return r.attach(id, owner, from, wake, false)
}

// AttachPassive is Attach for a read-only viewer: it never holds the reader back (when it falls
// behind it loses bytes, reported as a gap, rather than pausing the owner's program).
func (r *Registry) AttachPassive(id, owner string, from int64, wake func()) (*Viewer, AttachInfo, error) {
	return r.attach(id, owner, from, wake, true)
}

func (r *Registry) attach(id, owner string, from int64, wake func(), passive bool) (*Viewer, AttachInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := r.lookupLocked(id, owner)
	if err != nil {
		return nil, AttachInfo{}, fmt.Errorf("attach: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subscribeLocked(from, wake, passive)
}

// Screens reports whether the sessions keep screens (Options.NoScreen unset).
func (r *Registry) Screens() bool { return !r.opts.NoScreen }

// AttachOptions say where a viewer starts and how.
type AttachOptions struct {
	// From is the offset to replay from; negative: the oldest retained byte.
	From int64
	// Passive: a read-only viewer (AttachPassive).
	Passive bool
	// Screen says whether the viewer starts with a paint of the screen (ScreenMode).
	Screen ScreenMode
	// Size, when set, is the viewer's own terminal size (Viewer.Resize), declared before a
	// paint is made, so that the paint is of the size the attach leaves the session at.
	Size Size
}

// AttachWith is Attach with a screen and a size: the viewer declares o.Size (ignored for a
// passive viewer), then, when o.Screen asks for it (ScreenAuto: the ring cannot replay what was
// asked), it first reads a paint of the session's screen, then the ring's bytes from the offset
// the paint stands for (AttachInfo.Offset, AttachInfo.Screen). Otherwise it reads from o.From
// as Attach's viewer does.
//
// A paint is caught up to at least the output's end when the viewer declared its size (and so
// From), whatever that takes (at most the ring and the screen's backlog), and beyond that to
// the output's end within screenWait.
// It may wait for the screen's lock and its catch-up: callers on a socket's read loop run it
// on a goroutine of their own.
func (r *Registry) AttachWith(id, owner string, o AttachOptions, wake func()) (*Viewer, AttachInfo, error) {
	r.mu.Lock()
	s, err := r.lookupLocked(id, owner)
	r.mu.Unlock()
	if err != nil {
		return nil, AttachInfo{}, fmt.Errorf("attach: %w", err)
	}
	sc := s.scr
	paint := sc != nil && s.paints(o)
	if paint {
		// Lock order: screen.mu, then Registry.mu (the subscription checks ownership and the
		// state again), then Session.resizeMu and Session.mu.
		sc.mu.Lock()
		defer sc.mu.Unlock()
	}
	v, info, err := r.attach(id, owner, o.From, wake, o.Passive)
	if err != nil {
		return nil, info, err
	}
	if o.Size != (Size{}) && !o.Passive {
		// A failure is the session closing, which the viewer learns from its binding.
		_, _ = v.Resize(o.Size.Cols, o.Size.Rows)
	}
	if !paint {
		return v, info, nil
	}
	if h := r.opts.testHookBeforePaint; h != nil {
		h(s)
	}
	// The paint stands at least for the output up to here: the size just declared is in it.
	s.mu.Lock()
	least := max(o.From, s.ring.end)
	s.mu.Unlock()
	snap := s.paintLocked(least)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Nothing has read the viewer yet (its binding is not published): it starts over at the
	// paint. Should the ring have dropped the paint's offset meanwhile (a stream faster than
	// the ring is long), the viewer's first read reports those bytes as a gap.
	v.next, v.start, v.paint = snap.Offset, snap.Offset, snap.Paint
	s.maybeResumeLocked() // a reader paused for the viewer's first offset may go on
	info.Offset = snap.Offset
	// The attach takes effect at the paint, which caught up at least to the end read at the
	// subscription: the end (and so the result's live) is the paint's offset.
	info.End = snap.Offset
	info.Screen, info.ScreenLost = len(snap.Paint), snap.Lost
	info.ScreenCols, info.ScreenRows = snap.Cols, snap.Rows
	info.Lost = 0
	if o.From >= 0 {
		// What the ring no longer held of what was asked; the paint stands for it.
		info.Lost = max(min(snap.Offset, s.ring.start)-o.From, 0)
	}
	return v, info, nil
}

// Capture returns owner's session id's screen (Session.Capture): a session that is closing
// still has one, up to its kill point.
func (r *Registry) Capture(id, owner string, ansi bool, scrollback int) (ScreenSnapshot, error) {
	r.mu.Lock()
	s, err := r.lookupLocked(id, owner)
	r.mu.Unlock()
	if err != nil {
		return ScreenSnapshot{}, fmt.Errorf("capture %s: %w", id, err)
	}
	return s.Capture(ansi, scrollback) // its errors name the session
}

// WouldPaint reports whether an attach with o of owner's session id would start with a paint
// (false for an id it does not know): a hint for where to run the attach, which decides again.
func (r *Registry) WouldPaint(id, owner string, o AttachOptions) bool {
	r.mu.Lock()
	s, err := r.lookupLocked(id, owner)
	r.mu.Unlock()
	return err == nil && s.scr != nil && s.paints(o)
}

// paints reports whether an attach with o starts with a paint of the screen.
func (s *Session) paints(o AttachOptions) bool {
	switch o.Screen {
	case ScreenAlways:
		return true
	case ScreenNever:
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o.From < 0 {
		return s.ring.start > 0
	}
	return o.From < s.ring.start
}

// List returns owner's sessions, oldest first.
func (r *Registry) List(owner string) []Info {
	r.mu.Lock()
	ss := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		if s.owner == owner {
			ss = append(ss, s)
		}
	}
	r.mu.Unlock()
	out := make([]Info, 0, len(ss))
	for _, s := range ss {
		out = append(out, s.Info())
	}
	sortInfos(out)
	return out
}

// Snapshot returns every registered session, for the reaper's selection pass.
func (r *Registry) Snapshot() []*Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		out = append(out, s)
	}
	return out
}

// Len returns the number of registered sessions.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// removeLocked deletes s by compare-and-delete and leaves a tombstone. r.mu must be held, and
// closing must have begun (beginCloseLocked).
func (r *Registry) removeLocked(s *Session, reason Reason) {
	if r.sessions[s.id] != s {
		return
	}
	delete(r.sessions, s.id)
	r.observe(s, false)
	s.mu.Lock() // lock order: r.mu, then s.mu
	done, res := s.killDone, s.killRes
	s.mu.Unlock()
	if len(r.goneFIFO) >= tombstones {
		delete(r.gone, r.goneFIFO[0])
		r.goneFIFO = r.goneFIFO[1:]
	}
	r.gone[s.id] = tombstone{owner: s.owner, reason: reason, done: done, res: res, pid: s.pid}
	r.goneFIFO = append(r.goneFIFO, s.id)
}

// Kill ends owner's session id: it marks the kill point, removes the session, and tears it
// down (see Session.teardown). A Kill of a session already closing (killed, reaped or shut down,
// and still remembered by its tombstone) waits for that teardown and returns its result.
func (r *Registry) Kill(ctx context.Context, id, owner string) (KillResult, error) {
	r.mu.Lock()
	s, err := r.lookupLocked(id, owner)
	if err != nil {
		t, gone := r.gone[id]
		r.mu.Unlock()
		if gone && t.owner == owner && t.done != nil {
			return waitKill(ctx, id, t.done, t.res)
		}
		return KillResult{}, fmt.Errorf("kill: %w", err)
	}
	s.mu.Lock()
	first := s.beginCloseLocked(ReasonKilled)
	done, res := s.killDone, s.killRes
	s.mu.Unlock()
	r.removeLocked(s, ReasonKilled)
	r.mu.Unlock()
	if first {
		return s.teardown(ctx), nil
	}
	return waitKill(ctx, id, done, res)
}

// waitKill waits for a teardown another caller runs and returns its result.
func waitKill(ctx context.Context, id string, done <-chan struct{}, res *KillResult) (KillResult, error) {
	select {
	case <-done:
		out := *res
		out.Signals = slices.Clone(out.Signals)
		return out, nil
	case <-ctx.Done():
		return KillResult{}, fmt.Errorf("kill %s: %w", id, ctx.Err())
	}
}

// ReapReason says whether s is a reap victim at now: its process has exited (reason exited,
// whatever its viewers), or it has had no viewer and no lease for longer than grace (reason
// reaped). The reaper's selection uses it on a snapshot; Claim re-checks it under the locks.
func (s *Session) ReapReason(now time.Time, grace time.Duration) (Reason, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reapReasonLocked(now, grace)
}

func (s *Session) reapReasonLocked(now time.Time, grace time.Duration) (Reason, bool) {
	if s.state != StateRunning {
		return "", false
	}
	select {
	case <-s.exited:
		return ReasonExited, true
	default:
	}
	if len(s.viewers) == 0 && !s.unwatchedSince.IsZero() &&
		now.Sub(s.unwatchedSince) > grace && !now.Before(s.leaseUntil) {
		return ReasonReaped, true
	}
	return "", false
}

// Claim is the reaper's atomic re-check: under the registry lock and the session lock it
// verifies that id still maps to s and that s is still a victim at now (ReapReason), and if so
// marks the kill point and removes it. The claimed session is then torn down with
// Registry.Teardown, with no lock held.
func (r *Registry) Claim(id string, s *Session, now time.Time, grace time.Duration) (Reason, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[id] != s {
		return "", false
	}
	s.mu.Lock()
	reason, ok := s.reapReasonLocked(now, grace)
	if ok {
		ok = s.beginCloseLocked(reason)
	}
	s.mu.Unlock()
	if ok {
		r.removeLocked(s, reason)
	}
	return reason, ok
}

// Teardown ends s, normally a session Claim returned true for. Call it with no lock held.
//
// It is safe on any session: one nobody claimed gets its kill point (reason killed) and leaves
// r as Kill would have it (a tombstone), so it is never left registered but not running, where
// no claim could remove it; a session r never held (an adoption that failed) is just torn
// down. A second call waits for the first teardown and returns its result.
func (r *Registry) Teardown(ctx context.Context, s *Session) KillResult {
	r.mu.Lock()
	s.mu.Lock()
	s.beginCloseLocked(ReasonKilled) // false when a claim or a kill began it: fine
	s.mu.Unlock()
	r.removeLocked(s, ReasonKilled) // nothing when a claim or a kill removed it, or r never held it
	r.mu.Unlock()
	return s.teardown(ctx)
}

// Lease keeps owner's session id from being reaped as idle until now+ttl (ttl 0 ends a lease).
func (r *Registry) Lease(id, owner string, ttl time.Duration) (time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := r.lookupLocked(id, owner)
	if err != nil {
		return time.Time{}, fmt.Errorf("lease: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaseUntil = r.now().Add(ttl)
	return s.leaseUntil, nil
}

// Shutdown refuses new sessions and kills every session in parallel with reason shutdown. Each
// kill runs to its end (HUP, TERM, KILL, then the cgroup) whatever ctx says: ctx bounds only
// how long Shutdown waits for them, never the escalation. It returns ctx's error when the kills
// had not all finished, and an error counting the survivors when processes outlived their
// kill. A later call starts nothing and waits for the kills the first one started.
func (r *Registry) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	var victims []*Session
	for _, s := range r.sessions {
		s.mu.Lock()
		if s.beginCloseLocked(ReasonShutdown) {
			victims = append(victims, s)
		}
		s.mu.Unlock()
		r.removeLocked(s, ReasonShutdown)
	}
	kctx := context.WithoutCancel(ctx)
	for _, s := range victims {
		r.wg.Go(func() {
			if res := s.teardown(kctx); res.Survivors > 0 {
				r.survivors.Add(int64(res.Survivors))
				r.survivorSessions.Add(1)
			}
		})
	}
	r.mu.Unlock()
	done := make(chan struct{})
	// Ends when every kill has: when ctx ends first, it outlives this call (bounded by the kills'
	// own escalation), and a later Shutdown waits on r.wg again.
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("shutdown: kills still running: %w", ctx.Err())
	}
	// The recordings' ends: their last output and markers written (each within its own bound).
	select {
	case <-r.opts.recordings.ends.idle():
	case <-ctx.Done():
		r.opts.Logger.Warn("shutdown: recordings still writing", "err", ctx.Err())
	}
	if n := r.survivors.Load(); n > 0 {
		return fmt.Errorf("shutdown: %d processes of %d sessions %w", n, r.survivorSessions.Load(), ErrSurvivors)
	}
	return nil
}

func sortInfos(in []Info) {
	slices.SortFunc(in, func(a, b Info) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}
