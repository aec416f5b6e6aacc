package session

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/muxterm/muxterm/internal/vt"
)

// This file holds a session's screen: a terminal model (internal/vt) fed with every output
// byte, so that an attach the ring cannot serve byte for byte is painted from the screen
// instead of a tail of bytes, and scripts can read what is on it (Capture).
//
// The model never sits on the reader's path. The reader only appends to the ring; the model
// reads the ring behind it, by offset, like a viewer that never holds the reader back:
//   - the feeder (one process-wide goroutine, alive while some session waits for it) catches a
//     model up once it is screenFeedLag bytes behind the ring's end, so a stream costs one
//     wake-up per screenFeedLag bytes and a keystroke's echo none;
//   - an attach that paints, a capture and a handover catch the model up themselves, under
//     screen.mu, before they read it.
// A model that falls behind the ring's start does not lose what the ring drops: the reader
// copies bytes the model has not read into the screen's backlog as they leave the ring (a
// copy, under Session.mu, no parsing), up to maxBacklog bytes. Only a model more than that
// behind (a stream far faster than the model) skips the oldest, counts them in screen.lost, and
// goes on: the program is never slowed for its screen.
//
// Sizes: a change of the PTY's size is queued with the ring's end at that moment
// (Session.screenSizes, under Session.mu), and the model applies it after exactly the bytes
// read before it, as a terminal sees a resize between two reads.

// screenFeedLag is how far behind the ring's end a model may fall before the feeder catches it
// up (at most a quarter of the ring, so a model keeps up well before the ring drops its bytes).
const screenFeedLag = 64 << 10

// catchUpBufs are the catch-ups' scratch buffers for the ring's bytes, 32 KiB each.
var catchUpBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// screenWait bounds how long an attach or a capture spends catching a model up: past it, the
// model is read where it got to and the ring's bytes from there follow the paint.
const screenWait = 50 * time.Millisecond

// maxBacklog bounds the bytes a screen keeps that the ring dropped before the model read them.
const maxBacklog = 4 << 20

// maxScreenSizes bounds the sizes queued for a model that lags: in a resize storm only the
// newest are kept, and the bytes between the dropped ones are read at the size before them.
const maxScreenSizes = 64

// screen is a session's terminal model and where it has read the output up to.
type screen struct {
	// mu guards term, off and lost. It is never taken with Registry.mu or Session.mu held (the
	// order: Registry.mu).
	mu   sync.Mutex
	term *vt.Terminal
	off  int64 // offset of the next output byte the model reads
	lost int64 // output bytes the model never read: the ring had dropped them (ever)

	// offSeen is where the model's reading has got to: the offset after the last byte it
	// copied out (under Session.mu) to parse, for the reader's checks (Session.ingest), which
	// run under Session.mu and so may not take mu.
	offSeen atomic.Int64

	// backlog holds output the ring dropped before the model copied it out, from offset
	// backlogOff on; both are guarded by Session.mu (written by the reader, read and trimmed by
	// the catch-up).
	backlog    []byte
	backlogOff int64
	// lagMax is the furthest the model has been behind the ring's end, seen when output was
	// ingested, for the benchmarks; guarded by Session.mu.
	lagMax int64
}

// sizeAt is a size applied to the PTY and the output offset from which it holds.
type sizeAt struct {
	off        int64
	cols, rows int
}

func newScreen(cols, rows int, o *Options) *screen {
	return &screen{term: vt.New(cols, rows, vt.Options{ScrollbackLines: o.ScreenScrollback})}
}

// ScreenMode says whether an attach is painted from the session's screen.
type ScreenMode int

const (
	// ScreenAuto paints when the ring cannot replay what was asked: from older than the ring,
	// or no from while the ring has dropped bytes. Otherwise the replay is raw.
	ScreenAuto ScreenMode = iota
	// ScreenAlways paints whatever from was.
	ScreenAlways
	// ScreenNever replays raw bytes from the ring, with lost reporting what it no longer holds.
	ScreenNever
)

