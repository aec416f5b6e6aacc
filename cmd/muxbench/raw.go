package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"github.com/creack/pty"
)

// rawPTY is a command this process runs on a PTY directly, with no socket: the baseline. The
// master is creack/pty's, a blocking fd, so a read parks an OS thread in the kernel.
type rawPTY struct {
	cmd    *exec.Cmd
	f      *os.File
	closed bool
}

// startRaw runs `sh -c script` on a new 80x24 PTY, in its own session, tagged with the run id.
func (b *bench) startRaw(script string) (*rawPTY, error) {
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color", b.tag())
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
	if err != nil {
		return nil, fmt.Errorf("start %q on a pty: %w", script, err)
	}
	return &rawPTY{cmd: cmd, f: f}, nil
}

// close kills the process group, reaps the child and closes the master. A reader blocked on the
// master returns EIO once the group is gone, so call close before waiting for readers.
func (r *rawPTY) close() {
	if r.closed {
		return
	}
	r.closed = true
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	_ = r.cmd.Wait()
	r.f.Close()
}

// wait reaps a child that is expected to exit on its own, then closes the master.
func (r *rawPTY) wait() error {
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.cmd.Wait()
	r.f.Close()
	if err != nil {
		return fmt.Errorf("wait for %s: %w", r.cmd.Args, err)
	}
	return nil
}

// readAll reads the master to its end (EIO once every slave fd is closed), returning the count.
func (r *rawPTY) readAll(buf []byte) (int64, error) {
	var n int64
	for {
		m, err := r.f.Read(buf)
		n += int64(m)
		if err != nil {
			if isPTYEnd(err) {
				return n, nil
			}
			return n, fmt.Errorf("read pty: %w", err)
		}
	}
}

// readUntil reads until the output contains want.
func (r *rawPTY) readUntil(want string) ([]byte, error) {
	var out []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(out, []byte(want)) {
		n, err := r.f.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, fmt.Errorf("wait for %q on pty (got %q): %w", want, tail(out), err)
		}
	}
	return out, nil
}

func isPTYEnd(err error) bool {
	return errors.Is(err, syscall.EIO) || errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed)
}

// rawFlood counts what a reader goroutine reads from a raw PTY until it ends.
type rawFlood struct {
	*tally
	r    *rawPTY
	done chan struct{}
}

func startRawFlood(r *rawPTY) *rawFlood {
	f := &rawFlood{tally: newTally(), r: r, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		defer f.end()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.f.Read(buf)
			f.add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	return f
}

// stop kills the flooding process and waits for the reader.
func (f *rawFlood) stop() {
	_ = syscall.Kill(-f.r.cmd.Process.Pid, syscall.SIGKILL)
	<-f.done
	f.r.close()
}
