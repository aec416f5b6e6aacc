package session

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/child"
	"github.com/muxterm/muxterm/internal/leakcheck"
	"github.com/muxterm/muxterm/internal/poller"
	"github.com/muxterm/muxterm/internal/testutil"
)

// TestMain fails the package if a goroutine or a file descriptor outlives the tests, or if a
// process the tests started is still our child. The warm-up spawns one session, so the
// runtime's poller and the pidfd path have opened what they keep before the fd baseline.
func TestMain(m *testing.M) {
	leakcheck.Main(m, leakcheck.Options{FDs: true, Children: true, WarmUp: warmUp})
}

func warmUp() error {
	opts := testOptions()
	o := opts.withDefaults()
	s, err := spawn(newID(), Spec{Argv: []string{"/bin/sh", "-c", "exit 0"}, Cols: 80, Rows: 24}, &o, nil, time.Now)
	if err != nil {
		return err
	}
	select {
	case <-s.readerDone:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("reader of warm-up session did not end")
	}
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("warm-up child not reaped")
	}
	return nil
}

// testOptions are quiet options with a fixed shell.
func testOptions() Options {
	return Options{Shell: "/bin/sh", Logger: slog.New(slog.DiscardHandler)}
}

// ownPollers gives o a PTY reader and a child waiter of its own instead of the process-wide
// ones, so a test can set their hooks, hold their workers or watch them go idle without
// touching any other test's sessions. Both stop on their own with their last master and child.
func ownPollers(o Options) (Options, *readers, *child.Waiter) {
	return ownPollersWith(o, poller.Options{})
}

// ownPollersWith is ownPollers with a PTY reader whose poller has options po (its test hooks).
func ownPollersWith(o Options, po poller.Options) (Options, *readers, *child.Waiter) {
	o.readers, o.children = newReaders(po), new(child.Waiter)
	return o, o.readers, o.children
}

// ---- observing the process and its kernel resources ----

// countPTS counts the PTYs whose master this process holds: a session that leaked its PTY
// leaks its master here. (Counting /dev/pts entries would count other processes' terminals,
// including other test packages running at the same time.)
func countPTS() int {
	n := 0
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		target, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if err != nil || (target != "/dev/ptmx" && target != "/dev/pts/ptmx") {
			continue
		}
		if info, err := os.ReadFile("/proc/self/fdinfo/" + fd.Name()); err == nil &&
			strings.Contains(string(info), "tty-index:") {
			n++
		}
	}
	return n
}

// osThreads is the Threads: line of /proc/self/status.
func osThreads(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads: in /proc/self/status")
	return 0
}

// countFDs and zombies observe this process's kernel resources.
func countFDs() int  { return leakcheck.OpenFDs() }
func zombies() []int { return leakcheck.Children(true) }

// ---- sessions that clean up after themselves ----

// spawnT starts argv on a PTY with opts and registers a cleanup that ends it. The session is
// alone in its echo-first group: its keystrokes hold no other session (spawnGroupT).
func spawnT(t testing.TB, opts Options, argv ...string) *Session {
	t.Helper()
	return spawnGroupT(t, opts, nil, argv...)
}

// spawnGroupT is spawnT for a session that joins the echo-first group echo (nil: one of its
// own), as the sessions of one owner in a registry do.
func spawnGroupT(t testing.TB, opts Options, echo *echoGroup, argv ...string) *Session {
	t.Helper()
	o := opts.withDefaults()
	s, err := spawn(newID(), Spec{Argv: argv, Cols: 80, Rows: 24, Dir: os.TempDir()}, &o, echo, time.Now)
	if err != nil {
		t.Fatalf("spawn %q: %v", argv, err)
	}
	cleanupSession(t, s)
	return s
}

// openT opens argv through r for owner, attaching a viewer from offset 0 in the same step when
// wake is non-nil, and registers a cleanup that ends the session.
func openT(t testing.TB, r *Registry, owner string, wake func(), argv ...string) (*Session, *Viewer) {
	t.Helper()
	s, v, err := r.Open(Spec{Argv: argv, Cols: 80, Rows: 24, Dir: os.TempDir(), Owner: owner}, 0, wake)
	if err != nil {
		t.Fatalf("open %q: %v", argv, err)
	}
	cleanupSession(t, s)
	return s, v
}

// cleanupSession ends s when the test ends: if nobody killed it, it runs the session's own
// teardown (its process group, and PTY holders as its options say), then waits for the child
// to be reaped, the reader to end and input goroutines to finish. It signals nothing else.
func cleanupSession(t testing.TB, s *Session) {
	t.Helper()
	t.Cleanup(func() { endSession(t, s) })
}

