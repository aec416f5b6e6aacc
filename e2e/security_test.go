//go:build e2e

// Security tests of the built binary (docs/security.md): principals from a tokens file,
// ownership, the read-only viewer, what a client may run, the upgrade's Host/Origin/path/method
// checks, refusals that close the connection, TLS and the non-loopback rule, every limit, and
// a scan of the gateway's whole output for every token the suite used. Every test name starts
// with TestSecurity, so `-run Security` runs the suite.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/procfs"
	"github.com/muxterm/muxterm/internal/testutil"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// ---------------------------------------------------------------------------------------------
// Token bookkeeping: every token any test of this file hands a gateway is remembered, and every
// gateway's whole output (stdout and stderr, debug level) is scanned for all of them when it
// stops. A token must never be printed, whatever was done to the gateway.

var suiteTokens struct {
	mu   sync.Mutex
	list []string
}

// newToken returns a fresh token and remembers it for the scan.
func newToken() string {
	tok := randomToken()
	suiteTokens.mu.Lock()
	suiteTokens.list = append(suiteTokens.list, tok)
	suiteTokens.mu.Unlock()
	return tok
}

func rememberToken(tok string) {
	suiteTokens.mu.Lock()
	suiteTokens.list = append(suiteTokens.list, tok)
	suiteTokens.mu.Unlock()
}

// checkNoToken fails if out contains any token the suite used so far.
func checkNoToken(t *testing.T, what, out string) {
	t.Helper()
	suiteTokens.mu.Lock()
	toks := slices.Clone(suiteTokens.list)
	suiteTokens.mu.Unlock()
	for _, tok := range toks {
		if strings.Contains(out, tok) {
			t.Errorf("%s contains a token (%s…): got it printed, want never", what, tok[:4])
		}
	}
}

// startSecure starts the gateway like startGateway (which adds --token, principal "default") and
// scans its whole output for every suite token once it has stopped.
func startSecure(t *testing.T, args ...string) *gateway {
	t.Helper()
	g := startGateway(t, args...)
	rememberToken(g.Token)
	// Cleanups run last-in first-out: this one stops the gateway before startGateway's does,
	// so the scan sees everything it printed.
	t.Cleanup(func() {
		g.Stop(10 * time.Second)
		checkNoToken(t, "the gateway's output", g.Logs())
	})
	return g
}

// runRefused runs the binary with args and env, expecting it to refuse to start: it returns
// the combined output, which is scanned for tokens.
func runRefused(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = append(append(os.Environ(), "SHELL=/bin/sh"), env...)
	out, err := cmd.CombinedOutput()
	// 2: a command line that makes no sense (with the --help hint); 1: a start that failed.
	var ee *exec.ExitError
	if !errors.As(err, &ee) || (ee.ExitCode() != 1 && ee.ExitCode() != 2) {
		t.Fatalf("got %v, want exit status 1 or 2 (output: %s)", err, out)
	}
	if ee.ExitCode() == 2 && !strings.HasSuffix(string(out), "Run 'gateway --help' for usage.\n") {
		t.Errorf("exit status 2 without the --help hint at the end: %s", out)
	}
	checkNoToken(t, "the refusal", string(out))
	return string(out)
}

// tokenLine is one principal of a tokens file.
type tokenLine struct{ name, role, token, viewOf string }

// writeTokensFile writes lines to a new file with mode and returns its path.
func writeTokensFile(t *testing.T, mode os.FileMode, lines ...tokenLine) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# principal role token [view-of=owner]\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "%s %s %s", l.name, l.role, l.token)
		if l.viewOf != "" {
			fmt.Fprintf(&b, " view-of=%s", l.viewOf)
		}
		b.WriteString("\n")
	}
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// dialAs connects with token as bearer, closed in cleanup.
func dialAs(t *testing.T, g *gateway, token string) *client.Client {
	t.Helper()
	return dialAsWith(t, g, client.DialOptions{Token: token})
}

// serverErrors records the id-less errors a client receives (DialOptions.OnServerError).
type serverErrors struct {
	mu   sync.Mutex
	errs []*proto.Error
}

func (r *serverErrors) record(e *proto.Error) {
	r.mu.Lock()
	r.errs = append(r.errs, e)
	r.mu.Unlock()
}

func (r *serverErrors) all() []*proto.Error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*proto.Error(nil), r.errs...)
}

func dialAsWith(t *testing.T, g *gateway, opts client.DialOptions) *client.Client {
	t.Helper()
	c, err := client.Dial(ctxT(t, 10*time.Second), g.WS, opts)
	if err != nil {
		t.Fatalf("dial: %v\n%s", err, g.Logs())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rpcBarrier makes sure the server has handled everything c sent before it: a socket's messages
// are handled in order, and the client records id-less errors before the response that follows.
func rpcBarrier(ctx context.Context, t *testing.T, c *client.Client) {
	t.Helper()
	if _, err := c.List(ctx); err != nil {
		t.Fatalf("barrier: %v", err)
	}
}

// kindOf returns err's data.kind, failing if err is not a JSON-RPC error.
func kindOf(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		t.Fatalf("got success, want a JSON-RPC error")
	}
	return rpcErr(t, err).Kind()
}

// catSession opens `cat` in raw mode without echo: what is written comes back byte for byte.
func catSession(ctx context.Context, t *testing.T, c *client.Client) *client.Channel {
	t.Helper()
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"sh", "-c", "stty raw -echo && echo READY && exec cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "READY\n"); err != nil {
		t.Fatal(err)
	}
	return ch
}

// catEchoes checks that ch's cat session still echoes tag.
func catEchoes(ctx context.Context, t *testing.T, ch *client.Channel, tag string) string {
	t.Helper()
	return typeUntil(ctx, t, ch, tag, tag)
}

// ---------------------------------------------------------------------------------------------
// /proc: the gateway's children and file descriptors.

// childPids returns the pids whose parent is pid.
func childPids(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, err := procfs.ReadStat(p)
		if err != nil {
			continue // gone meanwhile
		}
		if s.PPID == pid {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func fdCount(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP: requests exactly as written, on a fresh TCP connection.

const wsKey = "dGhlIHNhbXBsZSBub25jZQ=="

// upgradeRequest builds a WebSocket upgrade request; extra holds complete header lines.
func upgradeRequest(method, target, host string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Protocol: %s\r\n",
		method, target, host, wsKey, proto.Subprotocol)
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// rawResult is what came back for a raw request.
type rawResult struct {
	status int
	header http.Header
	body   string
	// after holds whatever the server sent after the first response before closing the
	// connection (nil if it closed; for a 101, not read).
	after     []byte
	closed    bool // the server closed the connection after the first response
	connClose bool // the response said Connection: close
}

// rawDo writes req in one write on a new connection to addr and reads one response; unless it
// is a 101, it then reads until the server closes the connection (3 s at most).
func rawDo(t *testing.T, addr, req string) rawResult {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(br, &http.Request{Method: method}) // HEAD: no body follows
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	// ReadResponse moves Connection: close from the header to resp.Close.
	res := rawResult{status: resp.StatusCode, header: resp.Header, connClose: resp.Close}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return res
	}
	body, _ := io.ReadAll(resp.Body)
	res.body = string(body)
	// A refusal closes the connection at once; give it a few seconds.
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	rest, err := io.ReadAll(br)
	res.after = rest
	var ne net.Error
	res.closed = err == nil || !(errors.As(err, &ne) && ne.Timeout())
	return res
}

func hostOf(g *gateway) string {
	return strings.TrimPrefix(strings.TrimPrefix(g.Base, "http://"), "https://")
}

func portOf(g *gateway) string {
	_, p, _ := net.SplitHostPort(hostOf(g))
	return p
}

// ---------------------------------------------------------------------------------------------
// Principals and ownership.

// rawSocket is a WebSocket that speaks muxterm.v1 by hand, to compare replies byte for byte.
type rawSocket struct {
	t  *testing.T
	ws *websocket.Conn
}

func dialRaw(t *testing.T, g *gateway, token string) *rawSocket {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}, HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial(g.WS, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { ws.Close() })
	s := &rawSocket{t: t, ws: ws}
	s.call(0, "initialize", map[string]any{})
	return s
}

// send writes one message and returns the next text message the server sends (a socket that
// binds no channel receives nothing else).
func (s *rawSocket) send(typ int, msg []byte) []byte {
	s.t.Helper()
	if err := s.ws.WriteMessage(typ, msg); err != nil {
		s.t.Fatal(err)
	}
	_ = s.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		mt, b, err := s.ws.ReadMessage()
		if err != nil {
			s.t.Fatalf("read: %v", err)
		}
		if mt == websocket.TextMessage {
			return b
		}
	}
}

