package session

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/testutil"
)

// openPipesT opens argv on pipes through r for alice, with a viewer from offset 0.
func openPipesT(t testing.TB, r *Registry, argv ...string) (*Session, *Viewer, <-chan struct{}) {
	t.Helper()
	wake, wakeFn := testutil.WakeChan()
	s, v, err := r.Open(Spec{Argv: argv, Dir: os.TempDir(), Owner: "alice", Pipes: true}, 0, wakeFn)
	if err != nil {
		t.Fatalf("open %q on pipes: %v", argv, err)
	}
	cleanupSession(t, s)
	t.Cleanup(v.Close)
	return s, v, wake
}

// readStreams reads v until the output's end and returns each stream's bytes.
func readStreams(t testing.TB, v *Viewer, wake <-chan struct{}, timeout time.Duration) (stdout, stderr string) {
	t.Helper()
	var out [2]bytes.Buffer
	buf := make([]byte, 4096)
	deadline := time.After(timeout)
	for {
		n, lost, stream, err := v.ReadStream(buf)
		if lost > 0 {
			t.Fatalf("lost %d bytes", lost)
		}
		out[stream].Write(buf[:n])
		if err == io.EOF {
			return out[Stdout].String(), out[Stderr].String()
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if n > 0 {
			continue
		}
		select {
		case <-wake:
		case <-deadline:
			t.Fatalf("no end of output within %v: stdout %q, stderr %q", timeout, out[Stdout].String(), out[Stderr].String())
		}
	}
}

func TestPipeSessionSeparatesStreamsAndExits(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	s, v, wake := openPipesT(t, r, "/bin/sh", "-c", "echo out; echo err >&2; echo out2; exit 3")
	stdout, stderr := readStreams(t, v, wake, 10*time.Second)
	if stdout != "out\nout2\n" || stderr != "err\n" {
		t.Errorf("streams: got stdout %q, stderr %q, want %q, %q", stdout, stderr, "out\nout2\n", "err\n")
	}
	testutil.WaitClosed(t, s.Exited(), 5*time.Second, "exit")
	if e, _ := s.Exit(); e.Code != 3 {
		t.Errorf("exit: got %+v, want code 3", e)
	}
	if st := v.State(); st.Exit == nil || st.Exit.Code != 3 {
		t.Errorf("viewer's exit: got %+v, want code 3", st.Exit)
	}
	if !s.Pipes() || !s.Info().Pipes {
		t.Errorf("pipes: got %v, %v, want true", s.Pipes(), s.Info().Pipes)
	}
	if _, err := r.Capture(s.ID(), "alice", false, 0); !errors.Is(err, ErrNoPipesScreen) {
		t.Errorf("capture: got %v, want %v", err, ErrNoPipesScreen)
	}
}

func TestPipeSessionStdinEOF(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	// cat prints exactly its input, without a terminal's echo, and ends at stdin's end.
	s, v, wake := openPipesT(t, r, "cat")
	if _, err := s.Write([]byte("hi\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := s.CloseStdin(); err != nil {
		t.Fatalf("close stdin: %v", err)
	}
	if err := s.CloseStdin(); err != nil {
		t.Errorf("second close stdin: got %v, want nil", err)
	}
	if _, err := s.Write([]byte("late\n")); !errors.Is(err, ErrStdinClosed) {
		t.Errorf("write after close: got %v, want %v", err, ErrStdinClosed)
	}
	stdout, stderr := readStreams(t, v, wake, 10*time.Second)
	if stdout != "hi\n" || stderr != "" {
		t.Errorf("streams: got %q, %q, want %q, %q", stdout, stderr, "hi\n", "")
	}
	testutil.WaitClosed(t, s.Exited(), 5*time.Second, "cat's exit at EOF")
	if e, _ := s.Exit(); e.Code != 0 || e.Signal != 0 {
		t.Errorf("exit: got %+v, want 0", e)
	}
}

// TestPipeSessionStdinCloseFollowsQueuedInput: input the pipe could not take at once is
// written before stdin closes, so the program reads all of it, then its end.
func TestPipeSessionStdinCloseFollowsQueuedInput(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	// The program reads nothing until a second has passed: the pipe (64 KiB) fills, and the
	// rest of the input waits in the session's queue when CloseStdin comes.
	s, v, wake := openPipesT(t, r, "/bin/sh", "-c", "sleep 1; wc -c")
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	for range 3 {
		if _, err := s.Write(chunk); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	if err := s.CloseStdin(); err != nil {
		t.Fatalf("close stdin: %v", err)
	}
	stdout, _ := readStreams(t, v, wake, 15*time.Second)
	if got := strings.TrimSpace(stdout); got != strconv.Itoa(3*len(chunk)) {
		t.Errorf("bytes the program read: got %q, want %d", got, 3*len(chunk))
	}
}

func TestPipeCallsOnAPTYSession(t *testing.T) {
	t.Parallel()
	s := spawnT(t, testOptions(), "cat")
	if err := s.CloseStdin(); !errors.Is(err, ErrNoPipes) {
		t.Errorf("close stdin of a PTY session: got %v, want %v", err, ErrNoPipes)
	}
	if s.Pipes() {
		t.Errorf("pipes: got true, want false")
	}
}

// openPipeEscapee opens a pipe session whose program leaves an escapee (a `sleep` that called
// setsid) holding its stdout, and returns the session and the escapee's pid once it runs sleep.
func openPipeEscapee(t *testing.T, r *Registry) (*Session, int) {
	t.Helper()
	pidfile := filepath.Join(t.TempDir(), "escapee.pid")
	s, _, _ := openPipesT(t, r, "/bin/sh", "-c", escapeeScript(pidfile, "", false))
	pid := waitPidFile(t, pidfile)
	testutil.WaitFor(t, 5*time.Second, "escapee exec", func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		return err == nil && string(b) == "sleep\n"
	})
	return s, pid
}

// TestPipeSessionKillEndsEscapeeHoldingStdout: a descendant that left the session's process
// group and session (setsid) keeps stdout and stderr open; the kill still returns within its
// deadline, finds it by its pipes, ends it, and the readers end.
func TestPipeSessionKillEndsEscapeeHoldingStdout(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	r := NewRegistry(opts, nil)
	s, pid := openPipeEscapee(t, r)
	res, _ := killWithin(t, killDeadline, func(ctx context.Context) (KillResult, error) {
		return r.Kill(ctx, s.ID(), "alice")
	})
	if res.Escapees != 1 || res.Survivors != 0 || !res.Reaped {
		t.Errorf("escapees, survivors, reaped: got %v, %v, %v, want 1, 0, true", res.Escapees, res.Survivors, res.Reaped)
	}
	testutil.WaitClosed(t, s.ReaderDone(), 2*time.Second, "readers' end after the escapee was killed")
	testutil.WaitFor(t, time.Second, "escapee gone", func() bool { return !testutil.Alive(pid) })
	if _, err := s.Write([]byte("x")); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("write after kill: got %v, want %v", err, ErrSessionClosed)
	}
}

// TestPipeSessionBackpressure: a viewer that does not read holds a pipe session's program as
// it holds a PTY's: the readers stop at the high-water mark and nothing is lost.
func TestPipeSessionBackpressure(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.ScrollbackBytes = 64 << 10
	r := NewRegistry(opts, nil)
	const total = 1 << 20
	s, v, wake := openPipesT(t, r, "/bin/sh", "-c", "head -c "+strconv.Itoa(total)+" /dev/zero; head -c 1000 /dev/zero >&2")
	testutil.WaitFor(t, 5*time.Second, "backpressure", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.paused
	})
	stdout, stderr := readStreams(t, v, wake, 20*time.Second)
	if len(stdout) != total || len(stderr) != 1000 {
		t.Errorf("bytes: got stdout %d, stderr %d, want %d, 1000", len(stdout), len(stderr), total)
	}
}

