package session

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"context"
	"errors"
	"fmt"
	"github.com/muxterm/muxterm/otel"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/record"
)

// This file holds a session's recording (internal/record): its output, sizes and markers
// (attach, detach, kill, exit), and its input when RecordOptions.Input says so, in one asciicast
// file per session, <RecordOptions.Dir>/<session id>.cast. The recording is started before the
// reader (spawn), fed by the reader's ingest with a copy under Session.mu (never a write: the
// recorder's own goroutine writes), ended once both the program's exit and the end of its output
// are known, or when its teardown returns, and crosses an upgrade in place in the same file.

// RecordOptions say which sessions a registry records, and where.
type RecordOptions struct {
	// Dir is the directory of the recordings; "" records nothing.
	Dir string
	// All records every session; otherwise only those whose Spec.Record asks.
	All bool
	// Input records the input written to sessions too (passwords typed included).
	Input bool
	// QueueBytes bounds a recording's queue (record.DefaultQueueBytes by default); beyond it
	// output is dropped from the recording, never slowed.
	QueueBytes int
	// Retention bounds what Dir keeps (Registry.PruneRecordings).
	Retention record.Retention
	// OnEnd, if set, is told of each recording once it has ended and its file is closed: its
	// file and what its header says (a cluster node uploads it). It is called on the recording's
	// end goroutine, which Registry.Shutdown waits for: it must not block.
	OnEnd func(path string, info RecordingInfo)
}

// ErrRecordingOff is an open that asks for a recording on a registry that records nothing.
var ErrRecordingOff = errors.New("recording is off on this gateway (--record)")

// recordCloseWait bounds how long the end of a recording waits for its disk; recordCreateWait
// how long an open waits for its recording's file (a stalled disk refuses the open, naming it);
// recordHandWait how long an upgrade waits for all its sessions' recordings together.
const (
	recordCloseWait  = 5 * time.Second
	recordCreateWait = 2 * time.Second
	recordHandWait   = time.Second
)

// startRecording creates id's recording if spec asks for one or every session is recorded; a
// nil recorder and nil error when none is wanted.
func startRecording(id string, spec Spec, argv []string, opts *Options, now time.Time) (*record.Recorder, error) {
	ro := opts.Record
	if ro.Dir == "" {
		if spec.Record {
			return nil, ErrRecordingOff
		}
		return nil, nil
	}
	if !ro.All && !spec.Record {
		return nil, nil
	}
	if w := opts.testRecordWriter; w != nil {
		return record.New(w, now, opts.recordOptions()), nil
	}
	h := record.Header{Width: spec.Cols, Height: spec.Rows, Command: strings.Join(argv, " "),
		Title: spec.Name, Env: map[string]string{"TERM": "xterm-256color", "SHELL": opts.Shell},
		Muxterm: &record.Origin{Session: id, Owner: spec.Owner}}
	path := RecordingPath(ro.Dir, id)
	type created struct {
		rec *record.Recorder
		err error
	}
	// The file's creation on a goroutine of its own: an open(2) on a stalled mount does not
	// return, and the open's request must. A creation that comes back late is undone there.
	done := make(chan created, 1)
	abandoned := make(chan struct{})
	go func() {
		rec, err := record.Create(path, h, now, opts.recordOptions())
		select {
		case done <- created{rec, err}:
		case <-abandoned:
			if rec != nil {
				_ = rec.Close(context.Background())
				_ = os.Remove(path)
			}
		}
	}()
	t := time.NewTimer(recordCreateWait)
	defer t.Stop()
	select {
	case c := <-done:
		if c.err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSpawn, c.err)
		}
		return c.rec, nil
	case <-t.C:
		close(abandoned)
		return nil, fmt.Errorf("%w: record: the recordings' directory %s did not answer within %v", ErrSpawn, ro.Dir, recordCreateWait)
	}
}

func (o *Options) recordOptions() record.Options {
	in := o.Instruments
	return record.Options{QueueBytes: o.Record.QueueBytes, Log: o.Logger,
		OnDrop: func(n int64) { in.RecordDropped.Add(context.Background(), n) }}
}

