package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/procfs"
	"github.com/muxterm/muxterm/internal/testutil"
)

// Kills with an escapee. An escapee (a descendant that setsid()s into its own session) keeps
// the PTY slave open, so the reader's read does not end when the shell dies. It exits on its own
// after escapeeLifetime (it is reparented away from us; a test never signals it directly). The
// kill deadline is well under that lifetime: a kill that waited for the reader would miss it.
const (
	escapeeLifetime = 3 * time.Second
	killDeadline    = 1500 * time.Millisecond
)

// escapeeScript runs an escapee that writes its pid to pidfile, optionally prints late (one
// second later, after the test has killed the session), and lives escapeeLifetime in all; with
// trap it ignores HUP and TERM (and so does the sleep it execs). The pid is read as the PPID of
// a grandchild (the escapee's child). The shell itself waits on a `sleep 120` in its own process
// group.
func escapeeScript(pidfile, late string, trap bool) string {
	life := int(escapeeLifetime / time.Second)
	lateCmd := ""
	if late != "" {
		lateCmd = "sleep 1; echo " + late + "; "
		life--
	}
	trapCmd := ""
	if trap {
		trapCmd = `trap "" HUP TERM; `
	}
	return fmt.Sprintf(`setsid sh -c '%ssh -c "echo \$PPID" > %s; %sexec sleep %d' & sleep 120`, trapCmd, pidfile, lateCmd, life)
}

// openWithEscapee opens the escapee script through a new registry and waits until the escapee
// has written its pid. The session's cleanup ends it as its options say and waits for the
// reader, which outlives a spared escapee.
func openWithEscapee(t testing.TB, opts Options, late string) (*Registry, *Session, *collector, int) {
	t.Helper()
	return openEscapee(t, opts, late, false)
}

func openEscapee(t testing.TB, opts Options, late string, trap bool) (*Registry, *Session, *collector, int) {
	t.Helper()
	r := NewRegistry(opts, nil)
	pidfile := filepath.Join(t.TempDir(), "escapee.pid")
	wake, wakeFn := testutil.WakeChan()
	s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c", escapeeScript(pidfile, late, trap))
	c := collect(t, v, wake, nil)
	pid := waitPidFile(t, pidfile)
	if st, err := statOf(pid); err != nil || st.Session == s.pid {
		t.Fatalf("escapee %d: got session %v (err %v), want a session other than %v", pid, st.Session, err, s.pid)
	}
	if late == "" {
		// Once the escapee has exec'd sleep, the grandchild that wrote the pid has exited: the
		// escapee is the one process of its session that holds the PTY.
		testutil.WaitFor(t, 5*time.Second, "escapee exec", func() bool {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
			return err == nil && string(b) == "sleep\n"
		})
	}
	return r, s, c, pid
}

