//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fencedBlock is one fenced code block of a Markdown file.
type fencedBlock struct {
	lang  string   // the info string's first word
	line  int      // of the opening fence, from 1
	lines []string // the content
}

// fencedBlocks returns the fenced code blocks of md (``` fences, not indented).
func fencedBlocks(md string) []fencedBlock {
	var blocks []fencedBlock
	var cur *fencedBlock
	for i, l := range strings.Split(md, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			lang, _, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(l, "```")), " ")
			cur = &fencedBlock{lang: lang, line: i + 1}
		case cur != nil && strings.TrimSpace(l) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		}
	}
	return blocks
}

// readmeNotRun are the shell blocks of README.md that TestReadmeCommands does not run, by the
// start of their first line, each with why. Every other sh block runs.
var readmeNotRun = map[string]string{
	"make run    # builds": "make test is CI itself (it runs this test); its make run is the Quick start's, which runs",
	"export MUXTERM_CLUSTER_TOKEN=": "starts three gateways in the background on fixed ports for good; " +
		"TestCluster* (e2e/cluster_test.go) run that configuration with ports of their own",
}

// TestReadmeCommands runs every fenced sh block of README.md that readmeNotRun does not name,
// in order, as README's reader would from this clone: `make run` is started for real (on a free
// port: MUXTERM_URL names it, as README says for another address) with HOME a scratch directory,
// so the token it keeps and what `make install` installs land there, the latter first on PATH.
// The other lines of a block run in one bash with -e -o pipefail; a failing line fails the
// test. The lines README shows as make run's output are checked against what it printed.
func TestReadmeCommands(t *testing.T) {
	root := repoRoot(t)
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	home := scratchDir(t)
	env := readmeEnv(t, home)
	var gw *makeRun
	ran, excluded := 0, map[string]bool{}
	for _, b := range fencedBlocks(string(md)) {
		if b.lang != "sh" || len(b.lines) == 0 {
			continue
		}
		if why := notRun(b); why != "" {
			excluded[why] = true
			t.Logf("README.md:%d not run: %s", b.line, why)
			continue
		}
		var script []string
		for _, l := range b.lines {
			switch trimmed := strings.TrimSpace(l); {
			case trimmed == "make run":
				if gw == nil {
					var url string
					gw, url = startMakeRun(t, root, env)
					// README's commands use the default URL, 127.0.0.1:8222; this one is elsewhere.
					env = append(env, "MUXTERM_URL="+url)
				}
			case strings.HasPrefix(trimmed, "# muxterm: ") && gw != nil:
				// make run's output as README shows it, up to the address or path.
				want := strings.TrimPrefix(trimmed, "# ")
				for _, cut := range []string{"127.0.0.1", "/home/you"} {
					want, _, _ = strings.Cut(want, cut)
				}
				if !strings.Contains(gw.output(), "\n"+want) {
					t.Errorf("README.md:%d shows make run printing %q…; it printed:\n%s", b.line, want, gw.output())
				}
			default:
				script = append(script, l)
			}
		}
		if strings.TrimSpace(strings.Join(script, "")) == "" {
			ran++
			continue
		}
		if gw == nil {
			t.Fatalf("README.md:%d runs commands before any block started make run", b.line)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-x", "-e", "-o", "pipefail", "-c", strings.Join(script, "\n"))
		cmd.Dir, cmd.Env = root, env
		cmd.Stdin = nil // not a terminal: attach detaches at the end of its input
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("README.md:%d: the block failed: %v\n%s", b.line, err, out)
		} else {
			t.Logf("README.md:%d ran:\n%s", b.line, out)
		}
		ran++
	}
	for first, why := range readmeNotRun {
		if !excluded[why] {
			t.Errorf("readmeNotRun names %q, which starts no sh block of README.md any more", first)
		}
	}
	if ran < 2 || gw == nil {
		t.Errorf("ran %d blocks (make run started: %v): README.md's blocks changed shape?", ran, gw != nil)
	}
}

// notRun is why b is not run, or "".
func notRun(b fencedBlock) string {
	for first, why := range readmeNotRun {
		if strings.HasPrefix(b.lines[0], first) {
			return why
		}
	}
	return ""
}

