package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The terminal settings both pages get: muxterm's UI has them built in (frontend/src/tab.ts),
// ttyd is given them with -t.
const (
	fontFamily = `ui-monospace, "DejaVu Sans Mono", "Cascadia Mono", Menlo, Consolas, monospace`
	fontSize   = 14
	lineHeight = 1.1
	scrollback = 10000
)

// server is a process this run started, killed by the kernel if pagebench dies.
type server struct {
	cmd  *exec.Cmd
	done chan struct{}
	base string // http://127.0.0.1:PORT
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func start(cmd *exec.Cmd, stdout io.Writer) (*server, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	s := &server{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// writeShell writes the shell both servers run: bash without rc files and with PS1 "$ ", so
// that both pages show the same prompt.
func writeShell(dir string) (string, error) {
	p := filepath.Join(dir, "shell.sh")
	const script = "#!/bin/sh\nexport PS1='$ '\nexec bash --norc --noprofile -i\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	return p, nil
}

// startGateway runs muxterm's gateway on 127.0.0.1:0 and returns it with its token.
func startGateway(ctx context.Context, bin, shell string) (*server, string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, "", fmt.Errorf("token: %w", err)
	}
	token := hex.EncodeToString(b[:])
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--shell", shell, "--log-level", "warn", "--idle-grace", "1h")
	cmd.Env = append(os.Environ(), "MUXTERM_TOKEN="+token)
	cmd.Stderr = os.Stderr
	pr, pw := io.Pipe()
	s, err := start(cmd, pw)
	if err != nil {
		return nil, "", err
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "muxterm: listening on http://"); ok {
				select {
				case addr <- strings.TrimSpace(rest):
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		<-s.done
		pw.Close()
	}()
	select {
	case a := <-addr:
		s.base = "http://" + a
		return s, token, nil
	case <-s.done:
		return nil, "", fmt.Errorf("gateway %s exited before listening", bin)
	case <-time.After(15 * time.Second):
		s.stop()
		return nil, "", fmt.Errorf("gateway %s: no listening line within 15s", bin)
	case <-ctx.Done():
		s.stop()
		return nil, "", ctx.Err()
	}
}

// startTTYD runs ttyd on a free loopback port with the same terminal settings as muxterm's UI.
func startTTYD(ctx context.Context, bin, shell string, extra []string) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-i", "127.0.0.1", "-p", strconv.Itoa(port), "-W",
		"-t", "fontFamily="+fontFamily, "-t", fmt.Sprintf("fontSize=%d", fontSize),
		"-t", fmt.Sprintf("lineHeight=%g", lineHeight), "-t", fmt.Sprintf("scrollback=%d", scrollback),
		"-t", "disableLeaveAlert=true", "-t", "disableResizeOverlay=true")
	cmd.Args = append(append(cmd.Args, extra...), shell)
	s, err := start(cmd, io.Discard)
	if err != nil {
		return nil, err
	}
	s.base = fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := http.Get(s.base + "/")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("ttyd %s exited before serving", bin)
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("ttyd %s: no answer on %s within 15s", bin, s.base)
		}
	}
}

// ttydVersion is ttyd's --version, with the release tag and commit scripts/build-ttyd.sh
// recorded in VERSION beside the binary.
func ttydVersion(bin string) string {
	out, _ := exec.Command(bin, "--version").CombinedOutput()
	v, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(bin), "VERSION")); err == nil {
		v += " (built from " + strings.TrimSpace(string(b)) + ")"
	}
	return v
}
