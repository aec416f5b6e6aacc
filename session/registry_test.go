package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
)

var idPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestRegistryIDs(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	for range 10000 {
		id := newID()
		if !idPattern.MatchString(id) {
			t.Fatalf("id: got %q, want 32 lowercase hex characters", id)
		}
		if seen[id] {
			t.Fatalf("id %q: got a repeat, want unique ids", id)
		}
		seen[id] = true
	}
	r := NewRegistry(testOptions(), nil)
	ids := make(map[string]bool)
	for range 10 {
		s, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", "exec sleep 60")
		if !idPattern.MatchString(s.ID()) || ids[s.ID()] {
			t.Fatalf("session id: got %q, want a new 32-hex-character id", s.ID())
		}
		ids[s.ID()] = true
	}
	if n := r.Len(); n != 10 {
		t.Errorf("len: got %v, want 10", n)
	}
	list := r.List("alice")
	if len(list) != 10 || !slices.IsSortedFunc(list, func(a, b Info) int { return a.Created.Compare(b.Created) }) {
		t.Errorf("list: got %v entries, want 10, oldest first", len(list))
	}
}

func TestRegistryOwnerIsolation(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	s, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", "exec sleep 60")
	ctx := context.Background()
	checkUnknown := func(when, owner, id string) {
		t.Helper()
		if _, err := r.Get(id, owner); !errors.Is(err, ErrUnknownSession) {
			t.Errorf("%s: %s's Get: got %v, want %v", when, owner, err, ErrUnknownSession)
		}
		if _, _, err := r.Attach(id, owner, 0, nil); !errors.Is(err, ErrUnknownSession) {
			t.Errorf("%s: %s's Attach: got %v, want %v", when, owner, err, ErrUnknownSession)
		}
		if _, err := r.Kill(ctx, id, owner); !errors.Is(err, ErrUnknownSession) {
			t.Errorf("%s: %s's Kill: got %v, want %v", when, owner, err, ErrUnknownSession)
		}
		if _, err := r.Lease(id, owner, time.Hour); !errors.Is(err, ErrUnknownSession) {
			t.Errorf("%s: %s's Lease: got %v, want %v", when, owner, err, ErrUnknownSession)
		}
	}
	checkUnknown("running", "bob", s.ID())
	checkUnknown("running", "alice", newID())
	if l := r.List("bob"); len(l) != 0 {
		t.Errorf("bob's list: got %v entries, want 0", len(l))
	}
	if _, err := r.Get(s.ID(), "alice"); err != nil {
		t.Errorf("alice's Get: got %v, want nil", err)
	}
	if st := s.State(); st != StateRunning {
		t.Errorf("state after bob's kill: got %v, want %v", st, StateRunning)
	}

	killWithin(t, 2*time.Second, func(ctx context.Context) (KillResult, error) { return r.Kill(ctx, s.ID(), "alice") })
	checkUnknown("killed", "bob", s.ID())
	if _, err := r.Get(s.ID(), "alice"); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("alice's Get after kill: got %v, want %v", err, ErrSessionClosed)
	}
	if _, _, err := r.Attach(s.ID(), "alice", 0, nil); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("alice's Attach after kill: got %v, want %v", err, ErrSessionClosed)
	}
	if _, _, err := r.Attach(s.ID(), "alice", 0, nil); errors.Is(err, ErrUnknownSession) {
		t.Errorf("alice's Attach after kill: got %v, want not %v", err, ErrUnknownSession)
	}
}

