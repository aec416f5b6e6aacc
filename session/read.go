package session

import (
	"context"
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/otel"
)

// readState is who has a session's master; see Session.readState.
type readState uint8

const (
	readNone  readState = iota // no reader (tests' sessions without a process)
	readArmed                  // registered and armed: the next readable event goes to a worker
	readBusy                   // a worker reads it (or ends its reading)
	// readParked: disarmed while backpressure (wakeReaderLocked re-arms it), an echo of the same
	// owner's (echoGroup.release) or the fair share (releaseHeld) holds it.
	readParked
	readDone   // reading ended, the master is closed
	readHanded // unregistered for an upgrade in place; the master stays open
)

// readReady is a readers worker's turn at s's master, which was reported readable. It reads in
// batches (a PTY read returns at most about a page, so one ingest and one wake of each viewer's
// writer carry up to a batch), appending each batch to the ring, until the master would block,
// backpressure holds, or maxBatchesPerTurn batches were read; then it re-arms the master, or
// leaves it disarmed while backpressure or the readers' fair share holds it (fair.go). It
// never writes to a viewer. A read that fails (EIO once every slave fd is closed) or reaches
// the end ends the reading.
func (s *Session) readReady(buf []byte) {
	s.mu.Lock()
	if s.readState != readArmed {
		// Not armed: the report was taken just before failReading or a failed re-arm claimed
		// the master (busy), or before its reading ended (done). Not ours to read.
		s.mu.Unlock()
		return
	}
	s.readState = readBusy
	s.inTurn.Store(true)
	s.mu.Unlock()
	if s.holding() && s.holdReading() {
		return
	}
	buf = buf[:s.opts.batchSize()]
	// A master that keeps filling gets a few batches per turn, one ingest each, before it goes
	// back to the instance (behind the other ready masters).
	read, full := 0, false
	for b := range maxBatchesPerTurn {
		n, err := s.readBatch(buf)
		read += n
		if n > 0 {
			if !s.ingest(buf[:n]) {
				s.echoed() // no viewer to write it: the echo is as far as it goes
			}
			if s.released.Load() {
				s.released.Store(false) // a batch since the release: it may be held again
			}
		}
		if err != nil {
			s.endReading(err)
			return
		}
		if n < len(buf) {
			break // drained for now
		}
		full = b == maxBatchesPerTurn-1
		s.mu.Lock()
		paused := s.paused && !s.dropOutput || s.handingOver
		s.mu.Unlock()
		if paused || s.holding() {
			break
		}
	}
	if h := s.opts.testHookAfterTurn; h != nil {
		h(s, read, full)
	}
	s.mu.Lock()
	if s.handingOver {
		s.stopReadingLocked() // handover.go: not re-armed; the next image reads on
		s.mu.Unlock()
		return
	}
	// Re-armed unless backpressure parks it, a keystroke's echo of the same owner holds it
	// (echofirst.go) or the fair share holds it (fair.go). The fair share counts the turn in
	// every case.
	// After the kill point or the program's exit what is left is drained, never held: the exit
	// is reported once the output is read (Viewer.State), and a held tail would be lost.
	paused := s.paused && !s.dropOutput
	closing := s.dropOutput || isClosed(s.exited)
	echoHeld := !paused && !closing && s.holding()
	hold, release, err := s.opts.readers.settle(s, read, full, paused, closing, echoHeld)
	switch {
	case err != nil:
		s.readState = readBusy
	case echoHeld:
		s.readState = readParked // held for another session's echo (echofirst.go)
		if !s.hold() {
			// The echo came meanwhile: read on.
			s.readState = readArmed
			if err = s.opts.readers.rearm(s); err != nil {
				s.readState = readBusy
			}
		}
	case paused || hold:
		s.readState = readParked
	default:
		s.readState = readArmed
	}
	s.mu.Unlock()
	releaseHeld(release)
	if err != nil {
		s.endReading(err)
	}
}

// maxBatchesPerTurn bounds how much one master is read before the others ready with it: 4
// batches (at most 128 KiB) before the master goes back behind them. Against one batch per turn
// it made no measurable difference in CPU per GiB (docs/benchmarks.md); it keeps a streaming
// master from paying the round trip through the epoll instance every 32 KiB.
const maxBatchesPerTurn = 4