func TestRingStreams(t *testing.T) {
	r := newTaggedRing(8)
	r.appendTagged([]byte("abc"), Stdout)
	r.appendTagged([]byte("de"), Stderr)
	r.appendTagged([]byte("fghij"), Stdout) // wraps: drops "ab"
	type read struct {
		s      string
		lost   int64
		stream Stream
	}
	var got []read
	off := int64(0)
	for {
		p := make([]byte, 16)
		n, lost, next, st := r.readStream(p, off)
		if n == 0 {
			break
		}
		got = append(got, read{string(p[:n]), lost, st})
		off = next
	}
	want := []read{{"c", 2, Stdout}, {"de", 0, Stderr}, {"fghij", 0, Stdout}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("reads: got %+v, want %+v", got, want)
	}
}

// TestPipeSessionInItsCgroup: a pipe session runs in a cgroup of its own, and its kill ends
// what the signals and the scan of the pipes' holders leave (a job that closed every pipe and
// left the session) with cgroup.kill, and removes the cgroup.
func TestPipeSessionInItsCgroup(t *testing.T) {
	t.Parallel()
	opts := cgroupOptions(t)
	opts.KillGrace = 50 * time.Millisecond
	r := NewRegistry(opts, nil)
	s, v, wake := openPipesT(t, r, "/bin/sh", "-c",
		`(setsid sleep 1000 </dev/null >/dev/null 2>&1 &); cat /proc/self/cgroup; exec sleep 1000`)
	want := "0::" + cgroupRel(t, s.CgroupPath()) + "\n"
	deadline := time.After(10 * time.Second)
	var got []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(got, []byte(want)) {
		n, _, _, err := v.ReadStream(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("read: %v (got %q)", err, got)
		}
		if n == 0 {
			select {
			case <-wake:
			case <-deadline:
				t.Fatalf("no %q within 10s: got %q", want, got)
			}
		}
	}
	killEmptiesCgroup(t, r, s, 2)
}

