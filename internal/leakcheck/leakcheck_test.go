package leakcheck

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenedSince: a descriptor opened after a listing is reported until it closes, and one
// that closes is reported by ClosedSince. Not parallel: it lists the process's descriptors.
func TestOpenedSince(t *testing.T) {
	before := FDs()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if got := OpenedSince(before); len(got) != 2 {
		t.Errorf("after a pipe: opened since %q, want its two ends", got)
	}
	mid := FDs()
	r.Close()
	w.Close()
	if got := OpenedSince(before); len(got) != 0 {
		t.Errorf("after the pipe closed: opened since %q, want none", got)
	}
	if got := ClosedSince(mid); len(got) != 2 {
		t.Errorf("after the pipe closed: closed since %q, want its two ends", got)
	}
}

// TestOpenedSinceTellsPidfdsApart: a pidfd closed and another opened at its number (the lowest
// free one) has the same target, anon_inode:[pidfd]; its inode tells them apart where pidfds
// of two processes have inodes of their own (pidfs, Linux 6.9 on).
func TestOpenedSinceTellsPidfdsApart(t *testing.T) {
	first, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		t.Skipf("pidfd_open: %v", err)
	}
	firstID := fdinfoID(os.Getpid(), strconv.Itoa(first))
	before := FDs()
	if err := unix.Close(first); err != nil {
		t.Fatal(err)
	}
	// Another process's pidfd: a pidfd of this process would be the same inode.
	parent, err := unix.PidfdOpen(os.Getppid(), 0)
	if err != nil {
		t.Skipf("pidfd_open of the parent: %v", err)
	}
	defer unix.Close(parent)
	if parent != first {
		t.Skipf("the new pidfd got %d, not the closed %d: nothing to tell apart", parent, first)
	}
	if fdinfoID(os.Getpid(), strconv.Itoa(parent)) == firstID {
		t.Skipf("pidfds of two processes share their inode here (%q): no pidfs", firstID)
	}
	if got := OpenedSince(before); len(got) != 1 {
		t.Errorf("a pidfd at a closed pidfd's number: opened since %q, want it", got)
	}
}
