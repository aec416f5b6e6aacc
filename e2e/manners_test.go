//go:build e2e

package e2e

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A port in use stops the start with an error naming --listen and make run's PORT.
func TestGatewayPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out := runRefused(t, nil, "--token", newToken(), "--listen", ln.Addr().String())
	for _, want := range []string{"address already in use", "--listen", "PORT="} {
		if !strings.Contains(out, want) {
			t.Errorf("got %q, want it to name %q", out, want)
		}
	}
}

// The warning that --window exceeds what the ring keeps behind a paused reader says which
// values to set, and the value it names for --scrollback silences it.
func TestGatewayWindowWarningNamesTheFix(t *testing.T) {
	tok := newToken()
	// 64KiB keeps nothing behind a paused reader: only --scrollback can help. 512KiB keeps
	// 224KiB: --window may go down to it instead.
	g0 := launchGateway(t, tok, nil, "--token", tok, "--scrollback", "512KiB")
	g0.waitLog(t, "muxterm started", 1, 10*time.Second)
	g0.Stop(10 * time.Second)
	if !strings.Contains(g0.Logs(), ", or --window to at most 224KiB") {
		t.Errorf("--scrollback 512KiB: no warning naming --window 224KiB:\n%s", g0.Logs())
	}
	g := launchGateway(t, tok, nil, "--token", tok, "--scrollback", "64KiB")
	g.waitLog(t, "muxterm started", 1, 10*time.Second)
	g.Stop(10 * time.Second)
	logs := g.Logs()
	i := strings.Index(logs, "set --scrollback to at least ")
	if i < 0 {
		t.Fatalf("no warning naming the --scrollback to set:\n%s", logs)
	}
	sb := strings.FieldsFunc(logs[i+len("set --scrollback to at least "):], func(r rune) bool { return r == ',' || r == '"' })[0]
	g2 := launchGateway(t, tok, nil, "--token", tok, "--scrollback", sb)
	g2.waitLog(t, "muxterm started", 1, 10*time.Second)
	g2.Stop(10 * time.Second)
	if strings.Contains(g2.Logs(), "--window is larger") {
		t.Errorf("--scrollback %s, as the warning said: still warned:\n%s", sb, g2.Logs())
	}
}

// The CLI: --version and -V, the --help hint after every usage error, arguments checked before
// credentials, and ls with relative times that fits a narrow terminal.
func TestCLIManners(t *testing.T) {
	for _, arg := range []string{"--version", "-V"} {
		out, errOut, code := runCLI(t, cliEnv(t, nil), arg)
		if code != 0 || !regexp.MustCompile(`^muxterm \S+ \(commit \S+, go\S+, \S+/\S+\)\n$`).MatchString(out) {
			t.Errorf("muxterm %s: exit %d, stdout %q, stderr %q; want 0 and the version", arg, code, out, errOut)
		}
	}
	const hint = "\nRun 'muxterm --help' for usage.\n"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "muxterm: flag provided but not defined: -bogus"},
		{[]string{"ls", "--bogus"}, "muxterm: flag provided but not defined: -bogus"},
		{[]string{"frobnicate"}, `muxterm: unknown command "frobnicate"`},
		{[]string{"kill"}, "muxterm: kill needs a session id or name"},
		// Without a token: the command line is refused first.
		{[]string{"new", "--cols", "0"}, "muxterm: --cols 0: must be between 1 and 65535"},
		{[]string{"new", "--rows", "70000", "--", "true"}, "muxterm: --rows 70000: must be between 1 and 65535"},
		{[]string{"attach", "a", "b"}, "muxterm: attach needs one session id or name"},
	} {
		_, errOut, code := runCLI(t, cliEnv(t, nil), tc.args...)
		if code != 2 || !strings.HasPrefix(errOut, tc.want) || !strings.HasSuffix(errOut, hint) {
			t.Errorf("muxterm %q: exit %d, stderr %q; want 2, %q … and the hint", tc.args, code, errOut, tc.want)
		}
	}

	// No token anywhere, but a gateway's kept one: the error says where it is.
	state := t.TempDir()
	if err := os.MkdirAll(filepath.Join(state, "muxterm"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "muxterm", "token"), []byte(randomToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, cliEnv(t, nil, "XDG_STATE_HOME="+state), "ls")
	if kept := filepath.Join(state, "muxterm", "token"); code != 1 || !strings.Contains(errOut, "export MUXTERM_TOKEN=$(cat "+kept+")") {
		t.Errorf("ls without a token: exit %d, stderr %q; want 1, naming the kept token %s", code, errOut, kept)
	}

	g := startGateway(t, "--allow-cmd", "*")
	env := cliEnv(t, g)
	id := newSession(t, env, "--name", "long", "--", "sh", "-c", "sleep 600; echo "+strings.Repeat("and a long tail ", 8))
	t.Cleanup(func() { runCLI(t, env, "kill", id) })
	// Not a terminal: every column, whole; CREATED to the second.
	out, errOut, code := runCLI(t, env, "ls")
	if code != 0 {
		t.Fatalf("ls: exit %d, %q", code, errOut)
	}
	if !regexp.MustCompile(`(?m)^` + id + `\s+long\s+\d+\s+\d+x\d+\s+0\s+running\s+\d+s ago\s+sh -c sleep 600; echo (and a long tail ){8}$`).MatchString(out) {
		t.Errorf("ls into a pipe: got\n%s\nwant the whole row, created \"Ns ago\"", out)
	}
	// A terminal of 60 columns: no line wraps, the id stays whole.
	tm := startTermSized(t, env, false, false, 60, "ls")
	if code := tm.wait(); code != 0 {
		t.Fatalf("ls on a terminal: exit %d, %q", code, tm.output())
	}
	lines := strings.Split(strings.TrimRight(strings.ReplaceAll(tm.output(), "\r\n", "\n"), "\n"), "\n")
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > 60 {
			t.Errorf("ls on a terminal of 60 columns: a line of %d: %q", n, l)
		}
	}
	if len(lines) != 2 || !strings.HasPrefix(lines[1], id+"  long") || !strings.HasPrefix(lines[0], "ID") {
		t.Errorf("ls on a terminal of 60 columns: got %q, want the header and the session's row", lines)
	}
}
