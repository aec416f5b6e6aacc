package docscheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLockOrderIsTheRegistrys fails when architecture.md's "## Lock order" block differs from
// the order written once at session's Registry.mu (the indented block of its comment).
func TestLockOrderIsTheRegistrys(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Lock order\n")
	_, block, ok2 := strings.Cut(section, "\n```\n")
	doc, _, ok3 := strings.Cut(block, "\n```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`docs/architecture.md has no "## Lock order" code block`)
	}
	src, err := os.ReadFile(filepath.Join(root, "session", "registry.go"))
	if err != nil {
		t.Fatal(err)
	}
	_, decl, ok := strings.Cut(string(src), "\ntype Registry struct {\n")
	if !ok {
		t.Fatal("session/registry.go declares no Registry")
	}
	var code []string
	for line := range strings.Lines(decl) {
		if l, ok := strings.CutPrefix(line, "\t//\t"); ok {
			code = append(code, strings.TrimRight(l, "\n"))
		} else if len(code) > 0 {
			break
		}
	}
	if len(code) == 0 {
		t.Fatal("session/registry.go: no lock order (an indented comment block) in Registry")
	}
	if got, want := doc, strings.Join(code, "\n"); got != want {
		t.Errorf("architecture.md's lock order differs from Registry.mu's:\ngot\n%s\nwant\n%s", got, want)
	}
}
