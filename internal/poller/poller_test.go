package poller

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/testutil"
)

const testBuf = 4096

// pipeT returns a pipe whose read end is non-blocking, both ends closed when the test ends
// (after the poller's cleanup, registered later, has removed the read end).
func pipeT(t *testing.T) (r, w int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Close(p[0])
		unix.Close(p[1])
	})
	return p[0], p[1]
}

// drain reads fd until it would block, into buf, and returns what it read.
func drain(t *testing.T, fd int, buf []byte) []byte {
	var out []byte
	for {
		n, err := unix.Read(fd, buf)
		if n > 0 {
			out = append(out, buf[:n]...)
		}
		if errors.Is(err, unix.EAGAIN) || n == 0 && err == nil {
			return out
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			t.Errorf("read fd %d: %v", fd, err)
			return out
		}
	}
}

func write(t *testing.T, fd int, p string) {
	t.Helper()
	if _, err := unix.Write(fd, []byte(p)); err != nil {
		t.Fatal(err)
	}
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing within 10s", what)
		panic("unreachable")
	}
}

// A registered fd is reported once per arming: its ready callback runs with the worker's
// buffer when it is readable, and not again until Rearm, however much more arrives.
func TestPollerReportsOncePerArming(t *testing.T) {
	p := New(Options{BufBytes: testBuf})
	r, w := pipeT(t)
	var armed atomic.Bool
	got := make(chan []byte, 4)
	armed.Store(true)
	reg, err := p.Add(r, func(buf []byte) {
		if !armed.Swap(false) {
			t.Error("ready ran while the fd was disarmed")
		}
		if len(buf) != testBuf {
			t.Errorf("buffer: got %d bytes, want %d", len(buf), testBuf)
		}
		got <- drain(t, r, buf)
	}, func(err error) { t.Errorf("failed: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Remove(reg) })
	write(t, w, "one")
	if b := recv(t, got, "first report"); string(b) != "one" {
		t.Errorf("first turn read %q, want %q", b, "one")
	}
	// Disarmed: these bytes wait for the re-arm, which reports them at once. A probe fd made
	// readable after them is reported meanwhile: the instance hands out its ready fds in the
	// order they became ready, so a report of the disarmed fd would come before the probe's.
	write(t, w, "two")
	write(t, w, "three")
	pr, pw := pipeT(t)
	probed := make(chan struct{}, 1)
	probe, err := p.Add(pr, func([]byte) { probed <- struct{}{} }, func(err error) { t.Errorf("failed: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Remove(probe) })
	write(t, pw, "probe")
	recv(t, probed, "the probe's report")
	armed.Store(true)
	if err := p.Rearm(reg); err != nil {
		t.Fatal(err)
	}
	if b := recv(t, got, "report after the re-arm"); string(b) != "twothree" {
		t.Errorf("second turn read %q, want %q", b, "twothree")
	}
}

// Many fds streaming at once: each is served by one worker at a time, and every byte written
// to each is read from it, in order.
func TestPollerServesAnFdOnOneWorkerAtATime(t *testing.T) {
	const fds, chunks = 8, 200
	p := New(Options{BufBytes: testBuf})
	type stream struct {
		r, w   int
		inTurn atomic.Int32
		mu     sync.Mutex
		got    []byte
		reg    *Registration
	}
	ss := make([]*stream, fds)
	for i := range ss {
		s := &stream{}
		s.r, s.w = pipeT(t)
		reg, err := p.Add(s.r, func(buf []byte) {
			if s.inTurn.Add(1) != 1 {
				t.Error("two workers serve one fd at once")
			}
			b := drain(t, s.r, buf)
			s.mu.Lock()
			s.got = append(s.got, b...)
			reg := s.reg
			s.mu.Unlock()
			s.inTurn.Add(-1)
			if err := p.Rearm(reg); err != nil {
				t.Error(err)
			}
		}, func(err error) { t.Errorf("failed: %v", err) })
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		s.reg = reg
		s.mu.Unlock()
		ss[i] = s
		t.Cleanup(func() { p.Remove(reg) })
	}
	want := make([][]byte, fds)
	for k := range chunks {
		for i, s := range ss {
			chunk := bytes.Repeat([]byte{byte('a' + i)}, 1+k%64)
			chunk[0] = byte('0' + k%10)
			want[i] = append(want[i], chunk...)
			if _, err := unix.Write(s.w, chunk); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, s := range ss {
		testutil.WaitFor(t, 10*time.Second, "every byte read", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.got) >= len(want[i])
		})
		s.mu.Lock()
		if !bytes.Equal(s.got, want[i]) {
			t.Errorf("fd %d: read %d bytes that differ from the %d written", i, len(s.got), len(want[i]))
		}
		s.mu.Unlock()
	}
}

// The epoll instance and its workers exist only while some fd is registered; a removed
// registration can be neither re-armed nor removed again, and the next Add starts anew.
func TestPollerWorkersLiveWhileRegistered(t *testing.T) {
	p := New(Options{BufBytes: testBuf})
	if p.Running() {
		t.Fatal("running before any fd was added")
	}
	r1, _ := pipeT(t)
	r2, w2 := pipeT(t)
	never := func([]byte) { t.Error("ready ran for an fd nothing was written to") }
	fail := func(err error) { t.Errorf("failed: %v", err) }
	a, err := p.Add(r1, never, fail)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Add(r2, never, fail)
	if err != nil {
		t.Fatal(err)
	}
	p.Remove(a)
	if !p.Running() || a.Registered() || !b.Registered() {
		t.Errorf("after one of two removals: running %v, removed registered %v, other registered %v; want true, false, true",
			p.Running(), a.Registered(), b.Registered())
	}
	if err := p.Rearm(a); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("Rearm of a removed fd: got %v, want %v", err, ErrNotRegistered)
	}
	p.Remove(a) // a no-op
	p.Remove(b)
	if p.Running() {
		t.Error("still running with no fd registered")
	}
	// Written after the removal: no worker runs, nothing reports it.
	write(t, w2, "late")

	got := make(chan []byte, 1)
	c, err := p.Add(r2, func(buf []byte) { got <- drain(t, r2, buf) }, fail)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Remove(c)
	if b := recv(t, got, "report on the new instance"); string(b) != "late" {
		t.Errorf("read %q, want %q", b, "late")
	}
}

// The owner removes its fd from its own ready callback, as session does when a read reports the
// end: the last registration's Remove closes the instance from one of its own workers, which
// return, and the next Add starts anew.
func TestPollerRemoveFromTheCallback(t *testing.T) {
	p := New(Options{BufBytes: testBuf})
	r, w := pipeT(t)
	removed := make(chan struct{})
	var reg *Registration
	var mu sync.Mutex // reg is set after Add returns; the callback may run before
	mu.Lock()
	reg, err := p.Add(r, func(buf []byte) {
		mu.Lock()
		defer mu.Unlock()
		drain(t, r, buf)
		p.Remove(reg)
		close(removed)
	}, func(err error) { t.Errorf("failed: %v", err) })
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	write(t, w, "the end")
	recv(t, removed, "the callback's Remove")
	if reg.Registered() || p.Rearm(reg) == nil {
		t.Error("removed from its callback, the fd is still registered")
	}
	testutil.WaitFor(t, 10*time.Second, "the instance closed by the callback's Remove", func() bool { return !p.Running() })
	r2, w2 := pipeT(t)
	got := make(chan struct{}, 1)
	reg2, err := p.Add(r2, func(buf []byte) { drain(t, r2, buf); got <- struct{}{} }, func(err error) { t.Errorf("failed: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Remove(reg2) })
	write(t, w2, "again")
	recv(t, got, "a report from the next instance")
}

// A wait that fails closes the instance and calls every registered fd's failed callback once,
// with no lock of the poller's held (the callback takes it); the next Add makes a new instance.
func TestPollerFailedWaitFailsEveryRegistration(t *testing.T) {
	var waitFails atomic.Bool
	p := New(Options{BufBytes: testBuf, TestWaitFails: &waitFails})
	type failure struct {
		i       int
		err     error
		running bool
	}
	failed := make(chan failure, 4)
	regs := make([]*Registration, 2)
	fds := make([]int, 2)
	var w int
	for i := range regs {
		var err error
		fds[i], w = pipeT(t)
		regs[i], err = p.Add(fds[i], func([]byte) { t.Error("ready ran after the failed wait") },
			func(err error) { failed <- failure{i, err, p.Running()} })
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFails.Store(true)
	write(t, w, "wake") // wakes a worker, whose wait then fails
	seen := map[int]bool{}
	for range regs {
		f := recv(t, failed, "a failed callback")
		if seen[f.i] {
			t.Errorf("fd %d failed twice", f.i)
		}
		seen[f.i] = true
		if f.err == nil || f.running {
			t.Errorf("fd %d failed with %v, poller running %v; want an error and no instance", f.i, f.err, f.running)
		}
		if regs[f.i].Registered() {
			t.Errorf("fd %d still registered after the failure", f.i)
		}
		if err := p.Rearm(regs[f.i]); !errors.Is(err, ErrNotRegistered) {
			t.Errorf("Rearm after the failure: got %v, want %v", err, ErrNotRegistered)
		}
	}
	got := make(chan []byte, 1)
	reg, err := p.Add(fds[1], func(buf []byte) { got <- drain(t, fds[1], buf) },
		func(err error) { t.Errorf("failed: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	defer p.Remove(reg)
	if b := recv(t, got, "report on the new instance"); string(b) != "wake" {
		t.Errorf("read %q, want %q", b, "wake")
	}
}

// An fd the instance will not take is refused with epoll_ctl's error, and leaves no instance
// behind when it was the only one; a failed re-arm returns epoll_ctl's error and leaves the
// fd registered, for its owner to remove.
func TestPollerEpollCtlFailures(t *testing.T) {
	failOp := -1
	p := New(Options{BufBytes: testBuf, TestHookEpollCtl: func(_, op int) error {
		if op == failOp {
			return unix.EPERM
		}
		return nil
	}})
	r, _ := pipeT(t)
	failOp = unix.EPOLL_CTL_ADD
	if _, err := p.Add(r, func([]byte) {}, func(error) {}); !errors.Is(err, unix.EPERM) {
		t.Fatalf("Add: got %v, want EPERM", err)
	}
	if p.Running() {
		t.Error("an instance is left with no fd registered")
	}
	failOp = unix.EPOLL_CTL_MOD
	reg, err := p.Add(r, func([]byte) {}, func(error) {})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Remove(reg)
	if err := p.Rearm(reg); !errors.Is(err, unix.EPERM) {
		t.Errorf("Rearm: got %v, want EPERM", err)
	}
	if !reg.Registered() {
		t.Error("a failed re-arm unregistered the fd")
	}
}
