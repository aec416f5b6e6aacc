package main

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// Both ways of marking (close_range, and one fcntl per descriptor where close_range is missing or
// refused) leave an inherited descriptor close-on-exec, and stdin, stdout and stderr as they were.
func TestCloseOnExecInherited(t *testing.T) {
	for name, mark := range map[string]func() error{"close_range": closeOnExecInherited, "per descriptor": closeOnExecEach} {
		t.Run(name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			// As a launcher leaves it: inheritable.
			if _, err := unix.FcntlInt(w.Fd(), unix.F_SETFD, 0); err != nil {
				t.Fatal(err)
			}
			stdio := make([]int, 3)
			for fd := range stdio {
				stdio[fd], _ = unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			}
			if err := mark(); err != nil {
				t.Fatal(err)
			}
			if flags, err := unix.FcntlInt(w.Fd(), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
				t.Errorf("the inherited pipe's flags are %#x, %v: not close-on-exec", flags, err)
			}
			for fd, before := range stdio {
				if after, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); after != before {
					t.Errorf("fd %d's flags went from %#x to %#x", fd, before, after)
				}
			}
		})
	}
}