// TestPipeSessionReapedOnceExited: the reaper's predicate holds for a pipe session as for a
// PTY session: exited, it is a victim whatever its viewers; running and watched, it is not.
func TestPipeSessionReapedOnceExited(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	s, v, _ := openPipesT(t, r, "cat")
	if _, ok := s.ReapReason(time.Now().Add(time.Hour), time.Minute); ok {
		t.Errorf("a watched running pipe session is a reap victim")
	}
	v.Close()
	if reason, ok := s.ReapReason(time.Now().Add(time.Hour), time.Minute); !ok || reason != ReasonReaped {
		t.Errorf("an unwatched pipe session past the grace: got %v, %v, want %v", reason, ok, ReasonReaped)
	}
	if err := s.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosed(t, s.Exited(), 5*time.Second, "cat's exit")
	if reason, ok := r.Claim(s.ID(), s, time.Now(), time.Hour); !ok || reason != ReasonExited {
		t.Fatalf("claim of the exited pipe session: got %v, %v, want %v", reason, ok, ReasonExited)
	}
	if res := r.Teardown(context.Background(), s); res.Status != "exited" {
		t.Errorf("teardown: got %+v, want status exited", res)
	}
}

// TestHandoverEndsPipeSessions: an upgrade in place hands the PTY sessions over and ends the
// pipe sessions first (reason shutdown): their pipes are not handed to the next image.
func TestHandoverEndsPipeSessions(t *testing.T) {
	r := NewRegistry(testOptions(), nil)
	pty, _ := openT(t, r, "alice", nil, "sleep", "1000")
	p, _, _ := openPipesT(t, r, "sleep", "1000")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := r.Handover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.ResumeHandover(st)
	if len(st.Sessions) != 1 || st.Sessions[0].ID != pty.ID() {
		t.Errorf("handed sessions: got %d (%+v), want only the PTY session %s", len(st.Sessions), st.Sessions, pty.ID())
	}
	if reason, closing := p.Closing(); !closing || reason != ReasonShutdown {
		t.Errorf("pipe session: got closing %v, reason %v, want true, %v", closing, reason, ReasonShutdown)
	}
	testutil.WaitClosed(t, p.Exited(), 5*time.Second, "the pipe session's child")
}

