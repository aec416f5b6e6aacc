package testutil

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// RunOwnProcess runs the calling test again in a process of its own (this test binary, with
// env=1 and the extra NAME=value pairs, which makes the test run its helper) and fails unless
// it ends well and printed ok. A test that changes its whole process for good (the orphan
// reaper is for the life of a process) or counts the whole process's threads runs there.
func RunOwnProcess(t *testing.T, env, ok string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), env+"=1"), extra...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), ok) {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	return string(out)
}