// queueScreenLocked hands the session to the feeder when its model lags screenFeedLag bytes
// behind the ring's end. s.mu must be held; it never blocks.
func (s *Session) queueScreenLocked() {
	sc := s.scr
	if sc == nil {
		return
	}
	lag := s.ring.end - sc.offSeen.Load()
	sc.lagMax = max(sc.lagMax, lag)
	if s.screenQueued || lag < int64(min(screenFeedLag, max(s.ring.max/4, 1))) {
		return
	}
	s.screenQueued = true
	s.opts.feeder.enqueue(s)
}

// keepForScreenLocked copies into the backlog the bytes that appending n bytes to the ring is
// about to drop and the model has not copied out yet. s.mu must be held.
func (s *Session) keepForScreenLocked(n int) {
	sc := s.scr
	if sc == nil {
		return
	}
	r := &s.ring
	// The ring's start after the append; a chunk longer than the ring (never one of the
	// reader's) would drop some of its own bytes too, which the model then never sees.
	drop := min(max(r.start, r.end+int64(n)-int64(r.max)), r.end)
	from := max(sc.offSeen.Load(), r.start, sc.backlogOff+int64(len(sc.backlog)))
	if from >= drop {
		return
	}
	if len(sc.backlog) == 0 {
		sc.backlogOff = from
	}
	k := int(drop - from)
	at := len(sc.backlog)
	sc.backlog = slices.Grow(sc.backlog, k)[:at+k]
	r.copyOut(sc.backlog[at:], from)
	if len(sc.backlog) > maxBacklog {
		// The model is more than maxBacklog behind: the oldest bytes go, down to three
		// quarters of the bound (so the move is paid once a quarter of it, not per chunk), and
		// it counts them as lost when it gets there.
		over := len(sc.backlog) - maxBacklog*3/4
		sc.backlog = append(sc.backlog[:0], sc.backlog[over:]...)
		sc.backlogOff += int64(over)
	}
}

// screenReadLocked copies output from offset off for the model: from the backlog while off is
// in it, else from the ring (readAt's results). It publishes the model's progress and drops the
// backlog once the model has copied all of it. s.mu must be held.
func (s *Session) screenReadLocked(p []byte, off int64) (n int, lost int64, next int64) {
	sc := s.scr
	if end := sc.backlogOff + int64(len(sc.backlog)); len(sc.backlog) > 0 && off < end {
		if off < sc.backlogOff {
			lost = sc.backlogOff - off
			off = sc.backlogOff
		}
		n = copy(p, sc.backlog[off-sc.backlogOff:])
		next = off + int64(n)
	} else {
		n, lost, next = s.ring.readAt(p, off)
	}
	if end := sc.backlogOff + int64(len(sc.backlog)); next >= end {
		sc.backlog = nil
	}
	sc.offSeen.Store(next)
	return n, lost, next
}

// noteSizeLocked queues a size applied to the PTY for the model. s.mu must be held.
func (s *Session) noteSizeLocked(cols, rows int) {
	if s.scr == nil {
		return
	}
	if len(s.screenSizes) >= maxScreenSizes {
		s.screenSizes = append(s.screenSizes[:0], s.screenSizes[1:]...)
	}
	s.screenSizes = append(s.screenSizes, sizeAt{off: s.ring.end, cols: cols, rows: rows})
}

