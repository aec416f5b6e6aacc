package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/procfs"
)

// WaitFor polls cond every 5 ms until it holds, and fails the test if timeout passes first. It
// is for observing state that nothing signals (the kernel's view in /proc, a file another
// process writes, a field another goroutine owns), never for ordering events: wait on a channel
// for those (WaitClosed).
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitClosed waits for ch to close (or to deliver a value), and fails the test if timeout
// passes first.
func WaitClosed(t testing.TB, ch <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("%s: not within %v", what, timeout)
	}
}

// WakeChan returns a capacity-1 channel and a wake function that notifies it without blocking:
// wakes that come before the receiver looks merge into one.
func WakeChan() (chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	return ch, func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Alive reports whether pid runs: it exists and is neither a zombie nor dead.
func Alive(pid int) bool {
	s, err := procfs.ReadStat(pid)
	return err == nil && !s.Zombie()
}

// Closed reports, without blocking, whether ch is closed (or holds a value).
func Closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// ShutdownAtEnd calls s.Shutdown when the test ends, giving it 10 s, and fails the test on its
// error; what names s in the failure.
func ShutdownAtEnd(t testing.TB, what string, s interface{ Shutdown(context.Context) error }) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("%s shutdown: %v", what, err)
		}
	})
}

// WaitClosedCtx is WaitClosed bounded by ctx instead of a timeout.
func WaitClosedCtx(ctx context.Context, t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("%s: not before %v", what, context.Cause(ctx))
	}
}

// Await checks cond each time wake delivers (and once at the start) until it holds, and fails
// the test if timeout passes first. wake is signalled by whatever changes cond's state (a
// WakeChan's func in a fake's method, a client's notify callback): unlike WaitFor, nothing polls.
func Await(t testing.TB, wake <-chan struct{}, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for !cond() {
		select {
		case <-wake:
		case <-timer.C:
			t.Fatalf("%s: not within %v", what, timeout)
		}
	}
}
