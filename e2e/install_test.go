//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// scratchDir is a temporary directory outside the repository, removed when t ends.
func scratchDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if rel, err := filepath.Rel(repoRoot(t), dir); err != nil || !strings.HasPrefix(rel, "..") {
		t.Fatalf("scratch directory %s is inside the repository", dir)
	}
	return dir
}

// envWithout is this process's environment without the named variables, plus extra.
func envWithout(names []string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, k) {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// runIn runs name with args in dir with env and fails t with its output if it fails or runs
// longer than d.
func runIn(t *testing.T, d time.Duration, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q in %s: %v\n%s", name, args, dir, err, out)
	}
	return string(out)
}

// checkVersions runs gateway --version and muxterm --version from dir and checks what they say.
func checkVersions(t *testing.T, dir string) {
	t.Helper()
	checkVersion(t, filepath.Join(dir, "gateway"), "muxterm gateway ")
	checkCLIVersion(t, dir)
}

// checkCLIVersion runs muxterm --version from dir.
func checkCLIVersion(t *testing.T, dir string) {
	t.Helper()
	checkVersion(t, filepath.Join(dir, "muxterm"), "muxterm ")
}

// checkVersion runs bin --version and checks that it exits 0 printing want first.
func checkVersion(t *testing.T, bin, want string) {
	t.Helper()
	out, stderr, code := runCmd(t, 20*time.Second, nil, bin, "--version")
	if code != 0 || !strings.HasPrefix(out, want) {
		t.Errorf("%s --version: exit %d, stdout %q, stderr %q; want 0 and %q…", bin, code, out, stderr, want)
	}
}

// The install routes README.md gives from a clone, each into a scratch directory outside the
// repository: make install (PREFIX, and GOBIN), go install ./cmd/muxterm and go install
// ./cmd/... (GOBIN), from this working tree and from a fresh clone of its HEAD. The npm route (npm pack, the tarball installed into a project outside the
// repository) is packages/client's `npm run test:pack`.
func TestInstall(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, route := range []string{"make install", "go install ./cmd/muxterm", "go install ./cmd/...",
		"cmd/muxterm@latest` works only once the module is published"} {
		if !strings.Contains(string(readme), route) {
			t.Errorf("README.md does not give %q: this test runs what it gives", route)
		}
	}
	noGo := []string{"GOBIN", "PREFIX", "BINDIR", "MAKEFLAGS", "MAKELEVEL", "MFLAGS"}
	t.Run("make install PREFIX", func(t *testing.T) {
		prefix := scratchDir(t)
		runIn(t, 5*time.Minute, root, envWithout(noGo), "make", "--no-print-directory", "install", "PREFIX="+prefix)
		checkVersions(t, filepath.Join(prefix, "bin"))
	})
	t.Run("make install GOBIN", func(t *testing.T) {
		gobin := scratchDir(t)
		runIn(t, 5*time.Minute, root, envWithout(noGo, "GOBIN="+gobin), "make", "--no-print-directory", "install")
		checkVersions(t, gobin)
	})
	t.Run("fresh clone", func(t *testing.T) {
		// A clone of HEAD (what is committed): nothing built, no node_modules. make install
		// runs npm ci and the builds itself.
		scratch := scratchDir(t)
		clone := filepath.Join(scratch, "muxterm")
		runIn(t, 5*time.Minute, scratch, envWithout(noGo), "git", "clone", "-q", "--no-hardlinks", root, clone)
		prefix := filepath.Join(scratch, "prefix")
		runIn(t, 10*time.Minute, clone, envWithout(noGo), "make", "--no-print-directory", "install", "PREFIX="+prefix)
		checkVersions(t, filepath.Join(prefix, "bin"))
		// The installed gateway embeds the UI the clone's make built.
		tok := newToken()
		g := launchGatewayBin(t, filepath.Join(prefix, "bin", "gateway"), tok, nil, "--token", tok)
		resp, err := http.Get(g.Base + "/")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "Sign in to muxterm") {
			t.Errorf("GET / of the gateway make install built from a fresh clone: %d, %d bytes; want 200 and the UI", resp.StatusCode, len(page))
		}
		gobin := filepath.Join(scratch, "gobin")
		runIn(t, 5*time.Minute, clone, envWithout(noGo, "GOBIN="+gobin), "go", "install", "./cmd/muxterm")
		checkCLIVersion(t, gobin)
	})
	t.Run("go install ./cmd/muxterm", func(t *testing.T) {
		gobin := scratchDir(t)
		runIn(t, 5*time.Minute, root, envWithout(noGo, "GOBIN="+gobin), "go", "install", "./cmd/muxterm")
		checkCLIVersion(t, gobin)
		if _, err := os.Stat(filepath.Join(gobin, "gateway")); err == nil {
			t.Errorf("go install ./cmd/muxterm installed the gateway too")
		}
	})
	t.Run("go install ./cmd/...", func(t *testing.T) {
		gobin := scratchDir(t)
		runIn(t, 5*time.Minute, root, envWithout(noGo, "GOBIN="+gobin), "go", "install", "./cmd/...")
		checkVersions(t, gobin)
		if _, err := os.Stat(filepath.Join(gobin, "muxbench")); err != nil {
			t.Errorf("go install ./cmd/... did not install muxbench: %v", err)
		}
	})
}