// RecordingPath is the file of session id's recording in dir.
func RecordingPath(dir, id string) string { return filepath.Join(dir, id+record.Ext) }

// Recording reports whether the session is recorded and where in its recording it is now (the
// recording's id is the session's).
func (s *Session) Recording() (offset time.Duration, ok bool) {
	if s.rec == nil {
		return 0, false
	}
	return s.rec.Offset(), true
}

// recordMarker adds a marker to the recording, if any.
func (s *Session) recordMarker(label string) {
	if s.rec != nil {
		s.rec.Marker(label)
	}
}

// exitLabel is the exit's marker: "exit 3", "exit signal TERM".
func exitLabel(e ExitStatus) string {
	if e.Signal != 0 {
		return "exit signal " + strings.TrimPrefix(unix.SignalName(e.Signal), "SIG")
	}
	return "exit " + strconv.Itoa(e.Code)
}

// endRecordingIfDone ends the recording once the program has exited and its output has ended:
// the exit's marker then follows the program's last output.
func (s *Session) endRecordingIfDone() {
	if s.rec != nil && s.readEnded.Load() && isClosed(s.exited) {
		s.endRecording()
	}
}

// recordings are a registry's recordings still being written, each from its start (or its
// adoption after an upgrade) until its end has written its last event and closed its file, and
// the goroutines of those ends, which Registry.Shutdown waits for. A recording's session may
// leave the registry before its end is written: the listing asks here, not the session.
type recordings struct {
	ends inFlight
	// mu guards writing; nothing is taken under it.
	mu      sync.Mutex
	writing map[string]*record.Recorder
}

// add counts rec, session id's recording, as being written.
func (rs *recordings) add(id string, rec *record.Recorder) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.writing == nil {
		rs.writing = make(map[string]*record.Recorder)
	}
	rs.writing[id] = rec
}

// done says rec, session id's recording, is written to its end, or discarded. An entry of
// another recorder under the same id (none is expected: ids are not reused) is left alone.
func (rs *recordings) done(id string, rec *record.Recorder) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.writing[id] == rec {
		delete(rs.writing, id)
	}
}

// active returns session id's recording while it is being written, nil once it is not.
func (rs *recordings) active(id string) *record.Recorder {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.writing[id]
}

// inFlight counts goroutines under way and says when none is. Unlike a sync.WaitGroup, it may
// start one while another goroutine waits (a reader that ends after Shutdown's kills ends its
// recording then).
type inFlight struct {
	mu   sync.Mutex
	n    int
	none chan struct{} // closed while n is 0; nil before the first goroutine
}

// Go runs f on a goroutine of its own, counted until it returns.
func (w *inFlight) Go(f func()) {
	w.mu.Lock()
	if w.n == 0 {
		w.none = make(chan struct{})
	}
	w.n++
	w.mu.Unlock()
	go func() {
		defer func() {
			w.mu.Lock()
			if w.n--; w.n == 0 {
				close(w.none)
			}
			w.mu.Unlock()
		}()
		f()
	}()
}

// idle returns a channel closed once no goroutine it counts is under way.
func (w *inFlight) idle() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return w.none
}

// endRecording ends the recording (once): what is queued is written on a goroutine of its own,
// for at most recordCloseWait, so a stalled disk delays no teardown.
func (s *Session) endRecording() {
	if s.rec == nil {
		return
	}
	if !s.recEnded.CompareAndSwap(false, true) {
		return
	}
	rec := s.rec
	if e, ok := s.Exit(); ok {
		rec.Marker(exitLabel(e))
	}
	s.opts.recordings.ends.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), recordCloseWait)
		defer cancel()
		if h := s.opts.testHookRecordingEnd; h != nil {
			h(s)
		}
		err := rec.Close(ctx)
		s.opts.recordings.done(s.id, rec)
		if err != nil {
			s.opts.Logger.Warn("recording: end", "session", s.id, "err", err)
		}
		if on := s.opts.Record.OnEnd; on != nil {
			f, info, err := OpenRecordingFile(rec.Path(), s.id)
			if err != nil {
				s.opts.Logger.Warn("recording: ended, but its file does not read back", "session", s.id, "err", err)
				return
			}
			f.Close()
			on(rec.Path(), info)
		}
	})
}