func (s *rawSocket) call(id int, method string, params any) []byte {
	s.t.Helper()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		s.t.Fatal(err)
	}
	return s.send(websocket.TextMessage, b)
}

// errorKind returns a raw response's error.data.kind.
func errorKind(t *testing.T, b []byte) string {
	t.Helper()
	var r struct {
		Error *proto.Error `json:"error"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Error == nil {
		t.Fatalf("got %s, want an error response", b)
	}
	return r.Error.Kind()
}

func randomSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

// threePrincipals writes a tokens file of alice and bob (read-write) and carol (a read-only
// viewer of alice's sessions) and returns their tokens and the file.
func threePrincipals(t *testing.T) (alice, bob, carol, file string) {
	t.Helper()
	alice, bob, carol = newToken(), newToken(), newToken()
	file = writeTokensFile(t, 0o600,
		tokenLine{"alice", "read-write", alice, ""},
		tokenLine{"bob", "read-write", bob, ""},
		tokenLine{"carol", "read-only", carol, "alice"})
	return alice, bob, carol, file
}

func TestSecurityOwnershipAcrossPrincipals(t *testing.T) {
	// The tokens file comes through MUXTERM_TOKENS (the flag's environment twin) and is the
	// only source of tokens: no --token, so no "default" principal and nothing generated.
	alice, bob, carol, file := threePrincipals(t)
	g := launchGateway(t, alice, []string{"MUXTERM_TOKENS=" + file})
	defer func() {
		g.Stop(10 * time.Second)
		if logs := g.Logs(); !strings.Contains(logs, "auth?token=<your token>") {
			t.Errorf("with only a tokens file the gateway must not generate a token; got:\n%s", logs)
		}
	}()
	ctx := ctxT(t, 30*time.Second)

	ca := dialAs(t, g, alice)
	mine, err := ca.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := ca.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Kill(ctx, gone.Session()); err != nil {
		t.Fatal(err)
	}
	// Alice herself is told that her killed session is closed: the tombstone exists.
	if _, _, err := ca.Attach(ctx, gone.Session(), nil); kindOf(t, err) != "session_closed" {
		t.Fatalf("alice attaching her killed session: got %v, want session_closed", err)
	}

	sb := dialRaw(t, g, bob)
	sa := dialRaw(t, g, alice) // alice's answer for an id that does not exist
	nobody := randomSessionID()
	ops := []struct {
		method string
		params func(id string) map[string]any
	}{
		{"session.attach", func(id string) map[string]any { return map[string]any{"channel": 7, "session": id} }},
		{"session.attach", func(id string) map[string]any { return map[string]any{"channel": 7, "session": id, "from": 0} }},
		{"session.kill", func(id string) map[string]any { return map[string]any{"session": id} }},
		{"session.lease", func(id string) map[string]any { return map[string]any{"session": id, "ttl_ms": 60000} }},
	}
	for _, op := range ops {
		t.Run(op.method, func(t *testing.T) {
			norm := func(b []byte, id string) string { return strings.ReplaceAll(string(b), id, "<id>") }
			want := norm(sb.call(9, op.method, op.params(nobody)), nobody)
			if k := errorKind(t, []byte(want)); k != "unknown_session" {
				t.Fatalf("unknown id: got kind %q, want unknown_session", k)
			}
			cases := []struct{ name, got string }{
				{"bob, alice's live session", norm(sb.call(9, op.method, op.params(mine.Session())), mine.Session())},
				{"bob, alice's killed session", norm(sb.call(9, op.method, op.params(gone.Session())), gone.Session())},
				{"alice, an id that never existed", norm(sa.call(9, op.method, op.params(nobody)), nobody)},
			}
			for _, c := range cases {
				if c.got != want {
					t.Errorf("%s: got %s, want %s", c.name, c.got, want)
				}
			}
		})
	}
	// Channel operations: bob never gets a channel bound to alice's session, so input, resize
	// and signal on the channel he tried are exactly those on a channel never used.
	t.Run("channel operations", func(t *testing.T) {
		norm := func(b []byte, ch int) string { return strings.ReplaceAll(string(b), strconv.Itoa(ch), "<ch>") }
		for _, op := range []struct {
			name string
			do   func(ch int) []byte
		}{
			{"input", func(ch int) []byte {
				return sb.send(websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameInput, uint32(ch), []byte("id\r")))
			}},
			{"resize", func(ch int) []byte {
				return sb.call(9, "session.resize", map[string]any{"channel": ch, "cols": 100, "rows": 30})
			}},
			{"signal", func(ch int) []byte {
				return sb.call(9, "session.signal", map[string]any{"channel": ch, "signal": "KILL"})
			}},
			{"detach", func(ch int) []byte { return sb.call(9, "session.detach", map[string]any{"channel": ch}) }},
		} {
			raw := op.do(7)
			got, want := norm(raw, 7), norm(op.do(8), 8)
			if got != want {
				t.Errorf("%s: got %s, want %s", op.name, got, want)
			}
			if k := errorKind(t, raw); k != "unknown_channel" {
				t.Errorf("%s: got kind %q, want unknown_channel", op.name, k)
			}
		}
	})
	t.Run("list", func(t *testing.T) {
		got := string(sb.call(9, "session.list", map[string]any{}))
		if want := `{"jsonrpc":"2.0","id":9,"result":{"sessions":[]}}`; got != want {
			t.Errorf("bob's list: got %s, want %s", got, want)
		}
		la, err := ca.List(ctx)
		if err != nil || len(la) != 1 || la[0].Session != mine.Session() {
			t.Errorf("alice's list: got %+v %v, want only %s", la, err, mine.Session())
		}
		// carol views alice's sessions, and only hers.
		cc := dialAs(t, g, carol)
		lc, err := cc.List(ctx)
		if err != nil || len(lc) != 1 || lc[0].Session != mine.Session() {
			t.Errorf("carol's list: got %+v %v, want only %s", lc, err, mine.Session())
		}
	})
	// Nothing bob did touched alice's session: it runs, unleased, with alice's one viewer.
	if !testutil.Alive(mine.Pid()) {
		t.Errorf("alice's session %d died", mine.Pid())
	}
	echo := "echo still-''alive\r"
	if _, err := mine.Write([]byte(echo)); err != nil {
		t.Fatal(err)
	}
	if _, err := mine.ReadUntil(ctx, "still-alive"); err != nil {
		t.Errorf("alice's session stopped answering: %v", err)
	}
}

func TestSecurityReadOnlyViewerReachesNothing(t *testing.T) {
	alice, bob, carol, file := threePrincipals(t)
	g := startSecure(t, "--tokens", file, "--allow-cmd", "sh")
	ctx := ctxT(t, 30*time.Second)
	ca := dialAs(t, g, alice)
	own := catSession(ctx, t, ca)
	cb := dialAs(t, g, bob)
	bobs, err := cb.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}

	var ccErrs serverErrors
	cc := dialAsWith(t, g, client.DialOptions{Token: carol, OnServerError: ccErrs.record})
	list, err := cc.List(ctx)
	if err != nil || len(list) != 1 || list[0].Session != own.Session() {
		t.Fatalf("carol's list: got %+v %v, want alice's session only", list, err)
	}
	if _, _, err := cc.Attach(ctx, bobs.Session(), nil); kindOf(t, err) != "unknown_session" {
		t.Errorf("carol attaching bob's session: got %v, want unknown_session", err)
	}
	view, res, err := cc.Attach(ctx, own.Session(), ptrTo(int64(0)))
	if err != nil {
		t.Fatalf("carol attaching alice's session: %v", err)
	}
	if _, err := view.ReadUntil(ctx, "READY\n"); err != nil {
		t.Fatalf("carol does not receive the replay: %v", err)
	}

	const marker = "VIEWER-MARKER"
	refusals := []struct {
		name string
		do   func() error
	}{
		{"input", func() error {
			before := len(ccErrs.all())
			if _, err := view.Write([]byte(marker + "\r")); err != nil {
				return err
			}
			rpcBarrier(ctx, t, cc)
			errs := ccErrs.all()
			if len(errs) != before+1 {
				t.Fatalf("got %d new errors, want 1", len(errs)-before)
			}
			e := errs[len(errs)-1]
			if ch, _ := e.Data["channel"].(float64); uint32(ch) != view.ID {
				t.Errorf("input refusal: got data.channel %v, want %d", e.Data["channel"], view.ID)
			}
			return e
		}},
		{"resize", func() error { return view.Resize(ctx, 132, 50) }},
		{"signal", func() error { return view.Signal(ctx, "KILL") }},
		{"kill", func() error { _, err := cc.Kill(ctx, own.Session()); return err }},
		{"open", func() error { _, err := cc.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24}); return err }},
		{"open with cmd", func() error {
			_, err := cc.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh"}})
			return err
		}},
		{"lease", func() error {
			return cc.Call(ctx, "session.lease", map[string]any{"session": own.Session(), "ttl_ms": 1000}, nil)
		}},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			if got := kindOf(t, r.do()); got != "forbidden" {
				t.Errorf("got kind %q, want forbidden", got)
			}
		})
	}
	// The owner's marker is the barrier: carol's input was refused before it was sent, so if
	// carol's marker had reached the PTY, cat would have echoed it first.
	got := catEchoes(ctx, t, own, "OWNER-MARKER")
	if strings.Contains(got, marker) {
		t.Errorf("the viewer's input reached the PTY: %q", got)
	}
	seen, err := view.ReadUntil(ctx, "OWNER-MARKER")
	if err != nil {
		t.Fatalf("the viewer stopped receiving output: %v", err)
	}
	if strings.Contains(seen, marker) {
		t.Errorf("the viewer's input reached the PTY: %q", seen)
	}
	info, err := ca.List(ctx)
	if err != nil || len(info) != 1 {
		t.Fatalf("alice's list: %+v %v", info, err)
	}
	if info[0].Cols != res.Cols || info[0].Rows != res.Rows || info[0].Exit != nil {
		t.Errorf("after the viewer's refusals: got %dx%d exit %v, want %dx%d still running",
			info[0].Cols, info[0].Rows, info[0].Exit, res.Cols, res.Rows)
	}
	if got := childPids(t, g.cmd.Process.Pid); len(got) != 2 {
		t.Errorf("gateway children: got %v, want alice's and bob's sessions only", got)
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestSecurityBadConfigRefusedAtStart(t *testing.T) {
	tok := newToken()
	other := newToken()
	file := func(mode os.FileMode, lines ...tokenLine) string { return writeTokensFile(t, mode, lines...) }
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"world-readable tokens file", nil, []string{"--tokens", file(0o644, tokenLine{"alice", "read-write", tok, ""})},
			"mode 0644 lets other users read or change the tokens; chmod 600 it"},
		{"group-writable tokens file", nil, []string{"--tokens", file(0o660, tokenLine{"alice", "read-write", tok, ""})},
			"mode 0660"},
		{"world-readable through the env twin", []string{"MUXTERM_TOKENS=" + file(0o604, tokenLine{"alice", "read-write", tok, ""})}, nil,
			"mode 0604"},
		{"missing tokens file", nil, []string{"--tokens", filepath.Join(t.TempDir(), "nope")}, "no such file"},
		{"unknown role", nil, []string{"--tokens", file(0o600, tokenLine{"alice", "root", tok, ""})},
			"line 2: role must be read-write, admin or read-only"},
		{"viewer without owner", nil, []string{"--tokens", file(0o600, tokenLine{"carol", "read-only", tok, ""})},
			"line 2: a read-only principal needs view-of=<owner>"},
		{"viewer of nobody", nil, []string{"--tokens", file(0o600, tokenLine{"carol", "read-only", tok, "alice"})},
			"line 2: view-of=alice: no such principal"},
		{"token used twice", nil, []string{"--tokens", file(0o600, tokenLine{"alice", "read-write", tok, ""}, tokenLine{"bob", "read-write", tok, ""})},
			"line 3: token already used by another principal"},
		{"--token reused in the file", nil, []string{"--token", other, "--tokens", file(0o600, tokenLine{"alice", "read-write", other, ""})},
			"line 2: token already used by another principal"},
		{"principal twice", nil, []string{"--tokens", file(0o600, tokenLine{"alice", "read-write", tok, ""}, tokenLine{"alice", "read-write", other, ""})},
			`line 3: principal "alice" is already defined`},
		{"short token in the file", nil, []string{"--tokens", file(0o600, tokenLine{"alice", "read-write", tok[:8], ""})},
			"line 2: token too short"},
		{"short --token", nil, []string{"--token", tok[:8]}, "--token: token too short"},
		{"token with a cookie-breaking character", nil, []string{"--token", tok + ";x"}, "--token: token has a character outside"},
		{"tls cert without key", nil, []string{"--token", tok, "--tls-cert", "/nonexistent.pem"}, "--tls-cert and --tls-key go together"},
		{"unreadable tls files", nil, []string{"--token", tok, "--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"}, "--tls-cert/--tls-key"},
		{"zero sockets", nil, []string{"--token", tok, "--max-sockets", "0"}, "--max-sockets must be at least 1"},
		{"input burst below a frame", nil, []string{"--token", tok, "--max-input-burst", "1KiB"}, "--max-input-burst must be at least one input frame"},
		{"negative open rate", nil, []string{"--token", tok, "--max-open-rate", "-1"}, "--max-open-rate must be 0"},
		{"bad rate in the env twin", []string{"MUXTERM_MAX_INPUT_RATE=fast"}, []string{"--token", tok}, "MUXTERM_MAX_INPUT_RATE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := runRefused(t, tc.env, append([]string{"--listen", "127.0.0.1:0"}, tc.args...)...)
			if !strings.Contains(out, tc.want) {
				t.Errorf("got %q, want it to contain %q", out, tc.want)
			}
			if strings.Contains(out, "muxterm: listening") {
				t.Errorf("the gateway listened before refusing: %q", out)
			}
		})
	}
}

func TestSecurityGroupReadableTokensFileWarns(t *testing.T) {
	tok := newToken()
	g := launchGateway(t, tok, nil, "--tokens", writeTokensFile(t, 0o640, tokenLine{"alice", "read-write", tok, ""}))
	dialAs(t, g, tok)
	g.Stop(10 * time.Second)
	if !strings.Contains(g.Logs(), "tokens file is readable by its group") {
		t.Errorf("got no warning about a group-readable tokens file:\n%s", g.Logs())
	}
}

// ---------------------------------------------------------------------------------------------
// What a client may run.

func TestSecurityURLNeverReachesArgvOrEnv(t *testing.T) {
	g := startSecure(t)
	ctx := ctxT(t, 30*time.Second)
	dir := t.TempDir()
	marker := filepath.Join(dir, "pwned")
	inject := url.Values{
		"cmd":   {"touch " + marker},
		"shell": {"/usr/bin/touch"},
		"argv":  {marker},
		"env":   {"MUXTERM_INJECTED=" + marker},
		"token": {g.Token},
	}.Encode()
	pid := g.cmd.Process.Pid

	// The socket: query parameters are ignored, the session runs the configured shell with
	// the gateway's environment without the gateway's own variables.
	c, err := client.Dial(ctx, g.WS+"?"+inject, client.DialOptions{Token: g.Token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if got, want := list[0].Cmd, []string{"/bin/sh"}; !slices.Equal(got, want) {
		t.Errorf("session argv: got %q, want %q", got, want)
	}
	for _, f := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", ch.Pid(), f))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(marker)) || bytes.Contains(b, []byte("MUXTERM_INJECTED")) {
			t.Errorf("/proc/%d/%s holds what the URL said: %q", ch.Pid(), f, b)
		}
	}
	if _, err := ch.Write([]byte("echo \"X=[${MUXTERM_INJECTED-unset}]\"\r")); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "X=[unset]"); err != nil {
		t.Errorf("the shell sees the injected variable: %v", err)
	}

	// /auth: a valid token plus injected parameters sets the cookie and redirects to "/"
	// exactly; nothing runs.
	before := childPids(t, pid)
	res := rawDo(t, hostOf(g), "GET /auth?"+inject+" HTTP/1.1\r\nHost: "+hostOf(g)+"\r\nConnection: close\r\n\r\n")
	if res.status != http.StatusSeeOther || res.header.Get("Location") != "/" {
		t.Errorf("/auth: got %d Location %q, want 303 to /", res.status, res.header.Get("Location"))
	}
	// The front page with the same query: static files only.
	res = rawDo(t, hostOf(g), "GET /?"+inject+" HTTP/1.1\r\nHost: "+hostOf(g)+"\r\nConnection: close\r\n\r\n")
	if res.status != http.StatusOK && res.status != http.StatusServiceUnavailable {
		t.Errorf("/: got %d, want the UI (200) or 503 if unbuilt", res.status)
	}
	if got := childPids(t, pid); !slices.Equal(got, before) {
		t.Errorf("gateway children: got %v, want %v", got, before)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the marker file exists: %v", err)
	}
	// Without --allow-cmd even the shell's own path is refused as a cmd.
	for _, cmd := range [][]string{{"/bin/sh"}, {"sh", "-c", "touch " + marker}, {"touch", marker}} {
		_, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: cmd})
		if got := kindOf(t, err); got != "forbidden" {
			t.Errorf("open %q: got kind %q, want forbidden", cmd, got)
		}
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the marker file exists: %v", err)
	}
}

// ---------------------------------------------------------------------------------------------
// The upgrade: Host, Origin, paths, methods, refusals that close the connection.

func TestSecurityUpgradeHostAndOrigin(t *testing.T) {
	g := startSecure(t, "--allow-host", "MuxTerm.example", "--allow-origin", "https://ide.example:8443")
	self := hostOf(g)
	port := portOf(g)
	bearer := "Authorization: Bearer " + g.Token
	cookie := "Cookie: " + g.cookie() + "=" + g.Token
	cases := []struct {
		name   string
		host   string
		header []string
		status int
	}{
		{"bearer, own host", self, []string{bearer}, 101},
		{"dns rebinding: foreign host with a valid bearer", "evil.example", []string{bearer}, 403},
		{"dns rebinding: foreign host with our port", "evil.example:" + port, []string{bearer}, 403},
		{"dns rebinding: cookie and matching foreign origin", "evil.example:" + port, []string{cookie, "Origin: http://evil.example:" + port}, 403},
		{"host without port is port 80", "127.0.0.1", []string{bearer}, 403},
		{"uppercase loopback name", "LOCALHOST:" + port, []string{bearer}, 101},
		{"ipv6 loopback", "[::1]:" + port, []string{bearer}, 101},
		{"loopback name with trailing dot", "localhost.:" + port, []string{bearer}, 403},
		{"allowed host, default port implied", "muxterm.example", []string{bearer}, 101},
		{"allowed host, default port spelt, uppercase", "MUXTERM.EXAMPLE:80", []string{bearer}, 101},
		{"allowed host, other port", "muxterm.example:8080", []string{bearer}, 403},
		{"allowed host as a suffix", "evilmuxterm.example", []string{bearer}, 403},
		{"allowed host as a prefix", "muxterm.example.evil.example", []string{bearer}, 403},
		{"cookie, own origin", self, []string{cookie, "Origin: http://" + self}, 101},
		{"cookie, own origin in upper case", self, []string{cookie, "Origin: HTTP://" + strings.ToUpper(self)}, 101},
		{"cookie, own origin with default path", self, []string{cookie, "Origin: http://" + self + "/"}, 101},
		{"cookie, origin with our origin as a prefix", self, []string{cookie, "Origin: http://" + self + ".evil.example"}, 403},
		{"cookie, origin with our origin in its path", self, []string{cookie, "Origin: http://evil.example/http://" + self}, 403},
		{"cookie, origin with our origin as userinfo", self, []string{cookie, "Origin: http://" + self + "@evil.example"}, 403},
		{"cookie, null origin", self, []string{cookie, "Origin: null"}, 403},
		{"cookie, https for our http origin", self, []string{cookie, "Origin: https://" + self}, 403},
		{"cookie, origin of another loopback name", self, []string{cookie, "Origin: http://localhost:" + port}, 403},
		{"cookie, allowed extra origin", self, []string{cookie, "Origin: https://ide.example:8443"}, 101},
		{"cookie, allowed extra origin upper case", self, []string{cookie, "Origin: HTTPS://IDE.EXAMPLE:8443"}, 101},
		{"cookie, extra origin as a prefix", self, []string{cookie, "Origin: https://ide.example:8443.evil.example"}, 403},
		{"cookie, extra origin without its port", self, []string{cookie, "Origin: https://ide.example"}, 403},
		{"cookie, extra origin over http", self, []string{cookie, "Origin: http://ide.example:8443"}, 403},
		{"cookie, allowed host's own origin", "muxterm.example", []string{cookie, "Origin: http://muxterm.example"}, 101},
		{"cookie, allowed host with our loopback origin", "muxterm.example", []string{cookie, "Origin: http://" + self}, 403},
		{"bearer does not excuse a foreign origin", self, []string{bearer, "Origin: http://evil.example"}, 403},
		{"cookie without origin", self, []string{cookie}, 403},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := rawDo(t, self, upgradeRequest("GET", "/ws", tc.host, tc.header...))
			if res.status != tc.status {
				t.Fatalf("got HTTP %d, want %d (%s)", res.status, tc.status, res.body)
			}
			if tc.status != 101 && (!res.closed || len(res.after) != 0 || !res.connClose) {
				t.Errorf("refusal: got closed=%v after=%q Connection: close=%v, want the connection closed",
					res.closed, res.after, res.connClose)
			}
		})
	}
	c := g.dial(t)
	if list, err := c.List(ctxT(t, 10*time.Second)); err != nil || len(list) != 0 {
		t.Errorf("sessions after the upgrades: got %v %v, want none", list, err)
	}
}

func TestSecurityOnlyExactWSPathUpgrades(t *testing.T) {
	g := startSecure(t)
	self := hostOf(g)
	pid := g.cmd.Process.Pid
	type req struct{ method, target string }
	var reqs []req
	for _, p := range []string{"/ws/", "/WS", "/Ws", "/%77s", "/%77%73", "//ws", "/./ws", "/ws/.", "/ws/..",
		"/auth/../ws", "/ws%2F", "/%2Fws", "/ws;", "/ws%00", "/ws/x", "/ws?x=1", "/ws?token=" + g.Token,
		"http://" + self + "/ws", "/healthz/../ws"} {
		reqs = append(reqs, req{"GET", p})
	}
	for _, m := range []string{"POST", "HEAD", "OPTIONS", "PUT", "DELETE", "PATCH", "get"} {
		reqs = append(reqs, req{m, "/ws"})
	}
	for _, r := range reqs {
		t.Run(r.method+" "+r.target, func(t *testing.T) {
			res := rawDo(t, self, upgradeRequest(r.method, r.target, self))
			if res.status == http.StatusSwitchingProtocols || res.status/100 == 2 {
				t.Fatalf("without a token: got HTTP %d, want a refusal (401, 403, 404, 405 or 400)", res.status)
			}
			if !res.closed {
				t.Errorf("the connection stayed open after HTTP %d", res.status)
			}
		})
	}
	// With a valid token only the exact path and method upgrade; query strings are ignored.
	bearer := "Authorization: Bearer " + g.Token
	for _, r := range reqs {
		if r.target == "/ws?x=1" || strings.HasPrefix(r.target, "/ws?token=") || strings.HasPrefix(r.target, "http://") {
			continue
		}
		t.Run("with token "+r.method+" "+r.target, func(t *testing.T) {
			res := rawDo(t, self, upgradeRequest(r.method, r.target, self, bearer))
			if res.status == http.StatusSwitchingProtocols {
				t.Fatalf("got HTTP 101 on %s %s, want only GET /ws to upgrade", r.method, r.target)
			}
		})
	}
	if got := childPids(t, pid); len(got) != 0 {
		t.Errorf("gateway children: got %v, want none", got)
	}
}

func TestSecurityPipelinedRequestAfterRefusalIsNotServed(t *testing.T) {
	g := startSecure(t)
	self := hostOf(g)
	bearer := "Authorization: Bearer " + g.Token
	// The pipelined request would set the cookie if it were served.
	next := "GET /auth?token=" + g.Token + " HTTP/1.1\r\nHost: " + self + "\r\n\r\n"
	cases := []struct {
		name   string
		req    string
		status int
	}{
		{"no token", upgradeRequest("GET", "/ws", self), 401},
		{"wrong token", upgradeRequest("GET", "/ws", self, "Authorization: Bearer "+randomToken()), 401},
		{"foreign host", upgradeRequest("GET", "/ws", "evil.example", bearer), 403},
		{"foreign origin", upgradeRequest("GET", "/ws", self, bearer, "Origin: http://evil.example"), 403},
		{"no subprotocol", strings.Replace(upgradeRequest("GET", "/ws", self, bearer), "Sec-WebSocket-Protocol: "+proto.Subprotocol+"\r\n", "", 1), 400},
		{"auth with a wrong token", "GET /auth?token=" + randomToken() + " HTTP/1.1\r\nHost: " + self + "\r\n\r\n", 401},
		{"auth from a foreign host", "GET /auth?token=" + g.Token + " HTTP/1.1\r\nHost: evil.example\r\n\r\n", 403},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := rawDo(t, self, tc.req+next)
			if res.status != tc.status {
				t.Fatalf("got HTTP %d, want %d", res.status, tc.status)
			}
			if !res.connClose {
				t.Errorf("got no Connection: close, want it")
			}
			if res.header.Get("Set-Cookie") != "" {
				t.Errorf("a refusal set a cookie")
			}
			if !res.closed || len(res.after) != 0 {
				t.Errorf("the pipelined request was served: got closed=%v and %q after the refusal, want nothing", res.closed, res.after)
			}
		})
	}
}

// TestSecurityAttacksHarmNothing runs each attack against one gateway and checks after each
// that it was refused, that no process was spawned, that the other sessions go on, and at the
// end that the gateway's file descriptors are back to their baseline.
func TestSecurityAttacksHarmNothing(t *testing.T) {
	alice, mallory := newToken(), newToken()
	file := writeTokensFile(t, 0o600, tokenLine{"alice", "read-write", alice, ""}, tokenLine{"mallory", "read-write", mallory, ""})
	g := startSecure(t, "--tokens", file, "--allow-cmd", "sh")
	ctx := ctxT(t, 60*time.Second)
	self := hostOf(g)
	pid := g.cmd.Process.Pid
	ca := dialAs(t, g, alice)
	victim := catSession(ctx, t, ca)
	wantChildren := []int{victim.Pid()}
	if got := childPids(t, pid); !slices.Equal(got, wantChildren) {
		t.Fatalf("children: got %v, want %v", got, wantChildren)
	}
	baseline := fdCount(t, pid)
	bearer := func(tok string) string { return "Authorization: Bearer " + tok }

	refusedUpgrade := func(req string, status int) func(t *testing.T) {
		return func(t *testing.T) {
			res := rawDo(t, self, req)
			if res.status != status || !res.closed {
				t.Errorf("got HTTP %d closed=%v, want %d and the connection closed", res.status, res.closed, status)
			}
		}
	}
	// asMallory runs fn over an authenticated socket of mallory's, closed afterwards.
	asMallory := func(fn func(t *testing.T, c *client.Client)) func(t *testing.T) {
		return func(t *testing.T) {
			c, err := client.Dial(ctx, g.WS, client.DialOptions{Token: mallory})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fn(t, c)
		}
	}
	wantKind := func(t *testing.T, err error, kind string) {
		t.Helper()
		if got := kindOf(t, err); got != kind {
			t.Errorf("got kind %q, want %q (%v)", got, kind, err)
		}
	}
	attacks := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"no token", refusedUpgrade(upgradeRequest("GET", "/ws", self), 401)},
		{"wrong token", refusedUpgrade(upgradeRequest("GET", "/ws", self, bearer(randomToken())), 401)},
		{"token in the query", refusedUpgrade(upgradeRequest("GET", "/ws?token="+alice, self), 401)},
		{"token as basic auth", refusedUpgrade(upgradeRequest("GET", "/ws", self, "Authorization: Basic "+alice), 401)},
		{"dns rebinding", refusedUpgrade(upgradeRequest("GET", "/ws", "evil.example", bearer(alice)), 403)},
		{"foreign origin", refusedUpgrade(upgradeRequest("GET", "/ws", self, "Cookie: "+g.cookie()+"="+alice, "Origin: http://evil.example"), 403)},
		{"suffixed origin", refusedUpgrade(upgradeRequest("GET", "/ws", self, "Cookie: "+g.cookie()+"="+alice, "Origin: http://"+self+".evil.example"), 403)},
		{"null origin", refusedUpgrade(upgradeRequest("GET", "/ws", self, "Cookie: "+g.cookie()+"="+alice, "Origin: null"), 403)},
		{"cookie without origin", refusedUpgrade(upgradeRequest("GET", "/ws", self, "Cookie: "+g.cookie()+"="+alice), 403)},
		{"trailing slash", refusedUpgrade(upgradeRequest("GET", "/ws/", self), 404)},
		{"POST", refusedUpgrade(upgradeRequest("POST", "/ws", self), 405)},
		{"auth with a wrong token", refusedUpgrade("GET /auth?token="+randomToken()+"&cmd=id HTTP/1.1\r\nHost: "+self+"\r\n\r\n", 401)},
		{"pipelined behind a refusal", func(t *testing.T) {
			res := rawDo(t, self, upgradeRequest("GET", "/ws", self)+upgradeRequest("GET", "/ws", self, bearer(alice)))
			if res.status != 401 || !res.closed || len(res.after) != 0 {
				t.Errorf("got HTTP %d closed=%v after=%q, want 401, closed, nothing after", res.status, res.closed, res.after)
			}
		}},
		{"first message not initialize", func(t *testing.T) {
			d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}, HandshakeTimeout: 5 * time.Second}
			ws, _, err := d.Dial(g.WS, http.Header{"Authorization": {"Bearer " + mallory}})
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":1,"method":"session.open","params":{"channel":1,"cols":80,"rows":24}}`))
			_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, _, err := ws.ReadMessage(); !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
				t.Errorf("got %v, want close 1008", err)
			}
		}},
		{"command not allowed", asMallory(func(t *testing.T, c *client.Client) {
			_, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"touch", "/tmp/muxterm-pwned"}})
			wantKind(t, err, "forbidden")
		})},
		{"loader variable", asMallory(func(t *testing.T, c *client.Client) {
			_, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Env: map[string]string{"LD_PRELOAD": "/tmp/x.so"}})
			wantKind(t, err, "invalid_params")
		})},
		{"shell startup variable", asMallory(func(t *testing.T, c *client.Client) {
			_, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Env: map[string]string{"BASH_ENV": "/tmp/x"}})
			wantKind(t, err, "invalid_params")
		})},
		{"absurd size", asMallory(func(t *testing.T, c *client.Client) {
			_, err := c.Open(ctx, client.OpenOptions{Cols: 70000, Rows: 70000})
			wantKind(t, err, "invalid_params")
		})},
		{"attach another principal's session", asMallory(func(t *testing.T, c *client.Client) {
			_, _, err := c.Attach(ctx, victim.Session(), nil)
			wantKind(t, err, "unknown_session")
		})},
		{"kill another principal's session", asMallory(func(t *testing.T, c *client.Client) {
			_, err := c.Kill(ctx, victim.Session())
			wantKind(t, err, "unknown_session")
		})},
		{"lease another principal's session", asMallory(func(t *testing.T, c *client.Client) {
			err := c.Call(ctx, "session.lease", map[string]any{"session": victim.Session(), "ttl_ms": 86400000}, nil)
			wantKind(t, err, "unknown_session")
		})},
		{"input on the victim's channel number", func(t *testing.T) {
			raw := dialRaw(t, g, mallory)
			if got := errorKind(t, raw.send(websocket.BinaryMessage, proto.AppendFrame(nil, proto.FrameInput, victim.ID, []byte("exit\r")))); got != "unknown_channel" {
				t.Errorf("got kind %q, want unknown_channel", got)
			}
		}},
		{"oversize message", func(t *testing.T) {
			raw := dialRaw(t, g, mallory)
			if got := errorKind(t, raw.send(websocket.TextMessage, bytes.Repeat([]byte("x"), 1<<20))); got != "limit_exceeded" {
				t.Errorf("got kind %q, want limit_exceeded", got)
			}
		}},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			a.run(t)
			if got := childPids(t, pid); !slices.Equal(got, wantChildren) {
				t.Errorf("gateway children after the attack: got %v, want %v", got, wantChildren)
			}
			catEchoes(ctx, t, victim, "ok-"+strings.ReplaceAll(a.name, " ", "-")+";")
		})
	}
	if _, err := os.Stat("/tmp/muxterm-pwned"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an attack created its file: %v", err)
	}
	// Every refused or closed connection is gone from the gateway: its descriptor count comes
	// back to the baseline.
	testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("the gateway's fds back to %d", baseline),
		func() bool { return fdCount(t, pid) <= baseline })
}

