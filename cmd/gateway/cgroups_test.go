package main

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/muxterm/muxterm/internal/testutil"
)

// --cgroup-root off, an explicit root that is no cgroup, and an explicit root that is: off says
// so in one line with the kill policy; a bad explicit root stops the start; a good one is used
// and swept.
func TestOpenCgroups(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	ctx := context.Background()

	tr, err := openCgroups(ctx, "off", log)
	if tr != nil || err != nil {
		t.Fatalf("off: got %v, %v, want no tree and no error", tr, err)
	}
	if lines := strings.Count(buf.String(), "\n"); lines != 1 || !strings.Contains(buf.String(), `msg="cgroups off: --cgroup-root off" kill_policy="signals only`) {
		t.Errorf("off: want one line saying so and the kill policy, got:\n%s", buf.String())
	}

	bad := filepath.Join(t.TempDir(), "sessions")
	if tr, err := openCgroups(ctx, bad, log); tr != nil || err == nil || !strings.Contains(err.Error(), "--cgroup-root") {
		t.Errorf("a root outside cgroupfs: got %v, %v, want an error naming --cgroup-root", tr, err)
	}

	root := testutil.CgroupRoot(t)
	buf.Reset()
	tr, err = openCgroups(ctx, root, log)
	if err != nil || tr == nil {
		t.Fatalf("%s: got %v, %v", root, tr, err)
	}
	defer tr.Close(ctx)
	if tr.Root() != root || !strings.Contains(buf.String(), `msg="cgroups on"`) || !strings.Contains(buf.String(), "swept_processes=0") {
		t.Errorf("on: root %s, log:\n%s", tr.Root(), buf.String())
	}
}