// TestPipeSessionsThatExitAtOnce: a child may be reaped before its readers start; its exit
// wakes them safely and is reported after its (empty) output.
func TestPipeSessionsThatExitAtOnce(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	for range 20 {
		s, v, wake := openPipesT(t, r, "true")
		if out, errOut := readStreams(t, v, wake, 10*time.Second); out != "" || errOut != "" {
			t.Errorf("output of true: got %q, %q, want none", out, errOut)
		}
		testutil.WaitClosed(t, s.Exited(), 5*time.Second, "exit of true")
		if e, _ := s.Exit(); e.Code != 0 {
			t.Errorf("exit of true: got %+v, want 0", e)
		}
	}
}

// A process that holds a pipe session's output pipe only for reading (as the gateway does, and
// so any child it forks until that child's exec closes what it inherited) keeps nothing open:
// the kill neither counts it nor signals it. The session's real escapee, holding the write end,
// is counted and ended.
func TestPipeSessionKillLeavesReadersOfItsOutput(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	s, pid := openPipeEscapee(t, r)
	// Another open file description of the gateway's read end of stdout: the same
	// pipe:[inode], read-only (non-blocking, so the open does not wait for a writer).
	var fd int
	if err := rawFD(s.pipe.stdout, &fd); err != nil {
		t.Fatal(err)
	}
	readEnd, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	reader := exec.Command("sleep", "1000")
	reader.ExtraFiles = []*os.File{readEnd}
	reader.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outside the session, as an escapee would be
	done, err := StartChild(reader)
	readEnd.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = reader.Process.Kill()
		_ = reader.Wait()
		done()
	})
	res, _ := killWithin(t, killDeadline, func(ctx context.Context) (KillResult, error) {
		return r.Kill(ctx, s.ID(), "alice")
	})
	if res.Escapees != 1 || res.Survivors != 0 || !res.Reaped {
		t.Errorf("escapees, survivors, reaped: got %v, %v, %v, want 1 (the writer), 0, true", res.Escapees, res.Survivors, res.Reaped)
	}
	testutil.WaitFor(t, time.Second, "escapee gone", func() bool { return !testutil.Alive(pid) })
	if !testutil.Alive(reader.Process.Pid) {
		t.Errorf("the kill signalled a process that only reads the session's output")
	}
}

// fdWritable reads an fd's access mode from /proc/PID/fdinfo: a pipe's read end is not open for
// writing, its write end is, and so is a read-write reopening of it; an O_PATH descriptor is not.
func TestFDWritable(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var rfd int
	if err := rawFD(r, &rfd); err != nil {
		t.Fatal(err)
	}
	rw, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(rfd), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	path, err := unix.Open("/proc/self/fd/"+strconv.Itoa(rfd), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(path)
	fdOf := func(f *os.File) int {
		var fd int
		if err := rawFD(f, &fd); err != nil {
			t.Fatal(err)
		}
		return fd
	}
	for _, c := range []struct {
		name string
		fd   int
		want bool
	}{{"read end", rfd, false}, {"write end", fdOf(w), true}, {"read-write reopening", fdOf(rw), true}, {"O_PATH", path, false}} {
		got, err := fdWritable(os.Getpid(), strconv.Itoa(c.fd))
		if err != nil || got != c.want {
			t.Errorf("%s (fd %d): %v, %v; want %v", c.name, c.fd, got, err, c.want)
		}
	}
	if _, err := fdWritable(os.Getpid(), "999999"); !gone(err) {
		t.Errorf("an fd that is not open: %v, want ENOENT", err)
	}
}
