package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// keepInherited, when set with -ldflags "-X main.keepInherited=1", makes a fresh start leave the
// descriptors it inherited as they are, as images before closeOnExecInherited did: the e2e test
// of an upgrade from such an image builds it.
var keepInherited = ""

// closeOnExecInherited marks every descriptor above 2 close-on-exec. The gateway opens its own
// that way (Go always does); one it inherited from whatever started it (a shell's redirection, a
// supervisor's or a CI runner's pipe) would otherwise reach every session's processes, which
// could read or write it, and a pipe a session holds open keeps whoever waits for its end
// waiting. Close-on-exec closes nothing in this process. A fresh start runs it first thing in
// main. An image started by an upgrade runs it once it has adopted what it was handed over (run):
// before that, "not close-on-exec" is how the handover's teardown tells a handed-over descriptor
// (session.KillOrphans), and an image older than this one passed its launcher's descriptors on
// unmarked.
func closeOnExecInherited() error {
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	// Linux before 5.11 (ENOSYS, EINVAL), or a seccomp profile that refuses close_range (EPERM):
	// one at a time.
	return closeOnExecEach()
}

// closeOnExecEach marks every descriptor above 2 close-on-exec, one fcntl per entry of
// /proc/self/fd.
func closeOnExecEach() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w", err)
	}
	var errs []error
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			errs = append(errs, fmt.Errorf("fd %d: %w", fd, err)) // EBADF: ReadDir's own, closed since
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w", errors.Join(errs...))
	}
	return nil
}