// ---------------------------------------------------------------------------------------------
// Listening: loopback by default, TLS or an explicit --insecure-listen elsewhere.

func TestSecurityNonLoopbackListenNeedsTLS(t *testing.T) {
	tok := newToken()
	for _, listen := range []string{"0.0.0.0:0", ":0"} {
		t.Run("refused "+listen, func(t *testing.T) {
			out := runRefused(t, nil, "--listen", listen, "--token", tok)
			if !strings.Contains(out, "not a loopback address: give --tls-cert and --tls-key") ||
				!strings.Contains(out, "--insecure-listen") {
				t.Errorf("got %q, want a refusal naming --tls-cert/--tls-key and --insecure-listen", out)
			}
			if strings.Contains(out, "muxterm: listening") {
				t.Errorf("it listened: %q", out)
			}
		})
	}
	t.Run("insecure-listen warns", func(t *testing.T) {
		g := launchGateway(t, tok, []string{"MUXTERM_INSECURE_LISTEN=true"}, "--listen", "0.0.0.0:0", "--token", tok)
		g.Stop(10 * time.Second)
		if !strings.Contains(g.Logs(), "level=WARN") || !strings.Contains(g.Logs(), "INSECURE: listening on a non-loopback address without TLS") {
			t.Errorf("got no loud warning:\n%s", g.Logs())
		}
	})
	t.Run("loopback needs nothing", func(t *testing.T) {
		g := launchGateway(t, tok, nil, "--listen", "localhost:0", "--token", tok)
		g.Stop(10 * time.Second)
		if strings.Contains(g.Logs(), "INSECURE") {
			t.Errorf("a loopback listener warned:\n%s", g.Logs())
		}
	})
}

