package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/leakcheck"
	"github.com/muxterm/muxterm/internal/testutil"

	"golang.org/x/sys/unix"
)

// winsize reads the PTY's window size through SyscallConn, as setSize writes it.
func winsize(t *testing.T, s *Session) (cols, rows int) {
	t.Helper()
	rc, err := s.ptmx.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ws *unix.Winsize
	var ioErr error
	if err := rc.Control(func(fd uintptr) { ws, ioErr = unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ) }); err != nil {
		t.Fatal(err)
	}
	if ioErr != nil {
		t.Fatal(ioErr)
	}
	return int(ws.Col), int(ws.Row)
}

// nonblocking reports whether the master is still in non-blocking mode (File.Fd would have
// cleared it).
func nonblocking(t *testing.T, s *Session) bool {
	t.Helper()
	rc, err := s.ptmx.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	var fErr error
	if err := rc.Control(func(fd uintptr) { flags, fErr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil {
		t.Fatal(err)
	}
	if fErr != nil {
		t.Fatal(fErr)
	}
	return flags&unix.O_NONBLOCK != 0
}

// TestResizeKeepsMasterNonBlocking: after resizes the master is still non-blocking and read. It
// would not be if Resize went through File.Fd, which puts the fd back into blocking mode, and a
// blocking master would then hold one of the shared readers in its read.
func TestResizeKeepsMasterNonBlocking(t *testing.T) {
	t.Parallel()
	s := spawnT(t, testOptions(), "/bin/sh", "-c", "echo READY; read x; stty size; exec sleep 60")
	wake, wakeFn := testutil.WakeChan()
	v, _, err := s.Subscribe(0, wakeFn)
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, v, wake, nil)
	c.waitOutput(t, "READY", 5*time.Second)

	sizes := []struct {
		name       string
		cols, rows int
		wantErr    error
	}{
		{"ordinary", 100, 40, nil},
		{"smallest", 1, 1, nil},
		{"largest", MaxCols, MaxRows, nil},
		{"zero cols", 0, 24, ErrBadSize},
		{"zero rows", 80, 0, ErrBadSize},
		{"negative", -1, -1, ErrBadSize},
		{"cols too large", MaxCols + 1, 24, ErrBadSize},
		{"rows too large", 80, MaxRows + 1, ErrBadSize},
		{"wraps uint16", 65536 + 80, 24, ErrBadSize},
		{"final", 132, 43, nil},
	}
	wantCols, wantRows := 80, 24
	for _, tt := range sizes {
		cols, rows, err := s.Resize(tt.cols, tt.rows)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: Resize(%d, %d): got %v, want %v", tt.name, tt.cols, tt.rows, err, tt.wantErr)
			continue
		}
		if err == nil {
			if cols != tt.cols || rows != tt.rows {
				t.Errorf("%s: applied got %vx%v, want %vx%v", tt.name, cols, rows, tt.cols, tt.rows)
			}
			wantCols, wantRows = tt.cols, tt.rows
		}
		if gc, gr := winsize(t, s); gc != wantCols || gr != wantRows {
			t.Errorf("%s: PTY size got %vx%v, want %vx%v", tt.name, gc, gr, wantCols, wantRows)
		}
		if in := s.Info(); in.Cols != wantCols || in.Rows != wantRows {
			t.Errorf("%s: Info size got %vx%v, want %vx%v", tt.name, in.Cols, in.Rows, wantCols, wantRows)
		}
	}
	// The program sees the size.
	if _, err := s.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	c.waitOutput(t, fmt.Sprintf("%d %d", wantRows, wantCols), 5*time.Second)

	if !nonblocking(t, s) {
		t.Fatalf("master non-blocking after Resize: got false, want true")
	}
	if isClosed(s.readerDone) {
		t.Fatalf("reader ended while the program still runs")
	}
	// spawnT's cleanup kills the session and waits for the reader to close the master.
}

func TestWriteReachesProgram(t *testing.T) {
	t.Parallel()
	s := spawnT(t, testOptions(), "/bin/sh", "-c", "stty -echo; echo READY; exec cat")
	wake, wakeFn := testutil.WakeChan()
	v, _, err := s.Subscribe(0, wakeFn)
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, v, wake, nil)
	c.waitOutput(t, "READY", 5*time.Second)
	var want strings.Builder
	for i := range 50 {
		line := fmt.Sprintf("line-%03d\n", i)
		if n, err := s.Write([]byte(line)); err != nil || n != len(line) {
			t.Fatalf("write %q: got %v, %v, want %v, nil", line, n, err, len(line))
		}
		want.WriteString(strings.ReplaceAll(line, "\n", "\r\n")) // onlcr
	}
	c.waitOutput(t, want.String(), 5*time.Second)
	if n, err := s.Write(nil); n != 0 || err != nil {
		t.Errorf("empty write: got %v, %v, want 0, nil", n, err)
	}
}