// waitPidFile waits for pidfile to hold a pid and a newline, and returns the pid.
func waitPidFile(t testing.TB, pidfile string) int {
	t.Helper()
	var pid int
	testutil.WaitFor(t, 5*time.Second, "escapee pid file", func() bool {
		b, err := os.ReadFile(pidfile)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// masterClosed reports whether the reader closed the PTY master.
func masterClosed(t *testing.T, s *Session) bool {
	t.Helper()
	s.ptyMu.Lock()
	flagged := s.ptmxClosed
	s.ptyMu.Unlock()
	_, err := s.ptmx.Stat()
	return flagged && errors.Is(err, os.ErrClosed)
}

func TestKillReturnsWhileEscapeeHoldsPTY(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		spare bool
		trap  bool // the escapee ignores HUP and TERM
		// Signalled counts the escapee (policy on) and any process of the shell's group that
		// still held the PTY when it was scanned (the `sleep 120`, if HUP had not ended it yet).
		minSignalled, maxSignalled int
		wantSurvivors              int
		wantBlocked                bool
	}{
		// Policy off: the escapee is found but left alone; the kill still returns at once, and
		// the reader closes the master itself once the escapee exits.
		{name: "escapee policy off", spare: true, minSignalled: 0, maxSignalled: 1, wantSurvivors: 1, wantBlocked: true},
		// Policy on (the default): the escapee is signalled through a pidfd and the reader ends
		// promptly.
		{name: "escapee policy on", spare: false, minSignalled: 1, maxSignalled: 2, wantSurvivors: 0},
		// Policy on, and the escapee ignores HUP and TERM: the escalation reaches KILL.
		{name: "escapee ignoring HUP and TERM", spare: false, trap: true, minSignalled: 1, maxSignalled: 2, wantSurvivors: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := testOptions()
			opts.SpareEscapees = tt.spare
			r, s, _, escapee := openEscapee(t, opts, "", tt.trap)

			res, took := killWithin(t, killDeadline, func(ctx context.Context) (KillResult, error) {
				return r.Kill(ctx, s.ID(), "alice")
			})
			killed := time.Now()
			if res.Status != "killed" || res.Reason != ReasonKilled {
				t.Errorf("status, reason: got %v, %v, want killed, killed", res.Status, res.Reason)
			}
			if !res.Reaped || res.Exit.Signal != syscall.SIGHUP {
				t.Errorf("reaped, exit: got %v, %+v, want true, signal HUP", res.Reaped, res.Exit)
			}
			if res.Escapees != 1 {
				t.Errorf("escapees: got %v, want 1", res.Escapees)
			}
			if res.Signalled < tt.minSignalled || res.Signalled > tt.maxSignalled {
				t.Errorf("signalled: got %v, want %v..%v", res.Signalled, tt.minSignalled, tt.maxSignalled)
			}
			if res.Survivors != tt.wantSurvivors {
				t.Errorf("survivors: got %v, want %v", res.Survivors, tt.wantSurvivors)
			}
			if tt.wantBlocked && !res.ReaderBlocked {
				t.Errorf("reader blocked: got %v, want %v", res.ReaderBlocked, tt.wantBlocked)
			}
			if _, err := r.Get(s.ID(), "alice"); !errors.Is(err, ErrSessionClosed) {
				t.Errorf("get after kill: got %v, want %v", err, ErrSessionClosed)
			}
			if st := s.State(); st != StateClosed {
				t.Errorf("state: got %v, want %v", st, StateClosed)
			}

			if tt.spare {
				// The escapee still holds the PTY, so the reader is still in its read.
				if !testutil.Alive(escapee) {
					t.Fatalf("escapee %d died before its time with the policy off", escapee)
				}
				if isClosed(s.readerDone) || masterClosed(t, s) {
					t.Fatalf("reader ended while the escapee holds the PTY")
				}
				testutil.WaitClosed(t, s.ReaderDone(), escapeeLifetime+5*time.Second, "reader end after the escapee exits")
				// The kernel closes an exiting process's files just before it turns zombie.
				testutil.WaitFor(t, time.Second, "escapee gone once the reader ended", func() bool { return !testutil.Alive(escapee) })
			} else {
				// The escapee had most of its lifetime left: only the kill can have ended it.
				testutil.WaitClosed(t, s.ReaderDone(), time.Second, "reader end after the escapee was killed")
				testutil.WaitFor(t, time.Second, "escapee gone after the kill", func() bool { return !testutil.Alive(escapee) })
				if since := time.Since(killed) + took; since >= escapeeLifetime-500*time.Millisecond {
					t.Errorf("reader ended %v after the kill began: got, want well under %v", since, escapeeLifetime)
				}
			}
			if !masterClosed(t, s) {
				t.Errorf("master closed: got false, want true")
			}
		})
	}
}

func TestOutputAfterKillIsNotAdded(t *testing.T) {
	t.Parallel()
	const late = "LATE-ESCAPEE-OUTPUT"
	var readLate atomic.Bool
	opts := testOptions()
	opts.SpareEscapees = true // the escapee must live to print
	opts.testHookBeforeIngest = func(p []byte) {
		if bytes.Contains(p, []byte(late)) {
			readLate.Store(true)
		}
	}
	r, s, c, _ := openWithEscapee(t, opts, late)

	res, _ := killWithin(t, killDeadline, func(ctx context.Context) (KillResult, error) {
		return r.Kill(ctx, s.ID(), "alice")
	})
	if res.Status != "killed" {
		t.Errorf("status: got %v, want killed", res.Status)
	}
	// The reader drains what the escapee printed after the kill, but keeps none of it.
	testutil.WaitClosed(t, s.ReaderDone(), escapeeLifetime+5*time.Second, "reader end")
	if !readLate.Load() {
		t.Fatalf("the reader never read %q: the test proves nothing", late)
	}
	got, _ := ringBytes(s)
	if bytes.Contains(got, []byte(late)) {
		t.Errorf("ring: got %q, want no %q", got, late)
	}
	if end := s.Info().End; end != res.Offset {
		t.Errorf("output end: got %v, want the kill's offset %v", end, res.Offset)
	}
	if err := c.waitEnd(t, 5*time.Second); err != io.EOF {
		t.Errorf("viewer end: got %v, want %v", err, io.EOF)
	}
	if data := c.bytes(); bytes.Contains(data, []byte(late)) || int64(len(data)) != res.Offset {
		t.Errorf("viewer: got %d bytes %q, want the %v bytes before the kill and no %q", len(data), data, res.Offset, late)
	}
	s.mu.Lock()
	dropped := s.dropped
	s.mu.Unlock()
	if dropped < int64(len(late)) {
		t.Errorf("dropped: got %v bytes, want at least %v", dropped, len(late))
	}
}

// The hook holds one of the readers' workers until the kill is done: readers of its own, so no
// other test's sessions wait behind it.
func TestChunkReadBeforeKillIsNotAddedAfterIt(t *testing.T) {
	t.Parallel()
	const marker = "RACE-MARKER"
	entered, release := make(chan struct{}), make(chan struct{})
	var enterOnce, releaseOnce sync.Once
	opts, _, _ := ownPollers(testOptions())
	// Set before spawn starts the reader, so the reader cannot read the marker unhooked.
	opts.testHookBeforeIngest = func(p []byte) {
		if bytes.Contains(p, []byte(marker)) {
			enterOnce.Do(func() { close(entered) })
			<-release
		}
	}
	r := NewRegistry(opts, nil)
	wake, wakeFn := testutil.WakeChan()
	s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c", "echo "+marker+"; exec sleep 15")
	// Registered after openT's cleanup, so it runs first: a failing test still frees the reader.
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	c := collect(t, v, wake, nil)

	testutil.WaitClosed(t, entered, 5*time.Second, "reader read the marker")
	res, _ := killWithin(t, killDeadline, func(ctx context.Context) (KillResult, error) {
		return r.Kill(ctx, s.ID(), "alice")
	})
	if !res.ReaderBlocked {
		t.Errorf("reader blocked: got %v, want true (it is paused in the hook)", res.ReaderBlocked)
	}
	releaseOnce.Do(func() { close(release) })
	testutil.WaitClosed(t, s.ReaderDone(), 5*time.Second, "reader end")

	got, _ := ringBytes(s)
	if bytes.Contains(got, []byte(marker)) {
		t.Errorf("ring: got %q, want no %q", got, marker)
	}
	if end := s.Info().End; end != res.Offset {
		t.Errorf("output end: got %v, want the kill's offset %v", end, res.Offset)
	}
	if err := c.waitEnd(t, 5*time.Second); err != io.EOF {
		t.Errorf("viewer end: got %v, want %v", err, io.EOF)
	}
	if data := c.bytes(); bytes.Contains(data, []byte(marker)) {
		t.Errorf("viewer: got %q, want no %q", data, marker)
	}
	s.mu.Lock()
	dropped := s.dropped
	s.mu.Unlock()
	if dropped < int64(len(marker)) {
		t.Errorf("dropped: got %v bytes, want at least %v", dropped, len(marker))
	}
}

func TestKillEscalation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		script      string
		wantSignals []string
		wantExit    syscall.Signal
	}{
		{"plain shell", "echo READY; while :; do sleep 1; done", []string{"HUP"}, syscall.SIGHUP},
		{"shell ignoring HUP", "trap '' HUP; echo READY; while :; do sleep 1; done", []string{"HUP", "TERM"}, syscall.SIGTERM},
		{"shell ignoring HUP and TERM", "trap '' HUP TERM; echo READY; while :; do sleep 1; done", []string{"HUP", "TERM", "KILL"}, syscall.SIGKILL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := testOptions()
			r := NewRegistry(opts, nil)
			wake, wakeFn := testutil.WakeChan()
			s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c", tt.script)
			collect(t, v, wake, nil).waitOutput(t, "READY", 5*time.Second)

			// HUP and TERM are each given KillGrace; KILL ends anything.
			deadline := 3*r.Options().KillGrace + 2*time.Second
			res, took := killWithin(t, deadline, func(ctx context.Context) (KillResult, error) {
				return r.Kill(ctx, s.ID(), "alice")
			})
			if !slices.Equal(res.Signals, tt.wantSignals) {
				t.Errorf("signals: got %v, want %v", res.Signals, tt.wantSignals)
			}
			if !res.Reaped || res.Exit.Signal != tt.wantExit || res.Exit.Code != -1 {
				t.Errorf("reaped, exit: got %v, %+v, want true, signal %v", res.Reaped, res.Exit, sig(tt.wantExit))
			}
			if res.Survivors != 0 || res.Escapees != 0 {
				t.Errorf("survivors, escapees: got %v, %v, want 0, 0", res.Survivors, res.Escapees)
			}
			if res.Duration > took {
				t.Errorf("reported duration: got %v, want at most the %v the call took", res.Duration, took)
			}
			if e, ok := s.Exit(); !ok || e != res.Exit {
				t.Errorf("Exit(): got %+v, %v, want %+v, true", e, ok, res.Exit)
			}
			testutil.WaitClosed(t, s.ReaderDone(), 5*time.Second, "reader end")
		})
	}
}