// selfSigned writes a certificate for 127.0.0.1 and its key (mode 600) and returns their
// paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "muxterm e2e"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

func TestSecurityTLS(t *testing.T) {
	certPath, keyPath, pool := selfSigned(t)
	g := startSecure(t, "--tls-cert", certPath, "--tls-key", keyPath)
	if !strings.HasPrefix(g.Base, "https://127.0.0.1:") || !strings.HasPrefix(g.WS, "wss://") {
		t.Fatalf("got base %q and socket %q, want https and wss", g.Base, g.WS)
	}
	ctx := ctxT(t, 30*time.Second)
	tlsConf := &tls.Config{RootCAs: pool}
	dialer := &websocket.Dialer{TLSClientConfig: tlsConf, HandshakeTimeout: 5 * time.Second}

	c, err := client.Dial(ctx, g.WS, client.DialOptions{Token: g.Token, Dialer: dialer})
	if err != nil {
		t.Fatalf("wss dial: %v", err)
	}
	defer c.Close()
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	typeUntil(ctx, t, ch, "echo over-''tls\r", "over-tls")

	// The browser path: /auth sets a Secure cookie; the https origin is the gateway's own.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(g.Base + "/auth?token=" + g.Token)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Errorf("/auth: got %d to %q, want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
	var ck *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == g.cookie() {
			ck = k
		}
	}
	if ck == nil || !ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" {
		t.Errorf("cookie: got %+v, want Secure, HttpOnly, SameSite=Strict, Path=/", ck)
	}
	hdr := http.Header{"Cookie": {g.cookie() + "=" + g.Token}}
	if c2, err := client.Dial(ctx, g.WS, client.DialOptions{Header: hdr, Origin: g.Base, Dialer: dialer}); err != nil {
		t.Errorf("cookie with the https origin: %v", err)
	} else {
		c2.Close()
	}
	_, err = client.Dial(ctx, g.WS, client.DialOptions{Header: hdr, Origin: "http://" + hostOf(g), Dialer: dialer})
	var de *client.DialError
	if !errors.As(err, &de) || de.Status != http.StatusForbidden {
		t.Errorf("cookie with the http origin on a TLS gateway: got %v, want HTTP 403", err)
	}

	// Without trusting the certificate, or in clear text, nothing connects.
	if _, err := client.Dial(ctx, g.WS, client.DialOptions{Token: g.Token}); err == nil {
		t.Errorf("dial without the certificate: got success, want a certificate error")
	}
	if _, err := client.Dial(ctx, "ws://"+hostOf(g)+"/ws", client.DialOptions{Token: g.Token}); err == nil {
		t.Errorf("clear-text ws:// to the TLS port: got success, want failure")
	}
}

