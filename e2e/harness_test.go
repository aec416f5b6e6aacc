//go:build e2e

// Package e2e tests the built gateway binary from the outside: real sockets on 127.0.0.1, real
// PTYs, the Go client, a real browser. Run with `make test-e2e` (MUXTERM_BIN names the binary;
// without it the test builds one).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
)

// goBinary is a command the suite runs: the file an environment variable names, or else one
// built from a Go package once per test run.
type goBinary struct {
	env, pkg, name string // the variable ("" for none), the package, the built file's name

	once sync.Once
	path string
	err  error
}

// get returns the binary's path, building it on the first call, and fails t if it cannot.
func (b *goBinary) get(t *testing.T) string {
	t.Helper()
	if b.env != "" {
		if p := os.Getenv(b.env); p != "" {
			return p
		}
	}
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "muxterm-e2e-"+b.name)
		if err != nil {
			b.err = fmt.Errorf("build %s: %w", b.name, err)
			return
		}
		b.path = filepath.Join(dir, b.name)
		out, err := exec.Command("go", "build", "-o", b.path, b.pkg).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

var gatewayBin = &goBinary{env: "MUXTERM_BIN", pkg: "github.com/muxterm/muxterm/cmd/gateway", name: "gateway"}

// binary returns the gateway binary: $MUXTERM_BIN, or one built once for this test run.
func binary(t *testing.T) string { return gatewayBin.get(t) }

// gateway is a running gateway process.
type gateway struct {
	t     *testing.T
	cmd   *exec.Cmd
	Base  string // http://127.0.0.1:port
	WS    string // ws://127.0.0.1:port/ws
	Token string

	mu   sync.Mutex
	logs strings.Builder // stdout and stderr, for the token scan and failures

	exited chan struct{}
	err    error
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startGateway runs the binary on 127.0.0.1:0 with a fresh token and extra args, waits for
// its listening line and stops it (SIGTERM, then SIGKILL) in cleanup.
func startGateway(t *testing.T, args ...string) *gateway {
	t.Helper()
	return startGatewayEnv(t, nil, args...)
}

// startGatewayEnv is startGateway with extra environment variables.
func startGatewayEnv(t *testing.T, env []string, args ...string) *gateway {
	t.Helper()
	tok := randomToken()
	return launchGateway(t, tok, env, append([]string{"--token", tok}, args...)...)
}

// launchGateway runs the binary on 127.0.0.1:0 (args may override --listen) with env, knowing
// tok as its token but passing no token flag itself, waits for its listening line, and stops
// it (SIGTERM, then SIGKILL) in cleanup, checking that no token of the suite reached its output.
func launchGateway(t *testing.T, tok string, env []string, args ...string) *gateway {
	t.Helper()
	return launchGatewayWith(t, tok, env, nil, args...)
}

// startGatewayNofile is startGateway with the descriptor table limited to nofile (soft and
// hard: Go raises the soft limit to the hard one at start), through prlimit(1), which execs the
// gateway in its own process.
func startGatewayNofile(t *testing.T, nofile int, args ...string) *gateway {
	t.Helper()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit(1) not installed (util-linux)")
	}
	tok := randomToken()
	wrap := func(c *exec.Cmd) {
		c.Path = prlimit
		c.Args = append([]string{prlimit, fmt.Sprintf("--nofile=%d:%d", nofile, nofile), "--"}, c.Args...)
	}
	return launchGatewayWith(t, tok, nil, wrap, append([]string{"--token", tok}, args...)...)
}

// launchGatewayWith is launchGateway with a hook that may change the command before it starts.
func launchGatewayWith(t *testing.T, tok string, env []string, hook func(*exec.Cmd), args ...string) *gateway {
	t.Helper()
	return launchGatewayBinWith(t, binary(t), tok, env, hook, args...)
}

// launchGatewayBin is launchGateway running the binary at bin.
func launchGatewayBin(t *testing.T, bin, tok string, env []string, args ...string) *gateway {
	t.Helper()
	return launchGatewayBinWith(t, bin, tok, env, nil, args...)
}

// launchGatewayBinWith runs the binary at bin, with a hook that may change the command before
// it starts.
func launchGatewayBinWith(t *testing.T, bin, tok string, env []string, hook func(*exec.Cmd), args ...string) *gateway {
	t.Helper()
	g, listening := spawnGatewayBin(t, bin, tok, env, hook, args...)
	g.awaitListening(listening, 20*time.Second)
	return g
}

// spawnGateway starts the binary under test and returns at once (see spawnGatewayBin).
func spawnGateway(t *testing.T, tok string, env []string, args ...string) (*gateway, <-chan string) {
	t.Helper()
	return spawnGatewayBin(t, binary(t), tok, env, nil, args...)
}