// handRecording names the recording in h, for the next image to append to: its file, where it
// got to, and what flushRecordings could not write.
func (s *Session) handRecording(h *HandedSession) {
	if s.rec == nil || s.recEnded.Load() {
		return // none, or it ended: the next image records nothing more
	}
	h.Recording, h.RecordingAt, h.RecordingUnwritten = s.rec.Path(), s.rec.Offset(), s.rec.Pending()
}

// flushRecordings marks the upgrade in ss's recordings and writes what they queued, all at
// once, for at most recordHandWait: the readers have stopped, so nothing more comes, and what a
// stalled disk did not take by then is handed over as not recorded (handRecording).
func flushRecordings(ctx context.Context, ss []*Session) {
	ctx, cancel := context.WithTimeout(ctx, recordHandWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range ss {
		if s.rec == nil || s.recEnded.Load() {
			continue
		}
		s.rec.Marker("upgrade in place")
		wg.Go(func() {
			if err := s.rec.Flush(ctx); err != nil {
				s.opts.Logger.Warn("recording: handover", "session", s.id, "err", err)
			}
		})
	}
	wg.Wait()
}

// adoptRecording continues the handed recording in its file.
func (s *Session) adoptRecording(h *HandedSession) {
	if h.Recording == "" {
		return
	}
	rec, err := record.Resume(h.Recording, h.RecordingAt, h.RecordingUnwritten, s.opts.recordOptions())
	if err != nil {
		s.opts.Logger.Warn("recording: not continued after the upgrade", "session", s.id, "err", err)
		return
	}
	s.rec = rec
	s.opts.recordings.add(s.id, rec)
}

// PruneRecordings removes the recordings RecordOptions.Retention bounds out, never one being
// written.
func (r *Registry) PruneRecordings(now time.Time) (record.Pruned, error) {
	ro := r.opts.Record
	if ro.Dir == "" {
		return record.Pruned{}, nil
	}
	return record.Prune(ro.Dir, ro.Retention, now, func(path string) bool {
		id := strings.TrimSuffix(filepath.Base(path), record.Ext)
		if r.opts.recordings.active(id) != nil {
			return true // its session may have left the registry before its end is written
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		_, ok := r.sessions[id]
		return ok
	})
}

// recordInput records input the session took, when RecordOptions.Input says so.
func (s *Session) recordInput(p []byte) {
	if s.rec != nil && s.opts.Record.Input {
		s.rec.Input(p)
	}
}

// recordingAttrs names on span the session's recording and the point in it now, so a trace
// leads to that moment of the recording.
func (s *Session) recordingAttrs(span trace.Span) {
	if off, ok := s.Recording(); ok {
		span.SetAttributes(attribute.String(otel.AttrRecordingID, s.id),
			attribute.Float64(otel.AttrRecordingOffset, off.Seconds()))
	}
}

// ErrUnknownRecording is a recording that does not exist or that the asker may not see.
var ErrUnknownRecording = errors.New("unknown recording")

// RecordingInfo describes one recording of Options.Record.Dir.
type RecordingInfo struct {
	ID, Owner, Name, Command string
	Started                  time.Time
	Cols, Rows               int
	Bytes                    int64
	Active                   bool // still being written here: its last event is not in its file yet
}

// Recordings lists the recordings owner may see (every one for an admin), oldest first; only
// session id's when id is not "".
func (r *Registry) Recordings(owner string, admin bool, id string) ([]RecordingInfo, error) {
	dir := r.opts.Record.Dir
	if dir == "" || (id != "" && !validID(id)) {
		return nil, nil
	}
	var ids []string
	if id != "" {
		ids = []string{id}
	} else {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("list recordings: %w", err)
		}
		for _, e := range entries {
			if n, ok := strings.CutSuffix(e.Name(), record.Ext); ok && e.Type().IsRegular() && validID(n) {
				ids = append(ids, n)
			}
		}
	}
	var out []RecordingInfo
	for _, id := range ids {
		f, info, err := r.openRecording(id)
		if err != nil {
			continue // gone meanwhile, or not a recording of this gateway's
		}
		f.Close()
		if admin || info.Owner == owner {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b RecordingInfo) int { return a.Started.Compare(b.Started) })
	return out, nil
}

// openRecording opens recording id's file (never through a symbolic link) and reads its header
// from it. The caller closes the file.
func (r *Registry) openRecording(id string) (*os.File, RecordingInfo, error) {
	// Asked before the file's size is read: a recording that is not being written now has its
	// last event in the file already, while one that ends after this question may grow after
	// the size is read, and is listed as active.
	rec := r.opts.recordings.active(id)
	f, info, err := OpenRecordingFile(RecordingPath(r.opts.Record.Dir, id), id)
	if err != nil {
		return nil, RecordingInfo{}, err
	}
	if h := r.opts.testHookRecordingSized; h != nil {
		h(id) // the question above comes before OpenRecordingFile's size, not here
	}
	if rec != nil {
		// Still being written: only its complete lines are the recording's yet.
		info.Active, info.Bytes = true, min(info.Bytes, rec.Written())
	}
	return f, info, nil
}

// OpenRecordingFile opens the recording of session id at path (never through a symbolic link)
// and reads its header from it: a file whose header does not name session id is refused. The
// caller closes the file.
func OpenRecordingFile(path, id string) (*os.File, RecordingInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, RecordingInfo{}, err
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, RecordingInfo{}, fmt.Errorf("%s: not a regular file (%v)", path, err)
	}
	p, err := record.NewParser(io.NewSectionReader(f, 0, record.MaxLine))
	if err != nil {
		f.Close()
		return nil, RecordingInfo{}, err
	}
	h := p.Header
	if h.Muxterm == nil || h.Muxterm.Session != id {
		f.Close()
		return nil, RecordingInfo{}, fmt.Errorf("%s: not a muxterm recording of session %s", path, id)
	}
	return f, RecordingInfo{ID: id, Owner: h.Muxterm.Owner, Name: h.Title, Command: h.Command,
		Started: time.Unix(h.Timestamp, 0), Cols: h.Width, Rows: h.Height, Bytes: st.Size()}, nil
}