// ---------------------------------------------------------------------------------------------
// Limits: each refused with limit_exceeded naming it, and nothing else harmed.

func TestSecurityLimitInputRate(t *testing.T) {
	g := startSecure(t, "--allow-cmd", "sh", "--max-input-rate", "1KiB", "--max-input-burst", "64KiB")
	ctx := ctxT(t, 60*time.Second)
	var cErrs serverErrors
	c := dialAsWith(t, g, client.DialOptions{Token: g.Token, OnServerError: cErrs.record})
	if got, want := c.Init().Limits, (proto.Limits{InputRate: 1024, InputBurst: 65536, OpenRate: 10, OpenBurst: 20}); got.InputRate != want.InputRate ||
		got.InputBurst != want.InputBurst || got.OpenRate != want.OpenRate || got.OpenBurst != want.OpenBurst {
		t.Errorf("initialize limits: got %+v, want the rates %+v", got, want)
	}
	a := catSession(ctx, t, c)
	b := catSession(ctx, t, c)

	// The whole burst passes at once.
	burst := bytes.Repeat([]byte("a"), 64<<10)
	if _, err := a.Write(burst); err != nil {
		t.Fatal(err)
	}
	rpcBarrier(ctx, t, c)
	if errs := cErrs.all(); len(errs) != 0 {
		t.Fatalf("the burst was refused: %v", errs)
	}
	if got := readN(ctx, t, a, len(burst)); !bytes.Equal(got, burst) {
		t.Fatalf("the burst came back altered")
	}
	// The next frame would need 16 s of refill: refused whole, naming the limit and channel.
	if _, err := a.Write(bytes.Repeat([]byte("b"), 16<<10)); err != nil {
		t.Fatal(err)
	}
	rpcBarrier(ctx, t, c)
	errs := cErrs.all()
	if len(errs) != 1 {
		t.Fatalf("got %d errors, want 1", len(errs))
	}
	e := errs[0]
	if e.Kind() != "limit_exceeded" || e.Data["limit"] != "inputRate" || e.Data["channel"] != float64(a.ID) {
		t.Errorf("got %v %v, want limit_exceeded, limit inputRate, channel %d", e, e.Data, a.ID)
	}
	// Another session's bucket is its own.
	catEchoes(ctx, t, b, "B-OK;")
	// A byte fits again after a millisecond; retry until it passes, then check that nothing of
	// the refused frame reached the PTY.
	deadline := time.Now().Add(10 * time.Second)
	for n := len(errs); ; n++ {
		if _, err := a.Write([]byte("Z")); err != nil {
			t.Fatal(err)
		}
		rpcBarrier(ctx, t, c)
		if len(cErrs.all()) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a one-byte input was never accepted again")
		}
	}
	out, err := a.ReadUntil(ctx, "Z")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "b") {
		t.Errorf("bytes of the refused frame reached the PTY: %q", out)
	}
}

