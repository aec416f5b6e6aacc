package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/cgroup"
)

// CgroupRoot returns a cgroup root of the test's own (a fresh child of this process's cgroup
// v2, so parallel tests and packages never share one) and removes it, killing whatever is left
// in it, when the test ends. It skips the test, saying why, where cgroups cannot be created.
func CgroupRoot(t testing.TB) string {
	t.Helper()
	own, err := cgroup.Own()
	if err != nil {
		t.Skipf("cgroups cannot be created here: %v", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	root := filepath.Join(own, "muxterm-test-"+hex.EncodeToString(b[:]))
	tr, err := cgroup.Open(root)
	if err != nil {
		t.Skipf("cgroups cannot be created here: %v", err)
	}
	if _, err := tr.Close(context.Background()); err != nil {
		t.Fatalf("probe cgroup: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if n, err := cgroup.RemoveAll(ctx, root); err != nil {
			t.Errorf("remove test cgroup root: %v", err)
		} else if n > 0 {
			t.Logf("test cgroup root %s: killed %d processes left in it", root, n)
		}
	})
	return root
}