// readmeEnv is the environment of README's commands: HOME is home (with ~/.local/bin first on
// PATH, where make install puts the binaries), Go's and npm's caches and settings stay where
// they are, and no MUXTERM_*, XDG_* or install setting of the caller's leaks in.
func readmeEnv(t *testing.T, home string) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	goenv := strings.Split(strings.TrimSpace(string(out)), "\n")
	npm, err := exec.Command("npm", "config", "get", "cache", "userconfig").Output()
	if err != nil {
		t.Fatalf("npm config get: %v", err)
	}
	npmConf := strings.Split(strings.TrimSpace(string(npm)), "\n")
	if len(goenv) != 4 || len(npmConf) != 2 {
		t.Fatalf("go env: %q, npm config get: %q", goenv, npmConf)
	}
	var drop []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "MUXTERM_") || strings.HasPrefix(k, "XDG_") {
			drop = append(drop, k)
		}
	}
	drop = append(drop, "HOME", "PATH", "GOBIN", "PREFIX", "BINDIR", "PORT", "ARGS", "MAKEFLAGS", "MAKELEVEL", "MFLAGS",
		"GOCACHE", "GOMODCACHE", "GOPATH", "GOENV", "npm_config_cache", "npm_config_userconfig")
	return envWithout(drop, "HOME="+home, "PATH="+filepath.Join(home, ".local", "bin")+":"+os.Getenv("PATH"),
		"GOCACHE="+goenv[0], "GOMODCACHE="+goenv[1], "GOPATH="+goenv[2], "GOENV="+goenv[3],
		"npm_config_cache="+npmConf[0], "npm_config_userconfig="+npmConf[1], "SHELL=/bin/sh", "TERM=xterm-256color")
}

// makeRun is `make run` running in its own process group.
type makeRun struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    strings.Builder
	exited chan struct{}
}

func (m *makeRun) output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out.String()
}

// startMakeRun starts `make run` in root on a free port with env, waits for the gateway's token
// line, and stops the whole process group (SIGTERM, then SIGKILL) when t ends. It returns the
// gateway's WebSocket URL.
func startMakeRun(t *testing.T, root string, env []string) (*makeRun, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	m := &makeRun{exited: make(chan struct{})}
	m.cmd = exec.Command("make", "--no-print-directory", "run", "PORT="+strconv.Itoa(port))
	m.cmd.Dir, m.cmd.Env = root, env
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	m.cmd.Stdout, m.cmd.Stderr = w, w
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(r)
		signalled := false // ready is this goroutine's to close, once
		for sc.Scan() {
			m.mu.Lock()
			m.out.WriteString(sc.Text() + "\n")
			m.mu.Unlock()
			if strings.HasPrefix(sc.Text(), "muxterm: token kept in ") && !signalled {
				close(ready)
				signalled = true
			}
		}
		r.Close()
		_ = m.cmd.Wait()
		close(m.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
			<-m.exited
			t.Errorf("make run did not stop within 15 s of SIGTERM:\n%s", m.output())
		}
		if err := syscall.Kill(-m.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("a process of make run's group outlived it: %v", err)
		}
	})
	select {
	case <-ready:
	case <-m.exited:
		t.Fatalf("make run exited:\n%s", m.output())
	case <-time.After(5 * time.Minute):
		t.Fatalf("make run did not print its token line within 5 minutes:\n%s", m.output())
	}
	return m, "ws://127.0.0.1:" + strconv.Itoa(port) + "/ws"
}

// TestMakeRunPassesArgs: make run starts the gateway with --allow-cmd '*' and its pid file, then
// ARGS as given, and PORT picks the port (make -n: the commands, none run).
func TestMakeRunPassesArgs(t *testing.T) {
	env := envWithout([]string{"MAKEFLAGS", "MAKELEVEL", "MFLAGS", "ARGS", "PORT", "RUN_FLAGS"})
	out := runIn(t, time.Minute, repoRoot(t), env, "make", "-n", "--no-print-directory", "run", "PORT=8300",
		`ARGS=--allow-cmd "*" --window-size smallest --new-token`)
	want := `./bin/gateway --listen 127.0.0.1:8300 --allow-cmd '*' --pid-file bin/gateway-8300.pid --allow-cmd "*" --window-size smallest --new-token`
	if !strings.Contains(out, "\n"+want+"\n") {
		t.Errorf("make -n run: got\n%s\nwant the line %q", out, want)
	}
}