func endSession(t testing.TB, s *Session) {
	t.Helper()
	s.mu.Lock()
	first := s.beginCloseLocked(ReasonShutdown)
	done := s.killDone
	s.mu.Unlock()
	if first {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s.teardown(ctx)
		cancel()
	}
	testutil.WaitClosed(t, done, 15*time.Second, "teardown of "+s.id)
	testutil.WaitClosed(t, s.exited, 10*time.Second, "reap of "+strconv.Itoa(s.pid))
	testutil.WaitClosed(t, s.readerDone, 15*time.Second, "reader of "+s.id)
	inputDone := make(chan struct{})
	go func() { s.wg.Wait(); close(inputDone) }()
	testutil.WaitClosed(t, inputDone, 5*time.Second, "input goroutines of "+s.id)
}

// killWithin runs kill and fails the test unless it returns within deadline.
func killWithin(t testing.TB, deadline time.Duration, kill func(context.Context) (KillResult, error)) (KillResult, time.Duration) {
	t.Helper()
	type out struct {
		res KillResult
		err error
	}
	ch := make(chan out, 1)
	start := time.Now()
	go func() {
		// The ctx bounds only the escalation's waits; the test's own deadline is the point.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := kill(ctx)
		ch <- out{res, err}
	}()
	select {
	case o := <-ch:
		if o.err != nil {
			t.Fatalf("kill: got error %v, want nil", o.err)
		}
		return o.res, time.Since(start)
	case <-time.After(deadline):
		t.Fatalf("kill did not return within %v", deadline)
		return KillResult{}, 0
	}
}

// ---- viewers ----

// notify sends on a capacity-1 channel without blocking; repeated signals merge.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// collector reads a viewer in its own goroutine until EOF, the viewer closes, or the test ends.
type collector struct {
	v        *Viewer
	wake     <-chan struct{}
	progress chan struct{} // notified after every read that returned something, and at the end
	stop     chan struct{}
	done     chan struct{} // closed when the read loop ended

	mu   sync.Mutex
	data []byte
	gaps []gap
	err  error // why the loop ended: io.EOF or ErrViewerClosed
}

type gap struct {
	at   int // len(data) when the gap was reported
	lost int64
}

// collect starts reading v. If gate is non-nil, the first read waits for it to close.
func collect(t testing.TB, v *Viewer, wake <-chan struct{}, gate <-chan struct{}) *collector {
	t.Helper()
	c := &collector{v: v, wake: wake, progress: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop(gate)
	t.Cleanup(func() {
		close(c.stop)
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			t.Errorf("collector did not stop")
		}
		v.Close()
	})
	return c
}

func (c *collector) loop(gate <-chan struct{}) {
	defer close(c.done)
	defer notify(c.progress)
	if gate != nil {
		select {
		case <-gate:
		case <-c.stop:
			return
		}
	}
	buf := make([]byte, 8<<10)
	for {
		n, lost, err := c.v.Read(buf)
		c.mu.Lock()
		if lost > 0 {
			c.gaps = append(c.gaps, gap{at: len(c.data), lost: lost})
		}
		c.data = append(c.data, buf[:n]...)
		c.err = err
		c.mu.Unlock()
		if n > 0 || lost > 0 {
			notify(c.progress)
			continue
		}
		if err != nil {
			return
		}
		select {
		case <-c.wake:
		case <-c.stop:
			return
		}
	}
}

func (c *collector) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.data)
}

func (c *collector) result() (data []byte, gaps []gap, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.data), append([]gap(nil), c.gaps...), c.err
}

// waitOutput waits until the collected output contains want.
func (c *collector) waitOutput(t testing.TB, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		if bytes.Contains(c.bytes(), []byte(want)) {
			return
		}
		select {
		case <-c.progress:
		case <-c.done:
			if bytes.Contains(c.bytes(), []byte(want)) {
				return
			}
			t.Fatalf("output ended without %q: got %q", want, tail(c.bytes()))
		case <-deadline:
			t.Fatalf("no %q in the output within %v: got %q", want, timeout, tail(c.bytes()))
		}
	}
}

// waitEnd waits for the read loop to end and returns why.
func (c *collector) waitEnd(t testing.TB, timeout time.Duration) error {
	t.Helper()
	testutil.WaitClosed(t, c.done, timeout, "viewer EOF")
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func tail(b []byte) []byte {
	if len(b) > 200 {
		return b[len(b)-200:]
	}
	return b
}

// ringBytes returns the bytes s's ring retains and their first offset.
func ringBytes(s *Session) ([]byte, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]byte, s.ring.size())
	if len(out) > 0 {
		s.ring.copyOut(out, s.ring.start)
	}
	return out, s.ring.start
}

// sig is a readable signal name for messages.
func sig(s syscall.Signal) string { return ExitStatus{Signal: s}.SignalName() }