// catchUpLocked feeds the model the ring's bytes from where it is, with the sizes queued among
// them, until it has read the output's end, or until deadline (zero: no deadline) or budget
// bytes (0: no bound). It reports whether the model reached the end. s.scr.mu must be held;
// s.mu is taken for each chunk copied.
func (s *Session) catchUpLocked(deadline time.Time, budget int) (done bool) {
	sc := s.scr
	bp := catchUpBufs.Get().(*[]byte) // an idle session holds no scratch
	defer catchUpBufs.Put(bp)
	buf := *bp
	fed := 0
	for {
		s.mu.Lock()
		n, lost, next := s.screenReadLocked(buf, sc.off)
		end := s.ring.end
		var sizes []sizeAt
		i := 0
		for i < len(s.screenSizes) && s.screenSizes[i].off <= next {
			i++
		}
		if i > 0 {
			sizes = append(sizes, s.screenSizes[:i]...)
			s.screenSizes = append(s.screenSizes[:0], s.screenSizes[i:]...)
		}
		s.mu.Unlock()
		start := sc.off + lost // the offset of buf[0]
		sc.lost += lost
		p := buf[:n]
		for _, z := range sizes {
			if k := z.off - start; k > 0 {
				sc.term.Write(p[:k])
				p, start = p[k:], z.off
			}
			sc.term.Resize(z.cols, z.rows)
		}
		sc.term.Write(p)
		sc.off = next
		fed += n
		if next >= end {
			return true
		}
		if (!deadline.IsZero() && time.Now().After(deadline)) || (budget > 0 && fed >= budget) {
			return false
		}
		if deadline.IsZero() {
			// The feeder (or a handover) between two chunks: let a keystroke's echo, waiting
			// for a core, go first.
			runtime.Gosched()
		}
	}
}

// ScreenSnapshot is a painting of a session's screen and where the output goes on from it.
type ScreenSnapshot struct {
	// Paint written into a fresh terminal of size Cols×Rows reproduces the screen as it stood
	// after the output byte before Offset (internal/vt's AppendSnapshot).
	Paint      []byte
	Offset     int64
	Cols, Rows int
	// Lost counts output bytes the model never read (it fell behind the ring), over the
	// session's life: 0 means the screen is exact.
	Lost int64
	// Modes are the screen's modes.
	Modes vt.Modes
}

