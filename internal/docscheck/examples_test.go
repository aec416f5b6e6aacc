package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// exampleBlock is a fenced code block of a doc whose first line is a comment naming the file of
// examples/ it shows: "// examples/...".
var exampleBlock = regexp.MustCompile("(?ms)^```[a-z]*\n(// (examples/[^:\n]+):.*?\n)```$")

// TestGettingStartedShowsTheExamples fails when a program shown in docs/getting-started.md is not
// byte for byte the file of examples/ it names (those files are what the e2e tests run), or when
// the page shows none.
func TestGettingStartedShowsTheExamples(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := exampleBlock.FindAllSubmatch(doc, -1)
	if len(blocks) < 2 {
		t.Fatalf("docs/getting-started.md shows %d programs of examples/, want the Go and the npm client", len(blocks))
	}
	for _, b := range blocks {
		path, shown := string(b[2]), string(b[1])
		file, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
		if err != nil {
			t.Errorf("docs/getting-started.md shows %s: %v", path, err)
			continue
		}
		if string(file) != shown {
			t.Errorf("docs/getting-started.md shows %s, but not as the file is: copy the file into the page", path)
		}
	}
}