func TestSecurityLimitOpenRate(t *testing.T) {
	bob := newToken()
	file := writeTokensFile(t, 0o600, tokenLine{"bob", "read-write", bob, ""})
	g := startSecure(t, "--tokens", file, "--max-open-rate", "0.01", "--max-open-burst", "3")
	ctx := ctxT(t, 30*time.Second)
	pid := g.cmd.Process.Pid
	c := g.dial(t)
	var chans []*client.Channel
	for range 3 {
		ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	_, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if e := rpcErr(t, err); e.Kind() != "limit_exceeded" || e.Data["limit"] != "openRate" {
		t.Fatalf("fourth open: got %v %v, want limit_exceeded openRate", e, e.Data)
	}
	if got := childPids(t, pid); len(got) != 3 {
		t.Errorf("gateway children: got %v, want the 3 sessions", got)
	}
	// Another socket of the same principal shares the bucket; another principal does not.
	if _, err := g.dial(t).Open(ctx, client.OpenOptions{Cols: 80, Rows: 24}); kindOf(t, err) != "limit_exceeded" {
		t.Errorf("open on a second socket: got %v, want limit_exceeded", err)
	}
	if _, err := dialAs(t, g, bob).Open(ctx, client.OpenOptions{Cols: 80, Rows: 24}); err != nil {
		t.Errorf("bob's open: got %v, want success", err)
	}
	for i, ch := range chans {
		if _, err := ch.Write([]byte(fmt.Sprintf("echo s''%d\r", i))); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.ReadUntil(ctx, fmt.Sprintf("s%d", i)); err != nil {
			t.Errorf("session %d stopped answering: %v", i, err)
		}
	}
}

func TestSecurityLimitSocketsPerPrincipal(t *testing.T) {
	bob := newToken()
	file := writeTokensFile(t, 0o600, tokenLine{"bob", "read-write", bob, ""})
	g := startSecure(t, "--tokens", file, "--max-sockets", "2")
	ctx := ctxT(t, 30*time.Second)
	c1 := g.dial(t)
	c2 := g.dial(t)
	_, err := client.Dial(ctx, g.WS, client.DialOptions{Token: g.Token})
	var de *client.DialError
	if !errors.As(err, &de) || de.Status != http.StatusTooManyRequests {
		t.Fatalf("third socket: got %v, want HTTP 429", err)
	}
	// The refusal closes the connection, names the limit and serves nothing pipelined.
	res := rawDo(t, hostOf(g), upgradeRequest("GET", "/ws", hostOf(g), "Authorization: Bearer "+g.Token)+
		"GET /healthz HTTP/1.1\r\nHost: "+hostOf(g)+"\r\n\r\n")
	if res.status != http.StatusTooManyRequests || !res.connClose ||
		!strings.Contains(res.body, "maxSockets") || !res.closed || len(res.after) != 0 {
		t.Errorf("got %d Connection: close=%v body=%q closed=%v after=%q, want 429, close, maxSockets, nothing after",
			res.status, res.connClose, res.body, res.closed, res.after)
	}
	// Another principal has its own count; the open sockets work.
	dialAs(t, g, bob)
	if _, err := c2.List(ctx); err != nil {
		t.Errorf("an open socket broke: %v", err)
	}
	// Closing a socket frees its place (the server notices asynchronously, signalling nothing:
	// the dial is the probe).
	c1.Close()
	testutil.WaitFor(t, 10*time.Second, "a dial after closing a socket", func() bool {
		c3, err := client.Dial(ctx, g.WS, client.DialOptions{Token: g.Token})
		if err == nil {
			c3.Close()
			return true
		}
		if !errors.As(err, &de) || de.Status != http.StatusTooManyRequests {
			t.Fatalf("dial after closing a socket: got %v, want success", err)
		}
		return false
	})
}

// openShells opens n shells (80x24) on c and returns their channels.
func openShells(ctx context.Context, t *testing.T, c *client.Client, n int) []*client.Channel {
	t.Helper()
	chs := make([]*client.Channel, n)
	for i := range chs {
		ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
		if err != nil {
			t.Fatalf("open shell %d of %d: %v", i+1, n, err)
		}
		chs[i] = ch
	}
	return chs
}

func TestSecurityLimitChannelsPerSocket(t *testing.T) {
	g := startSecure(t, "--max-channels", "2")
	ctx := ctxT(t, 30*time.Second)
	pid := g.cmd.Process.Pid
	c := g.dial(t)
	a := openShells(ctx, t, c, 2)[0]
	_, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if e := rpcErr(t, err); e.Kind() != "limit_exceeded" || e.Data["limit"] != "maxChannels" {
		t.Errorf("third open: got %v %v, want limit_exceeded maxChannels", e, e.Data)
	}
	_, _, err = c.Attach(ctx, a.Session(), nil)
	if e := rpcErr(t, err); e.Kind() != "limit_exceeded" || e.Data["limit"] != "maxChannels" {
		t.Errorf("third attach: got %v %v, want limit_exceeded maxChannels", e, e.Data)
	}
	if got := childPids(t, pid); len(got) != 2 {
		t.Errorf("gateway children: got %v, want 2", got)
	}
	// The limit is per socket: another socket attaches; a detach frees a channel.
	if _, _, err := g.dial(t).Attach(ctx, a.Session(), nil); err != nil {
		t.Errorf("attach on another socket: %v", err)
	}
	if err := a.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Attach(ctx, a.Session(), nil); err != nil {
		t.Errorf("attach after a detach: %v", err)
	}
}

func TestSecurityLimitSessionsPerPrincipal(t *testing.T) {
	bob := newToken()
	file := writeTokensFile(t, 0o600, tokenLine{"bob", "read-write", bob, ""})
	g := startSecure(t, "--tokens", file, "--max-sessions", "2")
	ctx := ctxT(t, 30*time.Second)
	pid := g.cmd.Process.Pid
	c := g.dial(t)
	a := openShells(ctx, t, c, 2)[0]
	// The limit holds across sockets of the principal.
	_, err := g.dial(t).Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if e := rpcErr(t, err); e.Kind() != "limit_exceeded" || e.Data["limit"] != "maxSessions" {
		t.Errorf("third session: got %v %v, want limit_exceeded maxSessions", e, e.Data)
	}
	if got := childPids(t, pid); len(got) != 2 {
		t.Errorf("gateway children: got %v, want 2 (a refused open spawns nothing)", got)
	}
	if _, err := dialAs(t, g, bob).Open(ctx, client.OpenOptions{Cols: 80, Rows: 24}); err != nil {
		t.Errorf("bob's open: %v", err)
	}
	if _, err := c.Kill(ctx, a.Session()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24}); err != nil {
		t.Errorf("open after a kill: %v", err)
	}
}