func TestRegistryOpenLimit(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	spec := func(owner string) Spec {
		return Spec{Argv: []string{"/bin/sh", "-c", "exec sleep 60"}, Cols: 80, Rows: 24, Owner: owner}
	}
	for range 2 {
		s, _, err := r.Open(spec("alice"), 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		cleanupSession(t, s)
	}
	if _, _, err := r.Open(spec("alice"), 2, nil); !errors.Is(err, ErrTooMany) {
		t.Errorf("third open: got %v, want %v", err, ErrTooMany)
	}
	s, _, err := r.Open(spec("bob"), 2, nil)
	if err != nil {
		t.Fatalf("bob's open: got %v, want nil", err)
	}
	cleanupSession(t, s)
	if _, _, err := r.Open(Spec{Argv: []string{"/bin/sh"}, Cols: 0, Rows: 24, Owner: "bob"}, 0, nil); !errors.Is(err, ErrBadSize) {
		t.Errorf("open with a bad size: got %v, want %v", err, ErrBadSize)
	}
}

// TestRegistryConcurrentKill: two kills of one session both return, with the same result; the
// second waits for the first's teardown (a shell that ignores HUP and TERM makes it long).
func TestRegistryConcurrentKill(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	wake, wakeFn := testutil.WakeChan()
	s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c", "trap '' HUP TERM; echo READY; while :; do sleep 1; done")
	collect(t, v, wake, nil).waitOutput(t, "READY", 5*time.Second)

	type out struct {
		res KillResult
		err error
	}
	results := make(chan out, 2)
	for range 2 {
		go func() {
			res, err := r.Kill(context.Background(), s.ID(), "alice")
			results <- out{res, err}
		}()
	}
	var got []out
	for range 2 {
		select {
		case o := <-results:
			got = append(got, o)
		case <-time.After(5 * time.Second):
			t.Fatalf("a concurrent kill did not return within 5s")
		}
	}
	for i, o := range got {
		if o.err != nil {
			t.Errorf("kill %d: got %v, want nil", i, o.err)
		}
	}
	if a, b := got[0].res, got[1].res; !slices.Equal(a.Signals, b.Signals) || a.Exit != b.Exit || a.Duration != b.Duration {
		t.Errorf("results: got %+v and %+v, want the same", a, b)
	}
	if want := []string{"HUP", "TERM", "KILL"}; !slices.Equal(got[0].res.Signals, want) {
		t.Errorf("signals: got %v, want %v", got[0].res.Signals, want)
	}
	// A later kill still reports the result.
	res, err := r.Kill(context.Background(), s.ID(), "alice")
	if err != nil || res.Exit != got[0].res.Exit {
		t.Errorf("later kill: got %+v, %v, want %+v, nil", res, err, got[0].res)
	}
}

func TestRegistryShutdown(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	var sessions []*Session
	for range 4 {
		s, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", "exec sleep 60")
		sessions = append(sessions, s)
	}
	wake, wakeFn := testutil.WakeChan()
	trapped, v := openT(t, r, "bob", wakeFn, "/bin/sh", "-c", "trap '' HUP TERM; echo READY; while :; do sleep 1; done")
	c := collect(t, v, wake, nil)
	c.waitOutput(t, "READY", 5*time.Second)
	sessions = append(sessions, trapped)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: got %v, want nil", err)
	}
	if n := r.Len(); n != 0 {
		t.Errorf("len after shutdown: got %v, want 0", n)
	}
	for _, s := range sessions {
		if _, ok := s.Exit(); !ok {
			t.Errorf("session %s: got running after shutdown, want reaped", s.ID())
		}
		if reason, closing := s.Closing(); !closing || reason != ReasonShutdown {
			t.Errorf("session %s: got closing %v reason %q, want true %q", s.ID(), closing, reason, ReasonShutdown)
		}
		if st := s.State(); st != StateClosed {
			t.Errorf("session %s state: got %v, want %v", s.ID(), st, StateClosed)
		}
		if _, _, err := r.Attach(s.ID(), s.Owner(), 0, nil); !errors.Is(err, ErrSessionClosed) {
			t.Errorf("attach after shutdown: got %v, want %v", err, ErrSessionClosed)
		}
	}
	if err := c.waitEnd(t, 5*time.Second); err != io.EOF {
		t.Errorf("viewer end: got %v, want %v", err, io.EOF)
	}
	if _, _, err := r.Open(Spec{Argv: []string{"/bin/sh"}, Cols: 80, Rows: 24, Owner: "alice"}, 0, nil); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("open after shutdown: got %v, want %v", err, ErrShuttingDown)
	}
	if err := r.Shutdown(ctx); err != nil {
		t.Errorf("second shutdown: got %v, want nil", err)
	}
}