// spawnGatewayBin starts the binary at bin and returns at once; awaitListening waits for its
// listening line. Several gateways that wait for each other at start (a cluster) are spawned
// first.
func spawnGatewayBin(t *testing.T, bin, tok string, env []string, hook func(*exec.Cmd), args ...string) (*gateway, <-chan string) {
	t.Helper()
	g := &gateway{t: t, Token: tok, exited: make(chan struct{})}
	all := append([]string{"--listen", "127.0.0.1:0", "--log-level", "debug"}, args...)
	g.cmd = exec.Command(bin, all...)
	// A token the gateway generates is kept under XDG_STATE_HOME: each gateway gets a state
	// directory of its own (env may name another), so that no test reads or writes the user's.
	g.cmd.Env = append(append(os.Environ(), "SHELL=/bin/sh", "XDG_STATE_HOME="+t.TempDir()), env...)
	if hook != nil {
		hook(g.cmd)
	}
	// A test binary that dies (its -timeout's panic, a SIGKILL) takes its gateways with it: an
	// orphaned gateway would keep its sessions, its port and every descriptor it inherited.
	if g.cmd.SysProcAttr == nil {
		g.cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	g.cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := g.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan string, 1)
	var wg sync.WaitGroup
	wg.Go(func() { g.scan(stdout, listening) })
	wg.Go(func() { g.scan(stderr, nil) })
	go func() {
		wg.Wait()
		g.err = g.cmd.Wait()
		close(g.exited)
	}()
	t.Cleanup(func() {
		g.Stop(10 * time.Second)
		checkNoToken(t, "the gateway's output", g.Logs())
	})
	return g, listening
}

// awaitListening waits up to d for the listening line spawnGateway's channel delivers.
func (g *gateway) awaitListening(listening <-chan string, d time.Duration) {
	g.t.Helper()
	select {
	case base := <-listening:
		g.Base = base
		g.WS = "ws" + strings.TrimPrefix(base, "http") + "/ws"
	case <-g.exited:
		g.t.Fatalf("gateway exited before listening: %v\n%s", g.err, g.Logs())
	case <-time.After(d):
		g.t.Fatalf("gateway did not start:\n%s", g.Logs())
	}
}

func (g *gateway) scan(r io.Reader, listening chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		g.mu.Lock()
		g.logs.WriteString(line + "\n")
		g.mu.Unlock()
		if listening != nil {
			if rest, ok := strings.CutPrefix(line, "muxterm: listening on "); ok {
				listening <- rest
				listening = nil
			}
		}
	}
}

// Logs returns everything the gateway printed so far.
func (g *gateway) Logs() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.logs.String()
}

// Stop sends SIGTERM and waits up to d, then SIGKILLs. It returns how long the exit took.
func (g *gateway) Stop(d time.Duration) time.Duration {
	start := time.Now()
	select {
	case <-g.exited:
		return 0
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(d):
		_ = g.cmd.Process.Kill()
		<-g.exited
		g.t.Errorf("gateway did not exit within %v after SIGTERM", d)
	}
	if strings.Contains(g.Logs(), g.Token) {
		g.t.Errorf("the gateway printed its token in its logs")
	}
	return time.Since(start)
}

// dial connects an authenticated client, closed in cleanup.
// cookie is the name of the gateway's auth cookie: muxterm_token_<its port>.
func (g *gateway) cookie() string {
	return "muxterm_token_" + g.Base[strings.LastIndex(g.Base, ":")+1:]
}

func (g *gateway) dial(t *testing.T) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, g.WS, client.DialOptions{Token: g.Token})
	if err != nil {
		t.Fatalf("dial: %v\n%s", err, g.Logs())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// readPid reads ch up to until and returns the pid its program printed after tag (the scripts
// print "JOB $! READY" and the like) with the output read, failing t if there is none.
func readPid(ctx context.Context, t *testing.T, ch *client.Channel, until, tag string) (int, string) {
	t.Helper()
	out, err := ch.ReadUntil(ctx, until)
	if err != nil {
		t.Fatalf("read until %q: %v", until, err)
	}
	m := regexp.MustCompile(regexp.QuoteMeta(tag) + ` (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %s pid in %q", tag, out)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid, out
}

// typeUntil writes in to ch and reads until until, returning what it read; it fails t if
// either fails.
func typeUntil(ctx context.Context, t *testing.T, ch *client.Channel, in, until string) string {
	t.Helper()
	if _, err := ch.Write([]byte(in)); err != nil {
		t.Fatalf("write %q: %v", in, err)
	}
	out, err := ch.ReadUntil(ctx, until)
	if err != nil {
		t.Fatalf("read until %q after writing %q: %v", until, in, err)
	}
	return out
}

// runCmd runs bin with args and env (nil for this process's) without a terminal (stdin empty)
// and returns its stdout, stderr and exit code; it fails t if bin cannot run or runs longer
// than d.
func runCmd(t *testing.T, d time.Duration, env []string, bin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &ee) && ctx.Err() == nil:
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	t.Fatalf("%s %q: %v\nstdout: %s\nstderr: %s", filepath.Base(bin), args, err, stdout.String(), stderr.String())
	return "", "", -1
}

// startKilledAtEnd starts cmd and kills and reaps it when the test ends.
func startKilledAtEnd(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// measurement skips a test that measures figures for the docs unless $env is 1.
func measurement(t *testing.T, env string) {
	t.Helper()
	if os.Getenv(env) != "1" {
		t.Skipf("a measurement: set %s=1", env)
	}
}

// scrapeCounter is the sum of counter name's samples on /metrics of g (run with --metrics), 0
// when it has none.
func scrapeCounter(ctx context.Context, t *testing.T, g *gateway, name string) float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.Base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+g.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name); !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line) // name{labels} value: the exporter writes no timestamps
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return sum
}