// exitScript prints lines "0000000\n" .. "0131071\n" (exactly 1 MiB) in raw mode, so the PTY
// adds no \r, and exits 7.
const exitScript = `stty raw -echo; awk 'BEGIN { for (i = 0; i < 131072; i++) printf "%07d\n", i }'; exit 7`

func exitScriptOutput() []byte {
	var b bytes.Buffer
	for i := range 131072 {
		fmt.Fprintf(&b, "%07d\n", i)
	}
	return b.Bytes()
}

func TestExitDrainsOutput(t *testing.T) {
	t.Parallel()
	want := exitScriptOutput()
	if len(want) != 1<<20 {
		t.Fatalf("generator: got %v bytes, want %v", len(want), 1<<20)
	}
	t.Run("viewer attached from the start", func(t *testing.T) {
		t.Parallel()
		r := NewRegistry(testOptions(), nil)
		wake, wakeFn := testutil.WakeChan()
		s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c", exitScript)
		c := collect(t, v, wake, nil)
		if err := c.waitEnd(t, 30*time.Second); err != io.EOF {
			t.Fatalf("viewer end: got %v, want %v", err, io.EOF)
		}
		got, gaps, _ := c.result()
		if len(gaps) != 0 {
			t.Errorf("gaps: got %v, want none", gaps)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("output: got %d bytes (first difference at %d), want %d bytes", len(got), firstDiff(got, want), len(want))
		}
		testutil.WaitClosed(t, s.Exited(), 5*time.Second, "exit")
		if e, _ := s.Exit(); e != (ExitStatus{Code: 7}) {
			t.Errorf("exit: got %+v, want code 7", e)
		}
		// An exited session stays attachable until killed or reaped.
		if st := s.State(); st != StateRunning {
			t.Errorf("state: got %v, want %v", st, StateRunning)
		}
	})
	t.Run("viewer attached after the exit", func(t *testing.T) {
		t.Parallel()
		r := NewRegistry(testOptions(), nil)
		s, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", exitScript)
		testutil.WaitClosed(t, s.ReaderDone(), 30*time.Second, "reader end")
		testutil.WaitClosed(t, s.Exited(), 5*time.Second, "exit")
		wake, wakeFn := testutil.WakeChan()
		v, info, err := r.Attach(s.ID(), "alice", 0, wakeFn)
		if err != nil {
			t.Fatalf("attach after exit: got %v, want nil", err)
		}
		if info != (AttachInfo{Offset: 0, Lost: 0, End: int64(len(want))}) {
			t.Errorf("attach info: got %+v, want offset 0, lost 0, end %v", info, len(want))
		}
		c := collect(t, v, wake, nil)
		if err := c.waitEnd(t, 10*time.Second); err != io.EOF {
			t.Fatalf("viewer end: got %v, want %v", err, io.EOF)
		}
		if got := c.bytes(); !bytes.Equal(got, want) {
			t.Errorf("output: got %d bytes (first difference at %d), want %d bytes", len(got), firstDiff(got, want), len(want))
		}
		if e, _ := s.Exit(); e != (ExitStatus{Code: 7}) {
			t.Errorf("exit: got %+v, want code 7", e)
		}
	})
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestKillSignalsStragglersInOtherGroups: a job-control shell puts its background job in a
// process group of its own, which the signals to the shell's group miss. The job is still in
// the session and holds the PTY: the kill finds it and signals it (always, whatever the
// escapee policy), so the reader ends promptly.
func TestKillSignalsStragglersInOtherGroups(t *testing.T) {
	t.Parallel()
	for _, spare := range []bool{false, true} {
		t.Run(fmt.Sprintf("SpareEscapees=%v", spare), func(t *testing.T) {
			t.Parallel()
			opts := testOptions()
			opts.SpareEscapees = spare
			r := NewRegistry(opts, nil)
			wake, wakeFn := testutil.WakeChan()
			s, v := openT(t, r, "alice", wakeFn, "/bin/sh", "-c", "set -m; sleep 60 & echo READY $! .; wait")
			c := collect(t, v, wake, nil)
			c.waitOutput(t, " .", 5*time.Second)
			var job int
			if _, err := fmt.Sscanf(string(c.bytes()[bytes.Index(c.bytes(), []byte("READY")):]), "READY %d .", &job); err != nil {
				t.Fatalf("job pid: %v in %q", err, c.bytes())
			}
			if pgrp := pgrpOf(t, job); pgrp == s.Pid() {
				t.Fatalf("job %d: got process group %v, want one of its own", job, pgrp)
			}

			res, _ := killWithin(t, killDeadline, func(ctx context.Context) (KillResult, error) {
				return r.Kill(ctx, s.ID(), "alice")
			})
			// The job's group is one of the terminal session's: the group steps signal it with
			// the shell's, so no holder is left for a second round.
			if res.Escapees != 0 || res.Groups != 2 || res.Signalled != 0 || res.Survivors != 0 {
				t.Errorf("escapees, groups, signalled, survivors: got %v, %v, %v, %v, want 0, 2, 0, 0", res.Escapees, res.Groups, res.Signalled, res.Survivors)
			}
			testutil.WaitClosed(t, s.ReaderDone(), time.Second, "reader end")
			testutil.WaitFor(t, time.Second, "job gone", func() bool { return !testutil.Alive(job) })
		})
	}
}

func pgrpOf(t *testing.T, pid int) int {
	t.Helper()
	s, err := procfs.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return s.PGRP
}