// TestSecurityTokensNeverPrinted feeds tokens to the gateway in every place a request can hold
// one, at debug level, and scans everything it printed for them.
func TestSecurityTokensNeverPrinted(t *testing.T) {
	alice, carol := newToken(), newToken()
	stray := newToken() // never configured
	file := writeTokensFile(t, 0o600, tokenLine{"alice", "read-write", alice, ""}, tokenLine{"carol", "read-only", carol, "alice"})
	g := startSecure(t, "--tokens", file)
	self := hostOf(g)
	ctx := ctxT(t, 30*time.Second)
	reqs := []string{
		upgradeRequest("GET", "/ws?token="+alice, self),
		upgradeRequest("GET", "/ws/"+alice, self),
		upgradeRequest("GET", "/ws", self, "Authorization: Bearer "+stray),
		upgradeRequest("GET", "/ws", self, "Authorization: Basic "+alice),
		upgradeRequest("GET", "/ws", self, "Authorization: Bearer "+alice+" "+stray),
		upgradeRequest("GET", "/ws", self, "Cookie: "+g.cookie()+"="+alice, "Origin: http://evil.example"),
		upgradeRequest("GET", "/ws", self, "Cookie: "+g.cookie()+"="+stray, "Origin: http://"+self),
		upgradeRequest("GET", "/ws", "evil.example", "Authorization: Bearer "+alice),
		upgradeRequest("GET", "/ws", alice+".example", "Authorization: Bearer "+alice),
		upgradeRequest("GET", "/ws", self, "Authorization: Bearer "+alice, "X-Forwarded-For: "+stray),
		upgradeRequest("POST", "/ws", self, "Authorization: Bearer "+alice),
		"GET /auth?token=" + stray + " HTTP/1.1\r\nHost: " + self + "\r\n\r\n",
		"GET /auth?token=" + alice + " HTTP/1.1\r\nHost: evil.example\r\n\r\n",
		"GET /" + alice + " HTTP/1.1\r\nHost: " + self + "\r\nConnection: close\r\n\r\n",
		"GET /metrics?token=" + alice + " HTTP/1.1\r\nHost: " + self + "\r\nConnection: close\r\n\r\n",
		"BREW /ws?token=" + alice + " HTTP/1.1\r\nHost: " + self + "\r\nConnection: close\r\n\r\n",
	}
	for _, r := range reqs {
		rawDo(t, self, r)
	}
	// Refusals over authenticated sockets, for both principals.
	for _, tok := range []string{alice, carol} {
		c := dialAs(t, g, tok)
		_, _ = c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{tok}})
		_, _, _ = c.Attach(ctx, tok, nil)
		_ = c.Call(ctx, "session."+tok, nil, nil)
		rpcBarrier(ctx, t, c)
		raw := dialRaw(t, g, tok)
		_ = raw.send(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":"`+tok+`","method":`))
	}
	g.Stop(10 * time.Second)
	checkNoToken(t, "the gateway's output", g.Logs())
}

