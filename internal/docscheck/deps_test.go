package docscheck

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/muxterm/muxterm/"

// internalImports runs go list in root and returns, for every package of the module that imports
// another (non-test code), the packages of the module it imports, by path relative to the module.
func internalImports(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	got := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var deps []string
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				deps = append(deps, rel)
			}
		}
		if len(deps) > 0 {
			slices.Sort(deps)
			got[strings.TrimPrefix(f[0], module)] = deps
		}
	}
	return got
}

// documentedImports reads the code block of architecture.md's "## Dependencies": one line per
// package, "pkg → dep, dep, ...".
func documentedImports(t *testing.T, root string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Dependencies\n")
	if !ok {
		t.Fatal(`docs/architecture.md has no "## Dependencies" section`)
	}
	_, block, ok := strings.Cut(section, "\n```\n")
	block, _, ok2 := strings.Cut(block, "\n```\n")
	if !ok || !ok2 {
		t.Fatal(`docs/architecture.md's "## Dependencies" has no code block`)
	}
	doc := map[string][]string{}
	for line := range strings.Lines(block) {
		pkg, deps, ok := strings.Cut(line, "→")
		if !ok {
			t.Errorf("architecture.md, Dependencies: %q is not \"pkg → dep, ...\"", strings.TrimSpace(line))
			continue
		}
		var list []string
		for d := range strings.SplitSeq(deps, ",") {
			list = append(list, strings.TrimSpace(d))
		}
		slices.Sort(list)
		doc[strings.TrimSpace(pkg)] = list
	}
	return doc
}

// TestDependencyGraphIsTrue fails when architecture.md's dependency graph leaves out an import
// between muxterm packages, lists one that does not exist, or lists a package that imports none.
func TestDependencyGraphIsTrue(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	root := repoRoot(t)
	got, doc := internalImports(t, root), documentedImports(t, root)
	for _, pkg := range slices.Sorted(maps.Keys(got)) {
		if want, ok := doc[pkg]; !ok {
			t.Errorf("architecture.md, Dependencies, lacks the line %s → %s", pkg, strings.Join(got[pkg], ", "))
		} else if !slices.Equal(want, got[pkg]) {
			t.Errorf("architecture.md, Dependencies, says %s → %s; go list says %s", pkg, strings.Join(want, ", "), strings.Join(got[pkg], ", "))
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(doc)) {
		if _, ok := got[pkg]; !ok {
			t.Errorf("architecture.md, Dependencies, lists %s, which imports no muxterm package", pkg)
		}
	}
}
