package testutil

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestWaitForAndWaitClosed(t *testing.T) {
	n := 0
	WaitFor(t, 10*time.Second, "third call", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
	ch, wake := WakeChan()
	if Closed(ch) {
		t.Fatal("an empty channel is closed")
	}
	wake()
	wake() // merges with the first
	WaitClosed(t, ch, 10*time.Second, "wake")
	select {
	case <-ch:
		t.Fatal("two wakes delivered twice")
	default:
	}
	done := make(chan struct{})
	close(done)
	if !Closed(done) {
		t.Fatal("a closed channel is not closed")
	}
}

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if Alive(cmd.Process.Pid) {
		t.Fatal("an exited, unreaped child (a zombie) is alive")
	}
	_ = cmd.Wait()
	if Alive(cmd.Process.Pid) {
		t.Fatal("a reaped child is alive")
	}
}

type shutdowner struct{ called bool }

func (s *shutdowner) Shutdown(context.Context) error { s.called = true; return nil }

func TestWaitClosedCtxAndShutdownAtEnd(t *testing.T) {
	done := make(chan struct{})
	close(done)
	WaitClosedCtx(context.Background(), t, done, "a closed channel")
	s := &shutdowner{}
	t.Run("sub", func(t *testing.T) { ShutdownAtEnd(t, "s", s) })
	if !s.called {
		t.Fatal("Shutdown not called when the subtest ended")
	}
}

// MuteListener accepts a connection, hands it over, never writes to it, and closes it when the
// test that made it ends.
func TestMuteListener(t *testing.T) {
	var conn net.Conn
	t.Run("mute", func(t *testing.T) {
		addr, accepted := MuteListener(t)
		var err error
		if conn, err = net.Dial("tcp", addr); err != nil {
			t.Fatal(err)
		}
		select {
		case <-accepted:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection was not accepted")
		}
		_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, err := conn.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read from the mute listener: %d, %v; want the deadline", n, err)
		}
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read once the subtest ended: %d, %v; want EOF (the listener's side closed)", n, err)
	}
}
