//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
)

// Descriptors the gateway inherited from whatever started it (here: a pipe and a file, as a
// shell's redirection or a CI runner's pipe would leave them) never reach a session's processes:
// the gateway marks them close-on-exec at start. Without it the session's shell held both, so a
// session could write into its launcher's pipe and keep whoever waits for the pipe's end waiting.
func TestInheritedDescriptorsDoNotReachSessions(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "inherited"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	inherit := func(c *exec.Cmd) { c.ExtraFiles = []*os.File{pw, file} } // fds 3 and 4, not close-on-exec
	tok := randomToken()
	g := launchGatewayWith(t, tok, nil, inherit, "--token", tok, "--allow-cmd", "*")
	pipeID, fileID := statID(t, pw), statID(t, file)
	gw := g.cmd.Process.Pid
	if got := heldBy(t, gw); !got[pipeID] || !got[fileID] {
		t.Fatalf("the gateway (pid %d) does not hold the descriptors it was given: the test proves nothing", gw)
	}
	c := g.dial(t)
	ctx := ctxT(t, 20*time.Second)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"sh", "-c", `echo "SH $$ READY"; exec sleep 1000`}})
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := readPid(ctx, t, ch, "READY", "SH")
	held := heldBy(t, pid)
	if len(held) == 0 {
		t.Fatalf("read no descriptor of the session's process %d", pid)
	}
	if held[pipeID] {
		t.Errorf("the session's process %d holds the gateway's inherited pipe", pid)
	}
	if held[fileID] {
		t.Errorf("the session's process %d holds the gateway's inherited file", pid)
	}
}

// An image that did not mark what it inherited (as before close-on-exec at start, built here with
// -X main.keepInherited=1) passes its launcher's descriptors on across an upgrade in place; the
// new image marks them once it has adopted its sessions, so a session opened after the upgrade
// gets none of them, while one opened before (by the old image) did, and still runs.
func TestUpgradeFromAnImageThatLeakedMarksInherited(t *testing.T) {
	dir, bin := binaryCopy(t)
	leaky := filepath.Join(dir, "gateway-leaky")
	buildGateway(t, leaky, "-X main.keepInherited=1")
	if err := os.Rename(leaky, bin); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(dir, "gateway-fresh")
	b, err := os.ReadFile(binary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fresh, b, 0o755); err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	pipeID := statID(t, pw)
	tok := randomToken()
	g := launchGatewayBinWith(t, bin, tok, nil, func(c *exec.Cmd) { c.ExtraFiles = []*os.File{pw} },
		"--token", tok, "--allow-cmd", "*")
	ctx := ctxT(t, 60*time.Second)
	open := func(c *client.Client) int {
		t.Helper()
		ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
			Cmd: []string{"sh", "-c", `echo "SH $$ READY"; exec sleep 1000`}})
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := readPid(ctx, t, ch, "READY", "SH")
		return pid
	}
	before := open(g.dial(t))
	if !heldBy(t, before)[pipeID] {
		t.Fatalf("a session of the image built with keepInherited does not hold the inherited pipe: the test proves nothing")
	}
	if err := os.Rename(fresh, bin); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, "upgrade complete", 1, 60*time.Second)
	if !heldBy(t, g.cmd.Process.Pid)[pipeID] {
		t.Fatalf("the new image does not hold the pipe the old one passed on: the test proves nothing")
	}
	after := open(dialRetry(t, g, 20*time.Second))
	if heldBy(t, after)[pipeID] {
		t.Errorf("a session opened after the upgrade (pid %d) holds the old image's inherited pipe", after)
	}
	if !testutil.Alive(before) {
		t.Errorf("the session opened before the upgrade (pid %d) did not survive it", before)
	}
}

// fileID is a file's device and inode.
type fileID struct{ dev, ino uint64 }

func statID(t *testing.T, f *os.File) fileID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fileID{uint64(st.Dev), st.Ino}
}

// heldBy returns the files pid's descriptors refer to.
func heldBy(t *testing.T, pid int) map[fileID]bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	held := map[fileID]bool{}
	for _, e := range ents {
		var st unix.Stat_t
		if unix.Stat(filepath.Join(dir, e.Name()), &st) == nil {
			held[fileID{uint64(st.Dev), st.Ino}] = true
		}
	}
	return held
}
