package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// namedTest is a test named in a doc as `pkg.TestName`, pkg a directory of the module.
var namedTest = regexp.MustCompile("`([a-z0-9/]+)\\.(Test[A-Za-z0-9_]+)`")

// TestNamedTestsExist fails for every `pkg.TestName` a doc under docs/ names that has no
// func TestName in pkg's test files: the invariants' table and the docs cite tests that prove
// what they say, and a test renamed or removed must take its citation with it.
func TestNamedTestsExist(t *testing.T) {
	root := repoRoot(t)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("docs/*.md: %v (%d files)", err, len(docs))
	}
	found := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range namedTest.FindAllStringSubmatch(string(b), -1) {
			found++
			pkg, name := m[1], m[2]
			files, _ := filepath.Glob(filepath.Join(root, filepath.FromSlash(pkg), "*_test.go"))
			ok := false
			for _, f := range files {
				src, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(src), "\nfunc "+name+"(t *testing.T)") {
					ok = true
					break
				}
			}
			if !ok {
				t.Errorf("%s names %s.%s, which is not a test in %s", filepath.Base(doc), pkg, name, pkg)
			}
		}
	}
	if found == 0 {
		t.Fatal("no doc names a test as `pkg.TestName`: the pattern or the docs changed")
	}
}