// ReadRecording reads up to n bytes of recording id's file from off, for owner (any recording
// for an admin): the bytes (none, not nil, at or past the end), the file's size (of a recording
// still being written: up to its last complete line), and ErrUnknownRecording for a recording
// that does not exist or is another principal's.
func (r *Registry) ReadRecording(id, owner string, admin bool, off int64, n int) ([]byte, int64, error) {
	if r.opts.Record.Dir == "" || !validID(id) {
		return nil, 0, fmt.Errorf("read recording %s: %w", id, ErrUnknownRecording)
	}
	f, info, err := r.openRecording(id)
	if err != nil {
		return nil, 0, fmt.Errorf("read recording %s: %w", id, ErrUnknownRecording)
	}
	defer f.Close()
	if !admin && info.Owner != owner {
		return nil, 0, fmt.Errorf("read recording %s: %w", id, ErrUnknownRecording)
	}
	if off >= info.Bytes {
		return []byte{}, info.Bytes, nil
	}
	buf := make([]byte, min(int64(n), info.Bytes-off))
	k, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, fmt.Errorf("read recording %s: %w", id, err)
	}
	return buf[:k], info.Bytes, nil
}

// validID reports whether id is a session id (32 lowercase hex digits): the only names of
// recordings this package opens.
func validID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range []byte(id) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// discardRecording ends and removes the recording of a session whose start failed: no session
// of that id ever ran.
func (s *Session) discardRecording() {
	if s.rec == nil || !s.recEnded.CompareAndSwap(false, true) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), recordCloseWait)
	defer cancel()
	if err := s.rec.Close(ctx); err != nil {
		s.opts.Logger.Warn("recording: discard", "session", s.id, "err", err)
	}
	if err := os.Remove(s.rec.Path()); err != nil {
		s.opts.Logger.Warn("recording: discard", "session", s.id, "err", err)
	}
	s.opts.recordings.done(s.id, s.rec)
}
