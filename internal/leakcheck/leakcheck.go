// Package leakcheck fails a test binary whose tests leave goroutines, file descriptors or
// child processes behind. The packages whose tests start sessions, sockets or servers (session,
// mux, reaper, gateway, cmd/gateway, client, cluster, ...) call Main from their TestMain; a test
// that checks its own descriptors compares FDs listings (OpenedSince). It imports no muxterm
// package but internal/procfs.
package leakcheck

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/muxterm/muxterm/internal/procfs"
)

// Options say what Main checks besides goroutines.
type Options struct {
	// FDs compares /proc/self/fd before and after the tests. PTY masters close when their
	// readers' reads end, just after a kill returns, so the count is given up to 10 s to
	// come back.
	FDs bool
	// Children fails when a process the tests started is still our child.
	Children bool
	// WarmUp runs before the fd baseline, to let the runtime open what it keeps for good
	// (the poller's epoll and event fds). Default: open and close a pipe.
	WarmUp func() error
}

// Main runs the tests, checks as o says and goroutines with goleak, and exits.
func Main(m *testing.M, o Options) {
	goleak.VerifyTestMain(checked{m, o})
}

type checked struct {
	m *testing.M
	o Options
}

func (c checked) Run() int {
	warm := c.o.WarmUp
	if warm == nil {
		warm = func() error {
			r, w, err := os.Pipe()
			if err == nil {
				r.Close()
				w.Close()
			}
			return err
		}
	}
	if err := warm(); err != nil {
		fmt.Fprintf(os.Stderr, "warm-up: %v\n", err)
		return 1
	}
	before := OpenFDs()
	code := c.m.Run()
	if code != 0 {
		return code
	}
	if c.o.FDs {
		deadline := time.Now().Add(10 * time.Second)
		after := OpenFDs()
		for after > before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // observing the kernel's fd table, not ordering events
			after = OpenFDs()
		}
		if after > before {
			fmt.Fprintf(os.Stderr, "fd leak: got %d open fds after the tests, want %d\n%s", after, before, FDList())
			return 1
		}
	}
	if c.o.Children {
		if kids := Children(false); len(kids) > 0 {
			fmt.Fprintf(os.Stderr, "processes outlived the tests: got children %v, want none\n", kids)
			return 1
		}
	}
	return 0
}

// OpenFDs counts this process's open file descriptors.
func OpenFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		panic(err)
	}
	return len(ents) - 1 // the directory's own fd
}

// FDList lists this process's open file descriptors and what they point at, one a line.
func FDList() string {
	var b strings.Builder
	for _, fd := range FDs() {
		fmt.Fprintf(&b, "  fd %s\n", fd)
	}
	return b.String()
}

// FDs lists this process's open file descriptors in numeric order, each as "number -> target",
// and for a descriptor whose target many share, what tells it apart, from /proc/self/fdinfo:
// its inode (a pidfd's names its process, on kernels with pidfs, 6.9 on) and a PTY master's tty
// index. Epoll instances share their target and inode, so one closed and another opened at its
// number look the same. It panics if /proc cannot be read: a listing that silently came back
// empty would pass any check.
func FDs() []string {
	pid := os.Getpid()
	names, err := procfs.FDs(pid)
	if err != nil {
		panic(fmt.Errorf("list descriptors: %w", err))
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	type fd struct {
		n    int
		desc string
	}
	var fds []fd
	for _, name := range names {
		n, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		target, err := os.Readlink(dir + "/" + name)
		if errors.Is(err, fs.ErrNotExist) || target == dir {
			// Closed since the listing (its own descriptor among them), or another's listing.
			continue
		}
		if err != nil {
			panic(fmt.Errorf("descriptor %d: %w", n, err))
		}
		desc := name + " -> " + target
		switch {
		case strings.HasPrefix(target, "anon_inode:"), target == "/dev/ptmx", target == "/dev/pts/ptmx":
			desc += fdinfoID(pid, name)
		}
		fds = append(fds, fd{n, desc})
	}
	slices.SortFunc(fds, func(a, b fd) int { return a.n - b.n })
	out := make([]string, len(fds))
	for i, f := range fds {
		out[i] = f.desc
	}
	return out
}

// fdinfoID is a descriptor's inode and tty index as its fdinfo gives them (" ino 123",
// " tty-index 4"), or "" if it closed meanwhile.
func fdinfoID(pid int, fd string) string {
	info, err := procfs.FDInfo(pid, fd)
	if err != nil {
		return ""
	}
	var id strings.Builder
	for _, k := range []string{"ino", "tty-index"} {
		if v, ok := info[k]; ok {
			fmt.Fprintf(&id, " %s %s", k, v)
		}
	}
	return id.String()
}

// OpenedSince lists the descriptors open now that were not in before (an FDs listing): what
// was opened since and is still open, whatever else closed meanwhile.
func OpenedSince(before []string) []string {
	var out []string
	for _, fd := range FDs() {
		if !slices.Contains(before, fd) {
			out = append(out, fd)
		}
	}
	return out
}

// ClosedSince lists the descriptors of before (an FDs listing) that are not open now.
func ClosedSince(before []string) []string {
	now := FDs()
	var out []string
	for _, fd := range before {
		if !slices.Contains(now, fd) {
			out = append(out, fd)
		}
	}
	return out
}

// Stat reads pid's state letter and parent from /proc/pid/stat.
func Stat(pid int) (state byte, ppid int, ok bool) {
	s, err := procfs.ReadStat(pid)
	if err != nil {
		return 0, 0, false
	}
	return s.State, s.PPID, true
}

// Children lists this process's children: all of them, or only zombies.
func Children(zombiesOnly bool) []int {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ppid, ok := Stat(pid)
		if !ok || ppid != self {
			continue
		}
		if !zombiesOnly || st == 'Z' {
			out = append(out, pid)
		}
	}
	return out
}