// TestWriteNeverBlocks: a program that never reads its input fills the PTY, then the bounded
// queue, and then Write refuses with ErrInputFull instead of blocking.
func TestWriteNeverBlocks(t *testing.T) {
	t.Parallel()
	s := spawnT(t, testOptions(), "/bin/sh", "-c", "stty raw -echo; echo READY; exec sleep 60")
	wake, wakeFn := testutil.WakeChan()
	v, _, err := s.Subscribe(0, wakeFn)
	if err != nil {
		t.Fatal(err)
	}
	collect(t, v, wake, nil).waitOutput(t, "READY", 5*time.Second)

	// Offer 8 MiB in 4 KiB writes. The kernel takes some, the queue holds maxInputQueue, one
	// queue-load may be in flight to the PTY; everything else must be refused, at once.
	type outcome struct {
		accepted, refused int
		err               error // the first error other than ErrInputFull
	}
	done := make(chan outcome, 1)
	go func() {
		chunk := bytes.Repeat([]byte("x"), 4<<10)
		var o outcome
		for range 2048 {
			n, err := s.Write(chunk)
			o.accepted += n
			switch {
			case errors.Is(err, ErrInputFull):
				o.refused++
			case err != nil:
				o.err = err
				done <- o
				return
			}
		}
		done <- o
	}()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("Write blocked on a program that does not read")
	}
	if o.err != nil {
		t.Fatalf("write: got %v, want nil or %v", o.err, ErrInputFull)
	}
	if o.refused == 0 || o.accepted < maxInputQueue || o.accepted > 512<<10 {
		t.Errorf("accepted %v bytes, refused %v writes: want between %v and %v bytes accepted, the rest refused",
			o.accepted, o.refused, maxInputQueue, 512<<10)
	}
	t.Logf("accepted %v bytes, then %v", o.accepted, ErrInputFull)
}

func TestWriteRefusesMoreThanTheQueue(t *testing.T) {
	t.Parallel()
	s := spawnT(t, testOptions(), "/bin/sh", "-c", "exec sleep 60")
	if n, err := s.Write(make([]byte, maxInputQueue+1)); n != 0 || !errors.Is(err, ErrInputFull) {
		t.Errorf("oversize write: got %v, %v, want 0, %v", n, err, ErrInputFull)
	}
	s.inMu.Lock()
	queued, draining := len(s.inQueue), s.inDraining
	s.inMu.Unlock()
	if queued != 0 || draining {
		t.Errorf("queue after a refused write: got %v bytes, draining %v, want 0, false", queued, draining)
	}
}

func TestWriteAfterKill(t *testing.T) {
	t.Parallel()
	r := NewRegistry(testOptions(), nil)
	s, _ := openT(t, r, "alice", nil, "/bin/sh", "-c", "exec sleep 60")
	killWithin(t, 2*time.Second, func(ctx context.Context) (KillResult, error) { return r.Kill(ctx, s.ID(), "alice") })
	if n, err := s.Write([]byte("x")); n != 0 || !errors.Is(err, ErrSessionClosed) {
		t.Errorf("write after kill: got %v, %v, want 0, %v", n, err, ErrSessionClosed)
	}
	if _, _, err := s.Subscribe(0, nil); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("subscribe after kill: got %v, want %v", err, ErrSessionClosed)
	}
	if err := s.Signal(syscall.SIGINT); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("signal after kill: got %v, want %v", err, ErrSessionClosed)
	}
}

func TestSignalReachesForegroundGroup(t *testing.T) {
	t.Parallel()
	s := spawnT(t, testOptions(), "/bin/sh", "-c", "echo READY; exec sleep 60")
	wake, wakeFn := testutil.WakeChan()
	v, _, err := s.Subscribe(0, wakeFn)
	if err != nil {
		t.Fatal(err)
	}
	collect(t, v, wake, nil).waitOutput(t, "READY", 5*time.Second)
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.WaitClosed(t, s.Exited(), 5*time.Second, "exit after TERM")
	if e, _ := s.Exit(); e != (ExitStatus{Code: -1, Signal: syscall.SIGTERM}) || e.SignalName() != "TERM" {
		t.Errorf("exit: got %+v (%q), want signal TERM", e, e.SignalName())
	}
}

func TestSpawnErrors(t *testing.T) {
	fds, pts := leakcheck.FDs(), countPTS()
	tests := []struct {
		name    string
		spec    Spec
		wantErr error // nil: any error
	}{
		{"zero size", Spec{Argv: []string{"/bin/sh"}, Cols: 0, Rows: 0}, ErrBadSize},
		{"too wide", Spec{Argv: []string{"/bin/sh"}, Cols: MaxCols + 1, Rows: 24}, ErrBadSize},
		{"no such program", Spec{Argv: []string{"/nonexistent/program"}, Cols: 80, Rows: 24}, os.ErrNotExist},
		{"no such directory", Spec{Argv: []string{"/bin/sh"}, Dir: "/nonexistent/dir", Cols: 80, Rows: 24}, os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions().withDefaults()
			s, err := spawn(newID(), tt.spec, &o, nil, time.Now)
			if err == nil {
				cleanupSession(t, s)
				t.Fatalf("spawn: got nil error, want %v", tt.wantErr)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("spawn: got %v, want %v", err, tt.wantErr)
			}
		})
	}
	if got := leakcheck.OpenedSince(fds); len(got) != 0 {
		t.Errorf("fds left open by failed spawns: %q", got)
	}
	if got := countPTS(); got != pts {
		t.Errorf("/dev/pts entries after failed spawns: got %v, want %v", got, pts)
	}
}