// readBatch reads the master until it would block or buf is full. A read that fails (EIO once
// every slave fd is closed) or reports the end returns an error, unless bytes were read before
// it: the error then comes back on the next turn.
func (s *Session) readBatch(buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := unix.Read(s.masterFD, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return n, nil
		}
		if err == nil && m <= 0 {
			err = io.EOF
		}
		if err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, fmt.Errorf("read master: %w", err)
		}
		n += m
	}
	return n, nil
}

// wakeReaderLocked re-arms a parked master: backpressure is over, or a hold (an echo of the same
// owner's, the fair share) ends early (a kill, the program's exit, a keystroke into it). s.mu must
// be held.
func (s *Session) wakeReaderLocked() {
	if s.pipe != nil {
		s.pipe.cond.Broadcast() // a pipe session's readers wait on it (pipe.go)
		return
	}
	if s.readState != readParked {
		return // armed already, or a worker reads it and sees paused is over
	}
	s.readState = readArmed
	if err := s.opts.readers.rearm(s); err != nil {
		s.readState = readBusy
		go s.endReading(err) // it takes s.mu
	}
}

// failReading ends s's reading after the readers' poller failed, unless a worker reads the
// master right now (its re-arm then fails, and it ends the reading itself).
func (s *Session) failReading(err error) {
	s.mu.Lock()
	mine := s.readState == readArmed || s.readState == readParked
	if mine {
		s.readState = readBusy
	}
	s.mu.Unlock()
	if mine {
		s.endReading(err)
	}
}

// endReading ends the reading of the master: it unregisters and closes it, ends the output and
// closes readerDone (for a pipe session, once both its readers ended: closes its pipes). Only the goroutine that set readBusy (or the one it hands off to) calls it,
// once.
func (s *Session) endReading(err error) {
	if !errors.Is(err, unix.EIO) && !errors.Is(err, io.EOF) {
		// Not the PTY hanging up: the session's output ends early, which an operator should see.
		s.opts.Logger.Warn("pty reading ended", "session", s.id, "err", err)
	}
	s.opts.readers.remove(s)
	s.readEnded.Store(true) // before echoed: a keystroke after this load sees it (keystroke)
	s.echoed()
	s.finishOutput()
	s.closePTY()
	s.readerSpan.AddEvent(otel.EventReaderEnded)
	s.recordingAttrs(s.readerSpan)
	s.readerSpan.End()
	s.mu.Lock()
	s.readState = readDone
	if s.handingOver {
		s.markReadStoppedLocked()
	}
	s.mu.Unlock()
	close(s.readerDone)
	s.endRecordingIfDone()
}

// closePTY closes the master, or a pipe session's output pipes (read ends).
func (s *Session) closePTY() {
	s.ptyMu.Lock()
	defer s.ptyMu.Unlock()
	if !s.ptmxClosed {
		s.ptmxClosed = true
		if s.pipe != nil {
			s.pipe.stdout.Close()
			s.pipe.stderr.Close()
			return
		}
		s.ptmx.Close()
	}
}

// ingest adds a chunk to the ring, unless the kill point has passed. The check and the append
// are under the same lock as the kill's snapshot of the final offset, so a chunk read before the
// kill but ingested after it is dropped. It reports whether a viewer is attached (which then
// ends a keystroke's hold when it reads the chunk: Viewer.Read).
func (s *Session) ingest(p []byte) (watched bool) { return s.ingestStream(p, Stdout) }

// ingestStream is ingest of bytes of stream tag (a pipe session's stdout or stderr).
func (s *Session) ingestStream(p []byte, tag Stream) (watched bool) {
	if h := s.testHookBeforeIngest; h != nil {
		h(p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropOutput {
		s.dropped += int64(len(p))
		return false
	}
	s.keepForScreenLocked(len(p))
	s.ring.appendTagged(p, tag)
	if s.rec != nil {
		s.rec.Output(p)
	}
	s.opts.Instruments.BytesOut.Add(context.Background(), int64(len(p)))
	s.wakeViewersLocked()
	s.queueScreenLocked()
	if !s.paused && s.minLagLocked() > int64(s.opts.HighWaterBytes) {
		s.paused = true
		s.pausedAt = s.now()
	}
	return len(s.viewers) > 0
}

func (s *Session) finishOutput() {
	s.mu.Lock()
	s.outputFinal = true
	s.wakeViewersLocked()
	s.mu.Unlock()
}
