package session

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
)

// settled reads s.exitSettled under s.mu.
func settled(s *Session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitSettled
}

// A reader that resumes after the exit re-arms the settle timer: the exit's own timer, still
// pending, must not cut the new one short. On a fake clock (synctest) with a session that has
// no process or PTY.
func TestSettleExitRearmedIsNotCutShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fakeSession(1 << 16)
		s.reaped(0, nil) // exit at 0: settles at exitSettle
		time.Sleep(exitSettle / 2)
		// Backpressure lifts after the exit: the settle starts over, ending at 1.5×exitSettle.
		s.mu.Lock()
		s.paused, s.dropOutput = true, true
		s.maybeResumeLocked()
		s.mu.Unlock()
		testutil.Advance(exitSettle*3/4 - time.Nanosecond) // past the exit's timer, before the new one
		if settled(s) {
			t.Fatal("the exit's settle timer ended the re-armed settle early")
		}
		testutil.Advance(exitSettle/4 + time.Nanosecond)
		if !settled(s) {
			t.Fatal("not settled once the re-armed timer ran")
		}
	})
}

// Without a resume, the exit settles exitSettle after it, not before.
func TestSettleExitAfterExitSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fakeSession(1 << 16)
		s.reaped(0, nil)
		testutil.Advance(exitSettle - time.Nanosecond)
		if settled(s) {
			t.Fatal("settled before exitSettle")
		}
		testutil.Advance(time.Nanosecond)
		if !settled(s) {
			t.Fatal("not settled at exitSettle")
		}
	})
}

// A lost viewer's resume hold keeps the reader paused for ResumeHold, then lets it resume. On
// the fake clock, with a session that has no process: the output is ingested as the reader
// would.
func TestResumeHoldEndsAfterResumeHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fakeSession(1 << 20)
		s.opts.ResumeHold = 2 * time.Second
		hw := s.opts.HighWaterBytes
		if hw >= 1<<20 {
			t.Fatalf("high watermark %d not below the scrollback", hw)
		}
		v, _, err := s.Subscribe(0, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.ingest(make([]byte, hw+1)) // the viewer reads nothing: backpressure
		if !isPaused(s) {
			t.Fatal("not paused above the high watermark")
		}
		v.CloseHolding(0) // at offset 0: without the hold the reader would resume at once
		testutil.Advance(s.opts.ResumeHold - time.Nanosecond)
		if !isPaused(s) {
			t.Fatal("the reader resumed before ResumeHold")
		}
		testutil.Advance(time.Nanosecond)
		if isPaused(s) {
			t.Fatal("the reader still paused once the hold ended")
		}
	})
}
