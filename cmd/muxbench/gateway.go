package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

const listenPrefix = "muxterm: listening on http://"

// gatewayProc is a gateway binary this run started on 127.0.0.1:0.
type gatewayProc struct {
	*child
	Pid    int
	Addr   string // 127.0.0.1:PORT
	token  string
	stderr *tailBuffer
	perf   *exec.Cmd     // perf record attached to the gateway, if profiling
	pprof  string        // the gateway's pprof base URL, if it was started with --pprof-listen
	prof   chan struct{} // closed to stop the pprof profile loop
	profWG sync.WaitGroup
}

const pprofPrefix = "muxterm: pprof on "

// startGateway runs the gateway binary at path and waits for its listening line.
func startGateway(ctx context.Context, path string, maxSessions int, extra ...string) (*gatewayProc, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("generate token: %w", err)
	}
	g := &gatewayProc{token: hex.EncodeToString(b[:]), stderr: &tailBuffer{max: 64 << 10}}
	limit := strconv.Itoa(maxSessions)
	args := append([]string{"--listen", "127.0.0.1:0", "--allow-cmd", "*", "--max-sessions", limit,
		"--max-channels", limit, "--idle-grace", "24h", "--log-level", "warn"}, extra...)
	cmd := exec.Command(path, args...)
	// The token goes through the flag's environment twin (MUXTERM_TOKEN) so it stays out of ps.
	cmd.Env = append(os.Environ(), "MUXTERM_TOKEN="+g.token)
	cmd.Stderr = g.stderr
	// If muxbench dies, the kernel kills the gateway (whose shutdown path then cannot run; the
	// sessions' PTYs hang up and their shells get SIGHUP).
	c, err := startChild(cmd)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.child, g.Pid = c, cmd.Process.Pid
	err = c.waitLines(ctx, func(line string) bool {
		if rest, ok := strings.CutPrefix(line, pprofPrefix); ok {
			g.pprof = strings.TrimSpace(rest)
		}
		rest, ok := strings.CutPrefix(line, listenPrefix)
		g.Addr = strings.TrimSpace(rest)
		return ok
	})
	if err == nil {
		if host, _, herr := net.SplitHostPort(g.Addr); herr != nil || host != "127.0.0.1" {
			err = fmt.Errorf("it listens on %q, want 127.0.0.1", g.Addr)
		}
	}
	if err != nil {
		g.stop()
		return nil, fmt.Errorf("start gateway %s: %w: %s", path, err, g.stderr.String())
	}
	return g, nil
}

// gatewayFlags lists the flags the binary at path accepts, from its -help output.
func gatewayFlags(path string) (map[string]bool, error) {
	out, err := exec.Command(path, "-help").CombinedOutput()
	if err != nil && len(out) == 0 {
		return nil, fmt.Errorf("%s -help: %w", path, err)
	}
	flags := map[string]bool{}
	for line := range strings.SplitSeq(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "  -"); ok { // "  -name" (Go's flag) or "  --name"
			if f := strings.Fields(strings.TrimPrefix(rest, "-")); len(f) > 0 {
				flags[f[0]] = true
			}
		}
	}
	if !flags["listen"] {
		return nil, fmt.Errorf("%s -help lists no -listen flag: is it the muxterm gateway?", path)
	}
	return flags, nil
}

// liftedLimits are the gateway's abuse limits that a load test must lift, where the binary has
// them: a benchmark opens sessions faster, types faster and holds more sockets than a person.
var liftedLimits = [][2]string{{"max-open-rate", "0"}, {"max-input-rate", "0"}, {"max-sockets", "4096"}}

// URL is the gateway's WebSocket endpoint.
func (g *gatewayProc) URL() string { return "ws://" + g.Addr + "/ws" }

// dial opens a muxterm socket to the gateway.
func (g *gatewayProc) dial(ctx context.Context) (*client.Client, error) {
	return g.dialWith(ctx, nil)
}

// dialWith dials like dial and hands the gateway's id-less errors to onErr.
func (g *gatewayProc) dialWith(ctx context.Context, onErr func(*proto.Error)) (*client.Client, error) {
	c, err := client.Dial(ctx, g.URL(), client.DialOptions{Token: g.token, Name: "muxbench", Dialer: benchDialer(),
		OnServerError: onErr})
	if err != nil {
		return nil, fmt.Errorf("dial gateway %s: %w", g.Addr, err)
	}
	return c, nil
}

// dialOpen opens a muxterm socket and a session on it in one round trip (client.DialOpen).
func (g *gatewayProc) dialOpen(ctx context.Context, o client.OpenOptions) (*client.Client, *client.Channel, error) {
	c, ch, err := client.DialOpen(ctx, g.URL(), client.DialOptions{Token: g.token, Name: "muxbench", Dialer: benchDialer()}, o)
	if err != nil {
		return nil, nil, fmt.Errorf("dial and open on gateway %s: %w", g.Addr, err)
	}
	return c, ch, nil
}

