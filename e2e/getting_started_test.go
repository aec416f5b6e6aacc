//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// checkHello checks what both getting-started clients print against a gateway with no other
// session: the hello, the listed session with its name and size, and the kill's status.
func checkHello(t *testing.T, who, out, name string) {
	t.Helper()
	if !regexp.MustCompile(`(?m)^session [0-9a-f]{32} said hello from 42$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^[0-9a-f]{32} `+name+` 80x24$`).MatchString(out) ||
		!strings.HasSuffix(out, "\nkilled\n") {
		t.Errorf("%s: output does not say hello, list %s at 80x24 and end with killed:\n%s", who, name, out)
	}
}

// The npm client of docs/getting-started.md: `npm pack` of packages/client, installed with ws
// in a fresh project outside the repository, runs examples/npmclient/hello.mjs against the binary.
func TestGettingStartedNpmClient(t *testing.T) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm not installed")
	}
	ws := filepath.Join(repoRoot(t), "packages", "client", "node_modules", "ws")
	if _, err := os.Stat(ws); err != nil {
		t.Skip("packages/client has no node_modules: run npm ci there (make test-npm does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(dir string, env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	tmp := t.TempDir()
	run(filepath.Join(repoRoot(t), "packages", "client"), nil, npm, "pack", "--silent", "--pack-destination", tmp)
	tgz, err := filepath.Glob(filepath.Join(tmp, "muxterm-client-*.tgz"))
	if err != nil || len(tgz) != 1 {
		t.Fatalf("npm pack made %v (%v), want one muxterm-client-*.tgz", tgz, err)
	}
	project := filepath.Join(tmp, "hello")
	if err := os.Mkdir(project, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, "package.json"), []byte(`{"name": "hello", "private": true, "type": "module"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(project, nil, npm, "install", "--no-audit", "--no-fund", "--offline", tgz[0], ws)
	script, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "npmclient", "hello.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, "hello.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t)
	out := run(project, []string{"MUXTERM_URL=" + g.WS, "MUXTERM_TOKEN=" + g.Token}, "node", "hello.mjs")
	checkHello(t, "examples/npmclient/hello.mjs", out, "hello-npm")
}
