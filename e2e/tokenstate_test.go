//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
)

var readyURL = regexp.MustCompile(`muxterm: open (\S+)/auth\?token=([A-Za-z0-9]+)\n`)

// generatedToken returns the token in the ready URL g printed.
func generatedToken(t *testing.T, g *gateway) string {
	t.Helper()
	g.waitLog(t, "muxterm: token kept in ", 1, 10*time.Second) // printed after the ready URL
	m := readyURL.FindStringSubmatch(g.Logs())
	if m == nil {
		t.Fatalf("no ready URL with a token in the gateway's output:\n%s", g.Logs())
	}
	if m[1] != g.Base {
		t.Errorf("ready URL on %s, want %s", m[1], g.Base)
	}
	return m[2]
}

// dialErr dials g with tok and closes the client at once.
func dialErr(g *gateway, tok string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, g.WS, client.DialOptions{Token: tok})
	if err == nil {
		c.Close()
	}
	return err
}

// A gateway started without --token keeps the token it generates in
// $XDG_STATE_HOME/muxterm/token (mode 0600, directory 0700), so a restart prints and accepts
// the same one; --new-token replaces it, and the old one is refused.
func TestGeneratedTokenKept(t *testing.T) {
	state := t.TempDir()
	env := []string{"XDG_STATE_HOME=" + state}
	file := filepath.Join(state, "muxterm", "token")
	start := func(args ...string) string {
		g := launchGateway(t, randomToken(), env, args...) // the random token is never passed
		tok := generatedToken(t, g)
		if !strings.Contains(g.Logs(), "token kept in "+file) {
			t.Errorf("the gateway does not say where its token is kept:\n%s", g.Logs())
		}
		if err := dialErr(g, tok); err != nil {
			t.Errorf("dial with the printed token: %v", err)
		}
		g.Stop(10 * time.Second)
		return tok
	}
	modes := func() {
		t.Helper()
		for path, want := range map[string]os.FileMode{file: 0o600, filepath.Dir(file): 0o700} {
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Mode().Perm(); got != want {
				t.Errorf("%s: mode %04o, want %04o", path, got, want)
			}
		}
	}
	first := start()
	modes()
	if b, _ := os.ReadFile(file); strings.TrimSpace(string(b)) != first {
		t.Errorf("the state file holds %q, want the printed token", b)
	}
	if again := start(); again != first {
		t.Errorf("after a restart: token %s…, want the kept %s…", again[:4], first[:4])
	}

	g := launchGateway(t, randomToken(), env, "--new-token")
	renewed := generatedToken(t, g)
	if renewed == first {
		t.Fatalf("--new-token printed the kept token")
	}
	modes()
	if b, _ := os.ReadFile(file); strings.TrimSpace(string(b)) != renewed {
		t.Errorf("after --new-token the state file holds %q, want the new token", b)
	}
	if err := dialErr(g, first); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("dial with the replaced token: %v, want a 401 refusal", err)
	}
	g.Stop(10 * time.Second)
	if again := start(); again != renewed {
		t.Errorf("after --new-token and a restart: token %s…, want %s…", again[:4], renewed[:4])
	}

	// A kept token others may read is refused, with what to do.
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCmd(t, 20*time.Second, append(os.Environ(), env...), binary(t), "--listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "chmod 600") || !strings.Contains(stderr, "--new-token") {
		t.Errorf("a token file of mode 0644: exit %d, stderr %q; want 1, naming chmod 600 and --new-token", code, stderr)
	}
	// A FIFO in its place is refused, not waited on.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(file, 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runCmd(t, 20*time.Second, append(os.Environ(), env...), binary(t), "--listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "is not a regular file") {
		t.Errorf("a FIFO as the token file: exit %d, stderr %q; want 1, saying it is not a regular file", code, stderr)
	}
	// --new-token with a token of one's own is a contradiction.
	_, stderr, code = runCmd(t, 20*time.Second, append(os.Environ(), env...), binary(t), "--listen", "127.0.0.1:0", "--token", randomToken(), "--new-token")
	if code == 0 || !strings.Contains(stderr, "--new-token") {
		t.Errorf("--new-token with --token: exit %d, stderr %q; want a refusal naming --new-token", code, stderr)
	}
}