// Capture returns the session's screen, caught up to the output's end (within screenWait), as
// plain text (ansi false: one line per row, trailing blanks trimmed) or as a painting (ansi
// true), with scrollback lines of history above it (up to what the model keeps).
func (s *Session) Capture(ansi bool, scrollback int) (ScreenSnapshot, error) {
	sc := s.scr
	if s.pipe != nil {
		return ScreenSnapshot{}, fmt.Errorf("capture %s: %w", s.id, ErrNoPipesScreen)
	}
	if sc == nil {
		return ScreenSnapshot{}, fmt.Errorf("capture %s: %w", s.id, ErrNoScreen)
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	s.catchUpLocked(time.Now().Add(screenWait), 0)
	cols, rows := sc.term.Size()
	snap := ScreenSnapshot{Offset: sc.off, Cols: cols, Rows: rows, Lost: sc.lost, Modes: sc.term.Modes()}
	o := vt.SnapshotOptions{ScrollbackLines: scrollback}
	if ansi {
		snap.Paint = sc.term.AppendSnapshot(nil, o)
	} else {
		snap.Paint = sc.term.AppendText(nil, o)
	}
	return snap, nil
}

// paintLocked catches the model up to at least offset least (and the ring's start), then to
// the output's end within screenWait, and paints it with the history the session's options
// give. s.scr.mu must be held.
func (s *Session) paintLocked(least int64) ScreenSnapshot {
	sc := s.scr
	s.mu.Lock()
	least = max(least, s.ring.start)
	s.mu.Unlock()
	for sc.off < least { // bounded: the ring and the backlog
		s.catchUpLocked(time.Time{}, int(min(least-sc.off, 1<<30)))
	}
	s.catchUpLocked(time.Now().Add(screenWait), 0)
	cols, rows := sc.term.Size()
	paint := sc.term.AppendSnapshot(nil, vt.SnapshotOptions{ScrollbackLines: s.opts.ScreenScrollback})
	// A sequence the program had begun and not finished when the output ended: the paint ends
	// inside it too, so the bytes that finish it are read as the rest of that sequence.
	paint = sc.term.AppendPending(paint)
	return ScreenSnapshot{Paint: paint, Offset: sc.off, Cols: cols, Rows: rows, Lost: sc.lost}
}

// handScreen paints s's screen into h for the next image, caught up to the output's end (the
// reading has stopped, so the end stays where it is). No registry lock may be held.
func (s *Session) handScreen(h *HandedSession) {
	sc := s.scr
	if sc == nil {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	s.catchUpLocked(time.Time{}, 0)
	h.Screen = sc.term.AppendSnapshot(nil, vt.SnapshotOptions{ScrollbackLines: s.opts.ScreenScrollback})
	h.Screen = sc.term.AppendPending(h.Screen)
	h.ScreenCols, h.ScreenRows = sc.term.Size()
	h.ScreenOffset, h.ScreenLost = sc.off, sc.lost
}

// adoptScreen gives an adopted session its screen: the painting the old image handed, or, from
// an image that kept none, one rebuilt from the ring (the bytes the ring had dropped are lost
// to it, and counted).
func (s *Session) adoptScreen(h *HandedSession) {
	if s.opts.NoScreen {
		return
	}
	if h.Screen == nil || h.ScreenCols <= 0 || h.ScreenRows <= 0 || h.ScreenOffset < s.ring.start || h.ScreenOffset > s.ring.end {
		s.scr = newScreen(h.Cols, h.Rows, s.opts)
		s.scr.off, s.scr.lost = s.ring.start, s.ring.start
		s.scr.offSeen.Store(s.ring.start)
		return
	}
	s.scr = newScreen(h.ScreenCols, h.ScreenRows, s.opts)
	s.scr.term.Write(h.Screen)
	s.scr.off, s.scr.lost = h.ScreenOffset, h.ScreenLost
	s.scr.offSeen.Store(h.ScreenOffset)
	if h.Cols != h.ScreenCols || h.Rows != h.ScreenRows {
		s.screenSizes = append(s.screenSizes, sizeAt{off: s.ring.end, cols: h.Cols, rows: h.Rows})
	}
}

// feedScreen is the feeder's turn at s: it catches the model up, at most feedBudget bytes, and
// hands s back to the feeder if it still lags. A session that is closing or closed is left
// where it is: nobody attaches to it any more, and a capture or a paint catches up by itself,
// so the feeder does not spend seconds on the backlog of a stream that was just killed.
func (s *Session) feedScreen() {
	s.mu.Lock()
	if s.state != StateRunning {
		s.screenQueued = false
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	sc := s.scr
	sc.mu.Lock()
	s.catchUpLocked(time.Time{}, feedBudget)
	sc.mu.Unlock()
	s.mu.Lock()
	s.screenQueued = false
	if s.state == StateRunning {
		s.queueScreenLocked()
	}
	s.mu.Unlock()
}

// feedBudget is the most the feeder reads for one session in a turn, so that a stream on one
// session does not keep the others' models waiting.
const feedBudget = 1 << 20

// screenFeeder is the goroutine that catches lagging models up, one session at a time, in the
// order they lagged. It runs only while some session waits for it: enqueue starts it, and it
// ends when its queue is empty.
type screenFeeder struct {
	// mu guards queue and running. Taken under Session.mu (enqueue); nothing is taken under it.
	mu      sync.Mutex
	queue   []*Session
	running bool
}

// feeder is the process-wide screenFeeder, every Registry's default.
var feeder screenFeeder

func (f *screenFeeder) enqueue(s *Session) {
	f.mu.Lock()
	f.queue = append(f.queue, s)
	start := !f.running
	f.running = true
	f.mu.Unlock()
	if start {
		go f.loop()
	}
}

// loop feeds the queued sessions until none is left.
func (f *screenFeeder) loop() {
	for {
		f.mu.Lock()
		if len(f.queue) == 0 {
			f.running = false
			f.queue = nil
			f.mu.Unlock()
			return
		}
		s := f.queue[0]
		f.queue = f.queue[1:]
		f.mu.Unlock()
		s.feedScreen()
	}
}
