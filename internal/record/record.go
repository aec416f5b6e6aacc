// Package record writes a session's recording in asciicast v2, the format asciinema, its
// player and agg read (https://docs.asciinema.org/manual/asciicast/v2): a header line, then one
// JSON array per event, [seconds, code, data], where the code is "o" (output), "i" (input), "r"
// (resize, "COLSxROWS") or "m" (a marker).
//
// A Recorder never slows the session it records. Output, Input, Resize and Marker copy the
// event into a bounded queue under the Recorder's own mutex and return; a goroutine of the
// Recorder's, started when the queue gets its first event and ended when it is empty, encodes and
// writes. When the disk is slow, stalled or full, the queue fills and further output is dropped:
// the recording then holds a marker saying how many bytes it lacks there (DropLabel), and OnDrop
// counts them. The Recorder's mutex is a leaf: it is taken under a session's locks and takes
// none.
package record

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"
)

// Ext is the extension of a recording's file.
const Ext = ".cast"

// DefaultQueueBytes bounds the event bytes a Recorder queues for its writer.
const DefaultQueueBytes = 1 << 20

// Header is the first line of an asciicast v2 file.
type Header struct {
	Version   int               `json:"version"`
	Width     int               `json:"width"`
	Height    int               `json:"height"`
	Timestamp int64             `json:"timestamp,omitempty"`
	Command   string            `json:"command,omitempty"`
	Title     string            `json:"title,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	// Muxterm names the recorded session and its owner (players ignore keys they do not know).
	Muxterm *Origin `json:"muxterm,omitempty"`
}

// Origin is the session a recording is of.
type Origin struct {
	Session string `json:"session"`
	Owner   string `json:"owner"`
}

// Options configure a Recorder. Every member is optional.
type Options struct {
	// QueueBytes bounds the queued events' data; default DefaultQueueBytes.
	QueueBytes int
	// OnDrop is called, with the Recorder's mutex held (it must not block or call back), with the
	// bytes of output or input dropped because the queue was full or a write failed.
	OnDrop func(n int64)
	// Log receives a write failure once per run of failures; default slog.Default().
	Log *slog.Logger
}

// The event codes of asciicast v2.
const (
	codeOutput = 'o'
	codeInput  = 'i'
	codeResize = 'r'
	codeMarker = 'm'
	codeDrop   = 'd' // ours: written as a marker (DropLabel)
)

type event struct {
	at   time.Duration // since the recording's start
	code byte
	data []byte
	n    int64 // codeDrop: the bytes dropped
}

// Recorder is one recording in progress.
type Recorder struct {
	path  string
	w     io.Writer
	file  *os.File // w when the recording is a file: truncated back after a failed write
	start time.Time
	opts  Options

	// mu guards the fields below; it is a leaf lock.
	mu      sync.Mutex
	q       []event
	qBytes  int
	writing bool          // a drain goroutine runs
	idle    chan struct{} // closed when the drain ends; a new one per drain
	closed  bool          // Close began: nothing more is queued
	dropped int64         // bytes dropped, ever
	lastAt  time.Duration // the latest event's time: times never go back
	written int64         // the file's size after the last complete write (good, under mu)

	// The drain's own state: only the one drain goroutine at a time touches these.
	good    int64 // the file's size after the last complete write
	failing bool
	carry   [2][]byte // an unfinished UTF-8 sequence at the end of the last output, input
	enc     bytes.Buffer
}

// Create starts a recording in a new file at path (mode 0600; an existing file is an error)
// and writes its header. start is the time its events count from.
func Create(path string, h Header, start time.Time, o Options) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("record: create %s: %w", path, err)
	}
	h.Version = 2
	if h.Timestamp == 0 {
		h.Timestamp = start.Unix()
	}
	line, err := json.Marshal(h)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("record: header: %w", err)
	}
	// The header is written here, not queued: a recording without one is no recording, and a
	// disk that cannot take its first line fails the start rather than every line after.
	n, err := f.Write(append(line, '\n'))
	if err != nil {
		f.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("record: header of %s: %w", path, err)
	}
	r := newRecorder(path, f, start, o)
	r.file, r.good, r.written = f, int64(n), int64(n)
	return r, nil
}

// Resume continues the recording at path (after an upgrade in place): events are appended to
// it, their times counted on from elapsed, the recording's time when it was handed over (this
// process's clock then starts at elapsed, whatever the wall clock did meanwhile), and unwritten
// bytes (what the handing image could not write) are marked as not recorded. A last line the
// file holds only part of (a write cut short) is cut off and marked too.
func Resume(path string, elapsed time.Duration, unwritten int64, o Options) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|oNoFollow, 0)
	if err != nil {
		return nil, fmt.Errorf("record: resume %s: %w", path, err)
	}
	size, cut, err := wholeLines(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("record: resume %s: %w", path, err)
	}
	if cut > 0 {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, fmt.Errorf("record: resume %s: cut a partial line: %w", path, err)
		}
	}
	r := newRecorder(path, f, time.Now().Add(-elapsed), o)
	r.file, r.good, r.written, r.lastAt = f, size, size, elapsed
	if n := unwritten + cut; n > 0 {
		r.mu.Lock()
		r.markDropLocked(0, n)
		r.mu.Unlock()
	}
	return r, nil
}

// wholeLines is the size of f up to its last newline, and how many bytes follow it.
func wholeLines(f *os.File) (size, cut int64, err error) {
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	end := st.Size()
	buf := make([]byte, 4096)
	for at := end; at > 0; {
		n := int64(len(buf))
		if n > at {
			n = at
		}
		at -= n
		if _, err := f.ReadAt(buf[:n], at); err != nil {
			return 0, 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return at + int64(i) + 1, end - (at + int64(i) + 1), nil
		}
	}
	return 0, end, nil
}

// New records into w, whose header the caller writes; for tests and other sinks.
func New(w io.Writer, start time.Time, o Options) *Recorder {
	return newRecorder("", w, start, o)
}

func newRecorder(path string, w io.Writer, start time.Time, o Options) *Recorder {
	if o.QueueBytes <= 0 {
		o.QueueBytes = DefaultQueueBytes
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Recorder{path: path, w: w, start: start, opts: o}
}

// Path is the recording's file, "" for New's.
func (r *Recorder) Path() string { return r.path }

// Start is the time the recording's events count from.
func (r *Recorder) Start() time.Time { return r.start }

// Offset is the time since the recording's start: where in the recording something happening
// now is (a span's attribute). It never goes back.
func (r *Recorder) Offset() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nowLocked()
}

// nowLocked is the recording's time now, never before the latest event's.
func (r *Recorder) nowLocked() time.Duration {
	at := time.Since(r.start)
	if at < r.lastAt {
		at = r.lastAt
	}
	r.lastAt = at
	return at
}

// Written is the size of the file's complete lines: what a reader of a recording still being
// written may read without meeting half a line.
func (r *Recorder) Written() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.written
}

// Pending is the output and input bytes queued and not yet taken by the writer.
func (r *Recorder) Pending() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, e := range r.q {
		if e.code == codeOutput || e.code == codeInput {
			n += int64(len(e.data))
		}
	}
	return n
}

// Dropped is the output and input bytes the recording lacks.
func (r *Recorder) Dropped() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// Output records p, the session's output (copied).
func (r *Recorder) Output(p []byte) { r.data(codeOutput, p) }

// Input records p, input written to the session (copied).
func (r *Recorder) Input(p []byte) { r.data(codeInput, p) }

// Resize records the terminal's new size.
func (r *Recorder) Resize(cols, rows int) {
	r.push(event{code: codeResize, data: []byte(strconv.Itoa(cols) + "x" + strconv.Itoa(rows))})
}

// Marker records a marker with label (attach, detach, kill, exit ...).
func (r *Recorder) Marker(label string) { r.push(event{code: codeMarker, data: []byte(label)}) }

func (r *Recorder) data(code byte, p []byte) {
	if len(p) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.qBytes+len(p) > r.opts.QueueBytes {
		r.dropLocked(int64(len(p)))
		return
	}
	r.pushLocked(event{at: r.nowLocked(), code: code, data: bytes.Clone(p)})
}

// push queues a small event (a marker, a size). The queue's bound holds for them too: beyond
// it a size replaces a size queued last, and anything else is dropped and marked as the bytes of
// its label, so a flood of resizes or attaches at a stalled disk costs no memory.
func (r *Recorder) push(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	e.at = r.nowLocked()
	if r.qBytes+len(e.data) > r.opts.QueueBytes {
		if k := len(r.q); e.code == codeResize && k > 0 && r.q[k-1].code == codeResize {
			r.q[k-1] = e
			return
		}
		r.dropLocked(int64(len(e.data)))
		return
	}
	r.pushLocked(e)
}

func (r *Recorder) pushLocked(e event) {
	r.q = append(r.q, e)
	r.qBytes += len(e.data)
	if !r.writing {
		r.writing = true
		r.idle = make(chan struct{})
		go r.drain()
	}
}

// dropLocked counts n bytes dropped at this point of the recording: one marker for a run of
// drops.
func (r *Recorder) dropLocked(n int64) { r.markDropLocked(n, n) }

// markDropLocked counts n bytes newly dropped and queues a marker for marked bytes: n, plus
// those of earlier markers that a failed write lost with it.
func (r *Recorder) markDropLocked(n, marked int64) {
	r.dropped += n
	if n > 0 && r.opts.OnDrop != nil {
		r.opts.OnDrop(n)
	}
	if r.closed {
		return // a write that failed after Close: counted, nothing more is written
	}
	if k := len(r.q); k > 0 && r.q[k-1].code == codeDrop {
		r.q[k-1].n += marked
		return
	}
	r.pushLocked(event{at: r.nowLocked(), code: codeDrop, n: marked})
}

// DropLabel is the marker's label for n bytes the recording lacks at its point.
func DropLabel(n int64) string { return fmt.Sprintf("muxterm: %d bytes not recorded", n) }

// drain writes the queue until it is empty.
func (r *Recorder) drain() {
	for {
		r.mu.Lock()
		q := r.q
		r.q, r.qBytes = nil, 0
		if len(q) == 0 {
			r.writing = false
			close(r.idle)
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		r.write(q)
	}
}

// write encodes q and writes it in one write; a failed write is undone (the file truncated back
// to its last complete line), its output and input are counted as dropped, and one marker
// stands for them and for the markers it lost.
func (r *Recorder) write(q []event) {
	r.enc.Reset()
	var data, marked int64                          // output and input bytes in q; bytes its drop markers stand for
	data = int64(len(r.carry[0]) + len(r.carry[1])) // prefixed to this batch's first output, input
	for _, e := range q {
		r.encode(e)
		switch e.code {
		case codeOutput, codeInput:
			data += int64(len(e.data))
		case codeDrop:
			marked += e.n
		}
	}
	data -= int64(len(r.carry[0]) + len(r.carry[1])) // carried on to the next batch: not its
	n, err := r.w.Write(r.enc.Bytes())
	if err == nil {
		r.good += int64(n)
		r.mu.Lock()
		r.written = r.good
		r.mu.Unlock()
		if r.failing {
			r.failing = false
			r.opts.Log.Info("recording: writing again", "path", r.path)
		}
		return
	}
	if r.file != nil && n > 0 {
		if terr := r.file.Truncate(r.good); terr != nil {
			// Half a line stays: the next write starts on a line of its own, and a reader
			// meets one line that is no event, there.
			r.good += int64(n)
			r.opts.Log.Warn("recording: cut back a failed write", "path", r.path, "err", terr)
			if _, err := r.w.Write([]byte("\n")); err == nil {
				r.good++
			}
		}
	}
	if !r.failing {
		r.failing = true
		r.opts.Log.Warn("recording: write failed; output is dropped until a write succeeds",
			"path", r.path, "err", err)
	}
	data += int64(len(r.carry[0]) + len(r.carry[1])) // the carry goes with the failed write
	r.carry = [2][]byte{}
	r.mu.Lock()
	if data+marked > 0 {
		r.markDropLocked(data, data+marked) // the markers lost with it are marked again
	}
	r.mu.Unlock()
}

// Flush waits until every queued event is written, or ctx ends.
func (r *Recorder) Flush(ctx context.Context) error {
	r.mu.Lock()
	writing, idle := r.writing, r.idle
	r.mu.Unlock()
	if !writing {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("record: flush %s: %w", r.path, ctx.Err())
	}
}

// Close stops recording, writes what is queued within ctx and closes the file. What ctx cuts
// short (a stalled disk) is dropped; the writer, blocked in its write, ends when that returns.
func (r *Recorder) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true // nothing more is queued: the writer only drains what is
	r.mu.Unlock()
	err := r.Flush(ctx)
	if err == nil {
		r.finishCarry()
	}
	r.mu.Lock()
	if err != nil {
		var n int64
		for _, e := range r.q {
			if e.code == codeOutput || e.code == codeInput {
				n += int64(len(e.data))
			}
		}
		r.q, r.qBytes = nil, 0
		r.dropped += n
		if n > 0 && r.opts.OnDrop != nil {
			r.opts.OnDrop(n)
		}
	}
	r.mu.Unlock()
	if c, ok := r.w.(io.Closer); ok && r.file != nil {
		if cerr := c.Close(); cerr != nil && !errors.Is(cerr, os.ErrClosed) {
			err = errors.Join(err, fmt.Errorf("record: close %s: %w", r.path, cerr))
		}
	}
	return err
}
