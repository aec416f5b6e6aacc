//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// repoRoot is the module's root: the parent of this package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}

// outsideModule writes a module outside the repository that requires github.com/muxterm/muxterm
// (replaced by this checkout, as `go get` would fetch it) with main.go as its program.
func outsideModule(t *testing.T, mainGo string) string {
	t.Helper()
	dir := t.TempDir()
	mod := "module example.com/plugin\n\ngo 1.26\n\nrequire github.com/muxterm/muxterm v0.0.0\n\nreplace github.com/muxterm/muxterm => " + repoRoot(t) + "\n"
	for name, body := range map[string]string{"go.mod": mod, "main.go": mainGo} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd(t, dir, nil, "mod", "tidy")
	return dir
}

func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOFLAGS=-mod=mod"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s (%v): %v\n%s", strings.Join(args, " "), env, err, out)
	}
	return string(out)
}

// A plugin that only dials depends on nothing of the server: the Go client's dependencies are
// the standard library, gorilla/websocket and proto, and it builds for macOS, Windows and Linux
// on ARM. It also talks to the real binary: the program is docs/getting-started.md's Go client
// (examples/goclient), which does what the page says.
func TestGoClientFromOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds for three platforms")
	}
	// The program is docs/getting-started.md's Go client, as a user copies it into a module.
	program, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "goclient", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	dir := outsideModule(t, string(program))
	deps := strings.Fields(goCmd(t, dir, nil, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "."))
	want := []string{"example.com/plugin", "github.com/gorilla/websocket", "github.com/muxterm/muxterm/client", "github.com/muxterm/muxterm/proto"}
	slices.Sort(deps)
	if !slices.Equal(deps, want) {
		t.Errorf("non-standard dependencies of a program that imports client: got %v, want %v", deps, want)
	}
	for _, target := range []string{"darwin/arm64", "windows/amd64", "linux/arm64"} {
		goos, goarch, _ := strings.Cut(target, "/")
		goCmd(t, dir, []string{"GOOS=" + goos, "GOARCH=" + goarch, "CGO_ENABLED=0"}, "build", "-o", os.DevNull, ".")
	}
	if _, err := os.Stat(filepath.Join(repoRoot(t), "cmd", "muxterm")); err == nil {
		for _, target := range []string{"darwin/arm64", "windows/amd64", "linux/arm64"} {
			goos, goarch, _ := strings.Cut(target, "/")
			goCmd(t, repoRoot(t), []string{"GOOS=" + goos, "GOARCH=" + goarch, "CGO_ENABLED=0"}, "build", "-o", os.DevNull, "./cmd/muxterm")
		}
	}
	bin := filepath.Join(t.TempDir(), "plugin")
	goCmd(t, dir, nil, "build", "-o", bin, ".")
	g := startGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "MUXTERM_URL="+g.WS, "MUXTERM_TOKEN="+g.Token)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the outside program against the gateway: %v\n%s", err, out)
	}
	checkHello(t, "examples/goclient, built outside the module", string(out), "hello-go")
}