// --pprof-listen serves the runtime's profiles, unauthenticated, and so only on loopback.

func TestSecurityPprofOnlyOnLoopback(t *testing.T) {
	tok := newToken()
	t.Run("refused off loopback", func(t *testing.T) {
		out := runRefused(t, nil, "--token", tok, "--pprof-listen", "0.0.0.0:0")
		if !strings.Contains(out, "--pprof-listen 0.0.0.0:0: not a loopback address") {
			t.Errorf("got %q, want a refusal naming --pprof-listen", out)
		}
		if strings.Contains(out, "muxterm: listening") {
			t.Errorf("it listened: %q", out)
		}
	})
	t.Run("served on loopback", func(t *testing.T) {
		g := launchGateway(t, tok, nil, "--token", tok, "--pprof-listen", "127.0.0.1:0")
		var base string
		for line := range strings.Lines(g.Logs()) {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "muxterm: pprof on "); ok {
				base = rest
			}
		}
		if !strings.HasPrefix(base, "http://127.0.0.1:") {
			t.Fatalf("no pprof line in the output:\n%s", g.Logs())
		}
		ctx := ctxT(t, 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"goroutine?debug=1", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile: total") {
			t.Errorf("goroutine profile: %d %.200q", resp.StatusCode, body)
		}
		// No token guards it, so a page reaching it through DNS rebinding is refused, and the
		// command line (which can hold --token) is not served at all.
		for _, tc := range []struct{ path, host, site string }{
			{"goroutine?debug=1", "evil.example:" + strings.TrimSuffix(strings.Split(base, ":")[2], "/debug/pprof/"), ""},
			{"goroutine?debug=1", "127.0.0.1:1", ""},
			{"goroutine?debug=1", "", "cross-site"}, // an <img> on some web page
			{"cmdline", "", ""},
		} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+tc.path, nil)
			if tc.host != "" {
				req.Host = tc.host
			}
			if tc.site != "" {
				req.Header.Set("Sec-Fetch-Site", tc.site)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || strings.Contains(string(body), tok) {
				t.Errorf("%s with Host %q, Sec-Fetch-Site %q: got %d %.200q, want a refusal", tc.path, tc.host, tc.site, resp.StatusCode, body)
			}
		}
	})
}

// TestSecurityAuthCheck: GET /auth/check tells a page whether its token is good (204) or not
// (401), so the UI can tell "sign in" from "gateway down"; a foreign Host gets 403.
func TestSecurityAuthCheck(t *testing.T) {
	g := startGateway(t)
	cases := []struct {
		name   string
		host   string
		header [2]string
		status int
	}{
		{"no token", "", [2]string{}, http.StatusUnauthorized},
		{"valid cookie, no Origin", "", [2]string{"Cookie", g.cookie() + "=" + g.Token}, http.StatusNoContent},
		{"wrong cookie", "", [2]string{"Cookie", g.cookie() + "=" + randomToken()}, http.StatusUnauthorized},
		{"valid bearer", "", [2]string{"Authorization", "Bearer " + g.Token}, http.StatusNoContent},
		{"wrong bearer", "", [2]string{"Authorization", "Bearer nope"}, http.StatusUnauthorized},
		{"foreign host", "evil.example", [2]string{"Cookie", g.cookie() + "=" + g.Token}, http.StatusForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(ctxT(t, 5*time.Second), http.MethodGet, g.Base+"/auth/check", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			if tc.header[0] != "" {
				req.Header.Set(tc.header[0], tc.header[1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("GET /auth/check: %v", err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", cc)
			}
		})
	}
}

// TestSecurityAuthWrongTokenNavigation: a wrong token on /auth is a 401 for scripts and
// fetches, and for a browser's navigation a redirect to the UI's sign-in panel, never with a
// cookie.
func TestSecurityAuthWrongTokenNavigation(t *testing.T) {
	g := startGateway(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		mode     string
		status   int
		location string
	}{
		{"", http.StatusUnauthorized, ""},
		{"cors", http.StatusUnauthorized, ""},
		{"navigate", http.StatusSeeOther, "/?signin=invalid"},
	} {
		req, err := http.NewRequestWithContext(ctxT(t, 5*time.Second), http.MethodGet, g.Base+"/auth?token="+randomToken(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.mode != "" {
			req.Header.Set("Sec-Fetch-Mode", tc.mode)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Location") != tc.location {
			t.Errorf("Sec-Fetch-Mode %q: %d to %q, want %d to %q", tc.mode, resp.StatusCode, resp.Header.Get("Location"), tc.status, tc.location)
		}
		if len(resp.Cookies()) != 0 {
			t.Errorf("Sec-Fetch-Mode %q: a cookie was set for a wrong token", tc.mode)
		}
	}
}

// TestSecurityProtocolCloseFreesSocketAtOnce: a socket the gateway closes for the client's
// fault (1007: a text message that is not UTF-8; 1008: a first message that is not initialize)
// stops counting against --max-sockets when the close is decided, not when its linger ends:
// with the client holding its end open (no close reply, no FIN), the principal's next socket
// is admitted as soon as the close frame has arrived.
func TestSecurityProtocolCloseFreesSocketAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		msgs [][]byte
		code int
	}{
		{"1007", [][]byte{[]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"client":{"name":"t","version":"0"}}}`),
			{0xff, 0xfe, 0xfd}}, websocket.CloseInvalidFramePayloadData},
		{"1008", [][]byte{[]byte(`{"jsonrpc":"2.0","id":1,"method":"session.list"}`)}, websocket.ClosePolicyViolation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := startGateway(t, "--max-sockets", "1")
			d := websocket.Dialer{Subprotocols: []string{proto.Subprotocol}, HandshakeTimeout: 5 * time.Second}
			ws, _, err := d.Dial(g.WS, http.Header{"Authorization": {"Bearer " + g.Token}})
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			ws.SetCloseHandler(func(int, string) error { return nil }) // no close reply: the gateway lingers
			for _, m := range tc.msgs {
				if err := ws.WriteMessage(websocket.TextMessage, m); err != nil {
					t.Fatal(err)
				}
			}
			var ce *websocket.CloseError
			for {
				_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, _, err = ws.ReadMessage(); err != nil {
					break
				}
			}
			if !errors.As(err, &ce) || ce.Code != tc.code {
				t.Fatalf("first socket ended with %v, want close %d", err, tc.code)
			}
			// The first socket's TCP connection is still open; its place is free already.
			ctx := ctxT(t, 10*time.Second)
			start := time.Now()
			c, err := client.Dial(ctx, g.WS, client.DialOptions{Token: g.Token})
			if err != nil {
				t.Fatalf("a socket right after the %d close: %v, want admitted (the closed socket must not count during its linger)", tc.code, err)
			}
			defer c.Close()
			t.Logf("admitted %v after the close frame arrived", time.Since(start).Round(time.Millisecond))
			// The bound still holds for sockets that are open.
			_, err = client.Dial(ctx, g.WS, client.DialOptions{Token: g.Token})
			var de *client.DialError
			if !errors.As(err, &de) || de.Status != http.StatusTooManyRequests {
				t.Fatalf("a second open socket: got %v, want HTTP 429", err)
			}
		})
	}
}