// A shutdown whose context ends before the kills do stops waiting, never killing: the
// escalation goes on to KILL, and a later Shutdown waits for it.
func TestRegistryShutdownFinishesKillsPastItsContext(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.KillGrace = 200 * time.Millisecond
	r := NewRegistry(opts, nil)
	wake, wakeFn := testutil.WakeChan()
	trapped, v := openT(t, r, "bob", wakeFn, "/bin/sh", "-c", "trap '' HUP TERM; echo READY; while :; do sleep 1; done")
	c := collect(t, v, wake, nil)
	c.waitOutput(t, "READY", 5*time.Second)

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.Shutdown(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown past its context: got %v, want a deadline error", err)
	}
	if _, ok := trapped.Exit(); ok {
		t.Fatalf("the shell that ignores HUP and TERM ended before the escalation could reach KILL")
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatalf("second shutdown: got %v, want nil", err)
	}
	e, ok := trapped.Exit()
	if !ok || e.Signal != syscall.SIGKILL {
		t.Errorf("exit: got %+v (reaped %v), want killed by KILL", e, ok)
	}
}

// TestClaim is the reaper's re-check under both locks (design invariant 3), driven with a fake
// clock from stale snapshots.
func TestClaim(t *testing.T) {
	t.Parallel()
	const grace = 10 * time.Second
	born := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		script     string
		setup      func(t *testing.T, r *Registry, s *Session, clock *atomic.Int64)
		at         time.Duration // claim at born+at
		wantReason Reason
		wantOK     bool
	}{
		{name: "unwatched beyond grace", at: grace + time.Second, wantReason: ReasonReaped, wantOK: true},
		{name: "unwatched within grace", at: grace - time.Second},
		{name: "watched", at: time.Hour, setup: func(t *testing.T, r *Registry, s *Session, _ *atomic.Int64) {
			if _, _, err := r.Attach(s.ID(), "alice", 0, nil); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "viewer came and went after the selection", at: grace + time.Second,
			setup: func(t *testing.T, r *Registry, s *Session, clock *atomic.Int64) {
				clock.Store(born.Add(grace + time.Second).UnixNano())
				v, _, err := r.Attach(s.ID(), "alice", 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				v.Close() // the grace restarts now
			}},
		{name: "leased", at: grace + time.Second, setup: func(t *testing.T, r *Registry, s *Session, _ *atomic.Int64) {
			if _, err := r.Lease(s.ID(), "alice", time.Hour); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "exited, even while watched", script: "exit 3", at: 0, wantReason: ReasonExited, wantOK: true,
			setup: func(t *testing.T, r *Registry, s *Session, _ *atomic.Int64) {
				if _, _, err := r.Attach(s.ID(), "alice", 0, nil); err != nil {
					t.Fatal(err)
				}
				testutil.WaitClosed(t, s.Exited(), 5*time.Second, "exit")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var clock atomic.Int64
			clock.Store(born.UnixNano())
			r := NewRegistry(testOptions(), func() time.Time { return time.Unix(0, clock.Load()) })
			script := tt.script
			if script == "" {
				script = "exec sleep 60"
			}
			s, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", script)
			if tt.setup != nil {
				tt.setup(t, r, s, &clock)
			}
			now := born.Add(tt.at)
			reason, ok := r.Claim(s.ID(), s, now, grace)
			if reason != tt.wantReason || ok != tt.wantOK {
				t.Fatalf("claim: got %q, %v, want %q, %v", reason, ok, tt.wantReason, tt.wantOK)
			}
			if !ok {
				if _, err := r.Get(s.ID(), "alice"); err != nil {
					t.Errorf("get after a refused claim: got %v, want nil", err)
				}
				return
			}
			// The claim won: an attach fails cleanly, a kill waits for the reaper's teardown.
			if _, _, err := r.Attach(s.ID(), "alice", 0, nil); !errors.Is(err, ErrSessionClosed) {
				t.Errorf("attach after the claim: got %v, want %v", err, ErrSessionClosed)
			}
			if _, ok := r.Claim(s.ID(), s, now, grace); ok {
				t.Errorf("second claim: got true, want false")
			}
			killed := make(chan KillResult, 1)
			go func() {
				res, _ := r.Kill(context.Background(), s.ID(), "alice")
				killed <- res
			}()
			res := r.Teardown(context.Background(), s)
			if res.Reason != tt.wantReason {
				t.Errorf("teardown reason: got %q, want %q", res.Reason, tt.wantReason)
			}
			select {
			case k := <-killed:
				if k.Reason != tt.wantReason || k.Exit != res.Exit {
					t.Errorf("kill during the reap: got %+v, want %+v", k, res)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("kill during the reap did not return")
			}
		})
	}
	t.Run("stale entry", func(t *testing.T) {
		t.Parallel()
		r := NewRegistry(testOptions(), nil)
		s, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", "exec sleep 60")
		old := fakeSession(16)
		if _, ok := r.Claim(s.ID(), old, time.Now().Add(time.Hour), grace); ok {
			t.Errorf("claim of a replaced entry: got true, want false")
		}
		if _, err := r.Get(s.ID(), "alice"); err != nil {
			t.Errorf("get: got %v, want nil", err)
		}
	})
}

// TestOpenKillCyclesLeakNothing opens and kills 1,000 shells, 20 at a time, and checks that
// file descriptors, goroutines, /dev/pts entries and zombies are back where they started.
func TestOpenKillCyclesLeakNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 processes")
	}
	const cycles, batch = 1000, 20
	r := NewRegistry(testOptions(), nil)
	ctx := context.Background()
	fds, pts, goroutines := countFDs(), countPTS(), runtime.NumGoroutine()
	if z := zombies(); len(z) != 0 {
		t.Fatalf("zombies before: got %v, want none", z)
	}
	for range cycles / batch {
		var wg sync.WaitGroup
		opened := make([]*Session, batch)
		for i := range batch {
			wg.Go(func() {
				s, _, err := r.Open(Spec{Cols: 80, Rows: 24, Owner: "alice"}, 0, nil)
				if err != nil {
					t.Errorf("open: %v", err)
					return
				}
				opened[i] = s
				res, err := r.Kill(ctx, s.ID(), "alice")
				if err != nil || !res.Reaped || res.Survivors != 0 {
					t.Errorf("kill: got %+v, %v, want reaped and no survivors", res, err)
				}
			})
		}
		wg.Wait()
		for _, s := range opened {
			if s != nil {
				testutil.WaitClosed(t, s.ReaderDone(), 5*time.Second, "reader end")
				testutil.WaitClosed(t, s.Exited(), 5*time.Second, "reap")
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	if n := r.Len(); n != 0 {
		t.Errorf("sessions left: got %v, want 0", n)
	}
	// At most as many as at the start: a descriptor of an earlier test (the epoll fd of a
	// test's own readers or waiter, closed by its goroutine after the test saw its sessions
	// end) may close meanwhile; a leak of these cycles' still shows.
	testutil.WaitFor(t, 5*time.Second, "fds back to the start", func() bool { return countFDs() <= fds })
	testutil.WaitFor(t, 5*time.Second, "/dev/pts back to the start", func() bool { return countPTS() <= pts })
	testutil.WaitFor(t, 5*time.Second, "goroutines back to the start", func() bool { return runtime.NumGoroutine() <= goroutines })
	if z := zombies(); len(z) != 0 {
		t.Errorf("zombies: got %v, want none", z)
	}
}

// TestIdleSessionsUseFewThreads: idle shells cost no goroutine and no OS thread each: their
// masters wait in the readers' epoll instance (GOMAXPROCS workers in all) and their children in
// the shared waiter's. Once they are gone, so are the readers. The bound on threads grows with
// GOMAXPROCS (each worker may hold a thread while it runs), never with the sessions: it runs at
// this machine's GOMAXPROCS and at 128, as on a large machine, with at least twice as many
// sessions as the bound. OS threads and goroutines are counted process-wide, and a Go process
// never gives a thread back, so each case runs in a process of its own (this test binary
// again, with GOMAXPROCS set): no other test's threads, nor the 128 case's, are counted.
func TestIdleSessionsUseFewThreads(t *testing.T) {
	if os.Getenv(threadsHelperEnv) == "1" {
		idleSessionsUseFewThreads(t)
		return
	}
	t.Parallel()
	for _, procs := range []int{runtime.GOMAXPROCS(0), 128} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			out := testutil.RunOwnProcess(t, threadsHelperEnv, "--- PASS", fmt.Sprintf("GOMAXPROCS=%d", procs))
			for line := range strings.Lines(out) {
				if i := strings.Index(line, "OS threads with"); i >= 0 {
					t.Log(strings.TrimSpace(line[i:]))
				}
			}
		})
	}
}

const threadsHelperEnv = "MUXTERM_THREADS_HELPER"

func idleSessionsUseFewThreads(t *testing.T) {
	// The runtime's own threads (sysmon, GC, the template thread, …: 13 to 23 at GOMAXPROCS 2
	// to 64 here), plus one per P.
	maxThreads := 28 + runtime.GOMAXPROCS(0)
	n := max(200, 2*maxThreads)
	opts, rp, w := ownPollers(testOptions())
	r := NewRegistry(opts, nil)
	goroutines := runtime.NumGoroutine()
	var sessions []*Session
	for range n {
		s, _ := openT(t, r, "alice", nil) // the shell, interactive on its PTY
		sessions = append(sessions, s)
	}
	// Idle: every shell has printed its prompt and waits for input; every reader waits again.
	testutil.WaitFor(t, 10*time.Second, "every prompt", func() bool {
		for _, s := range sessions {
			if s.Info().End == 0 {
				return false
			}
		}
		return true
	})
	if got := osThreads(t); got >= maxThreads {
		t.Errorf("OS threads with %d idle sessions: got %v, want < %v", n, got, maxThreads)
	} else {
		t.Logf("OS threads with %d idle sessions: %v", n, got)
	}
	// The workers and the waiter, plus a few for the runtime and the waiter's hand-offs; a
	// goroutine per session would add n.
	if got, most := runtime.NumGoroutine()-goroutines, runtime.GOMAXPROCS(0)+1+4; got > most {
		t.Errorf("goroutines added by %d idle sessions: got %d, want at most %d (the readers' workers, one waiter)", n, got, most)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: got %v, want nil", err)
	}
	for _, s := range sessions {
		testutil.WaitClosed(t, s.ReaderDone(), 10*time.Second, "reader of "+s.ID())
	}
	testutil.WaitFor(t, 10*time.Second, "readers to stop once no master is registered", func() bool { return !rp.poller.Running() })
	testutil.WaitFor(t, 10*time.Second, "the waiter to stop once no child is left", w.Idle)
}

// A teardown of a session nobody claimed leaves the registry as a kill does: the session is no
// longer listed or found, a later kill reports that teardown (its tombstone), and the child is
// gone. (Session.Teardown, exported before, left it registered but not running, where no claim
// could ever remove it.)
func TestTeardownOfUnclaimedSessionLeavesTheRegistry(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	s, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", "exec sleep 60")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := r.Teardown(ctx, s)
	if res.Reason != ReasonKilled || !res.Reaped {
		t.Fatalf("teardown: got %+v, want reason killed and the child reaped", res)
	}
	if slices.Contains(r.Snapshot(), s) {
		t.Error("the torn-down session is still registered")
	}
	if _, err := r.Get(s.ID(), "alice"); err == nil {
		t.Error("get after the teardown: got nil, want an error")
	}
	if k, err := r.Kill(ctx, s.ID(), "alice"); err != nil || k.Reason != ReasonKilled {
		t.Errorf("kill after the teardown: got %+v, %v, want the teardown's result", k, err)
	}
	if testutil.Alive(s.Pid()) {
		t.Errorf("pid %d still runs", s.Pid())
	}
	// A second teardown waits for the first and returns its result.
	if again := r.Teardown(ctx, s); again.Reason != res.Reason || again.Exit != res.Exit {
		t.Errorf("second teardown: got %+v, want %+v", again, res)
	}
}

// TestRegistryObserver: the observer hears every add and every removal, in order per id, with
// the owner and name (the cluster directory is published from it).
func TestRegistryObserver(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var events []Event
	opts := testOptions()
	opts.Observer = func(e Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	r := NewRegistry(opts, nil)
	s, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", "exec sleep 60")
	if _, err := r.Kill(context.Background(), s.ID(), "alice"); err != nil {
		t.Fatalf("kill: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || !events[0].Opened || events[1].Opened ||
		events[0].ID != s.ID() || events[1].ID != s.ID() || events[0].Owner != "alice" {
		t.Fatalf("events: got %+v, want opened then removed for %s owned by alice", events, s.ID())
	}
}
