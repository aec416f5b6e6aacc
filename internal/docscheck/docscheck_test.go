package docscheck

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the directory that holds go.mod, two levels up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return root
}

// skipDir names the directories whose files are not sources of the project: dependencies,
// build output, test data and test trees.
func skipDir(name string) bool {
	switch name {
	case "node_modules", "dist", "testdata", "test", "tests", ".git":
		return true
	}
	return false
}

// isSource reports whether a file is a non-test Go or TypeScript source.
func isSource(name string) bool {
	switch {
	case strings.HasSuffix(name, "_test.go"), strings.HasSuffix(name, ".test.ts"), strings.HasSuffix(name, ".d.ts"):
		return false
	}
	return strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".ts")
}

// longSources returns every source under root over MaxLines lines (counted as wc -l does),
// by path relative to root with forward slashes.
func longSources(t *testing.T, root string) map[string]int {
	t.Helper()
	long, seen := map[string]int{}, 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !isSource(d.Name()) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		seen++
		if n := bytes.Count(b, []byte{'\n'}); n > MaxLines {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			long[filepath.ToSlash(rel)] = n
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	if seen == 0 {
		t.Fatalf("no Go or TypeScript source under %s", root)
	}
	return long
}

// reasonLine is a list item of architecture.md's "Sources over 600 lines": the path in
// backquotes, a colon, then the reason.
var reasonLine = regexp.MustCompile("(?m)^- `([^`]+)`: (.*\\S.*)$")

// reasons returns the files architecture.md's "Sources over 600 lines" section gives a reason
// for, with the reason.
func reasons(t *testing.T, root string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Sources over 600 lines\n")
	if start < 0 {
		t.Fatal(`docs/architecture.md has no "## Sources over 600 lines" section`)
	}
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	out := map[string]string{}
	for _, m := range reasonLine.FindAllStringSubmatch(section, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// TestLongSourcesSayWhy fails for every non-test source over MaxLines lines that
// docs/architecture.md does not give a reason for, and for every file it gives a reason for
// that is no longer over MaxLines lines (or no longer exists), so the list stays the list.
func TestLongSourcesSayWhy(t *testing.T) {
	root := repoRoot(t)
	long, why := longSources(t, root), reasons(t, root)
	var paths []string
	for p := range long {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		if _, ok := why[p]; !ok {
			t.Errorf("%s has %d lines (over %d) and no line in docs/architecture.md, \"Sources over 600 lines\", saying why: add \"- `%s`: <why it is one thing>\" or split it",
				p, long[p], MaxLines, p)
		}
	}
	for p := range why {
		if _, ok := long[p]; !ok {
			t.Errorf("docs/architecture.md, \"Sources over 600 lines\", lists %s, which is not a source over %d lines: remove its line", p, MaxLines)
		}
	}
}
