package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// child is a server process muxbench starts (the gateway, the pass-through), which announces
// itself on stdout.
type child struct {
	cmd    *exec.Cmd
	lines  chan string   // stdout lines, closed at EOF; dropped once nobody waits for them
	exited chan struct{} // closed once cmd.Wait returned
	err    error         // cmd.Wait's result; read after exited
}

// startChild starts cmd, which the kernel kills if muxbench dies without cleaning up, and
// reads its stdout.
func startChild(cmd *exec.Cmd) (*child, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("stdout of %s: %w", cmd.Path, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 4), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default: // nobody listens any more; keep draining so the child never blocks
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		close(c.lines)
	}()
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// waitLines passes stdout lines to take until it reports done, the child exits (errExited),
// 15 s pass or ctx ends.
func (c *child) waitLines(ctx context.Context, take func(line string) (done bool)) error {
	timeout := time.NewTimer(15 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				<-c.exited
				return fmt.Errorf("%w: %v", errExited, c.err)
			}
			if take(line) {
				return nil
			}
		case <-timeout.C:
			return errors.New("no announcement within 15s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

var errExited = errors.New("exited before announcing itself")

// terminate sends SIGTERM and waits for the exit; after 10 s it sends SIGKILL and reports true.
// It is safe to call more than once.
func (c *child) terminate() (killed bool) {
	select {
	case <-c.exited:
		return false
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-c.exited:
		return false
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.exited
		return true
	}
}