// sample reads the gateway's CPU time, RSS, threads and fds.
func (g *gatewayProc) sample() (procSample, error) {
	s, err := sampleProc(g.Pid)
	if err != nil {
		return s, fmt.Errorf("sample gateway: %w", err)
	}
	return s, nil
}

// cpu returns the gateway's CPU seconds so far, or 0 if /proc cannot be read.
func (g *gatewayProc) cpu() float64 {
	c, _ := procCPU(g.Pid)
	return c
}

// stop ends the gateway with SIGTERM (its graceful shutdown kills every session) and, if it
// is still running 10s later, SIGKILL. It is safe to call more than once.
func (g *gatewayProc) stop() error {
	g.stopProfile()
	if g.terminate() {
		return fmt.Errorf("gateway %d ignored SIGTERM for 10s; killed: %s", g.Pid, g.stderr.String())
	}
	return g.exitErr()
}

func (g *gatewayProc) exitErr() error {
	if g.err != nil {
		var ee *exec.ExitError
		if errors.As(g.err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() {
			return nil // SIGTERM or SIGKILL from us
		}
		return fmt.Errorf("gateway %d: %w: %s", g.Pid, g.err, g.stderr.String())
	}
	return nil
}

// startProfile records the gateway's CPU profile: through its pprof endpoint in 5 s pieces,
// written to path.1, path.2, … (`go tool pprof` merges them; the piece running at stop is
// lost), or, for a binary without --pprof-listen, with `perf record` into path.
func (g *gatewayProc) startProfile(path string) error {
	if g.pprof != "" {
		g.prof = make(chan struct{})
		g.profWG.Go(func() { g.pprofLoop(path) })
		return nil
	}
	perf, err := exec.LookPath("perf")
	if err != nil {
		return fmt.Errorf("-cpuprofile-gateway: the gateway has no --pprof-listen, and perf is not installed: %w", err)
	}
	g.perf = exec.Command(perf, "record", "-F", "997", "-g", "-p", strconv.Itoa(g.Pid), "-o", path, "--quiet")
	g.perf.Stdout, g.perf.Stderr = io.Discard, io.Discard
	if err := g.perf.Start(); err != nil {
		g.perf = nil
		return fmt.Errorf("start perf record: %w", err)
	}
	return nil
}

func (g *gatewayProc) pprofLoop(path string) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-g.prof; cancel() }()
	for i := 1; ctx.Err() == nil; i++ {
		if err := fetchProfile(ctx, g.pprof+"profile?seconds=5", fmt.Sprintf("%s.%d", path, i)); err != nil {
			if ctx.Err() == nil { // stopping cuts the piece in progress; anything else is news
				fmt.Fprintf(os.Stderr, "muxbench: gateway CPU profile stopped after %d piece(s): %v\n", i-1, err)
			}
			return
		}
	}
}

// fetchProfile saves the profile at url into path.
func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %.200s", url, resp.StatusCode, b)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("save profile: %w", err)
	}
	return nil
}

func (g *gatewayProc) stopProfile() {
	if g.prof != nil {
		close(g.prof)
		g.profWG.Wait()
		g.prof = nil
	}
	if g.perf == nil {
		return
	}
	_ = g.perf.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { _ = g.perf.Wait(); close(done) }()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		_ = g.perf.Process.Kill()
		<-done
	}
	g.perf = nil
}

// dialRaw opens a muxterm.v1 socket to url with token (none if empty) for muxbench's own
// protocol clients (the probe, the lean client), and checks the gateway chose the subprotocol.
func dialRaw(ctx context.Context, url, token string) (*websocket.Conn, error) {
	d := benchDialer()
	d.Subprotocols = []string{proto.Subprotocol}
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	ws, _, err := d.DialContext(ctx, url, h)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	if ws.Subprotocol() != proto.Subprotocol {
		ws.Close()
		return nil, fmt.Errorf("dial %s: the gateway chose subprotocol %q", url, ws.Subprotocol())
	}
	return ws, nil
}

// benchDialer is the WebSocket dialer for the gateway and the pass-through: loopback only,
// with read buffers large enough for whole 32 KiB output frames.
func benchDialer() *websocket.Dialer {
	d := &net.Dialer{Timeout: 10 * time.Second}
	return &websocket.Dialer{
		HandshakeTimeout: 10 * time.Second,
		ReadBufferSize:   64 << 10,
		WriteBufferSize:  16 << 10,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, fmt.Errorf("dial %s: %w", addr, err)
			}
			if host != "127.0.0.1" {
				return nil, fmt.Errorf("dial %s: muxbench only dials 127.0.0.1", addr)
			}
			return d.DialContext(ctx, network, addr)
		},
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
