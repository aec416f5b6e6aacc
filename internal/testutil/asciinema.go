package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/creack/pty"
)

// AsciinemaCat returns what Debian's asciinema prints for `asciinema cat path`: the recording's
// output. asciinema reads its controlling terminal (for a key that stops it), so it runs with a
// PTY as one and its stdout on a pipe. A missing asciinema fails the test: make deps-browser
// installs it.
func AsciinemaCat(t testing.TB, path string) string {
	t.Helper()
	bin, err := exec.LookPath("asciinema")
	if err != nil {
		t.Fatalf("asciinema is not installed (make deps-browser installs it): %v", err)
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	cmd := exec.Command(bin, "cat", path)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, &stdout, &stderr
	cmd.Env = append(os.Environ(), "LANG=C.UTF-8")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	err = cmd.Run()
	tty.Close()
	if err != nil {
		t.Fatalf("asciinema cat %s: %v: %s", path, err, stderr.Bytes())
	}
	return stdout.String()
}
