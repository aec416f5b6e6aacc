package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeOnExecInherited marks every descriptor above 2 close-on-exec. The gateway opens its own
// that way (Go always does); one it inherited from whatever started it (a shell's redirection, a
// supervisor's or a CI runner's pipe) would otherwise reach every session's processes, which
// could read or write it, and a pipe a session holds open keeps whoever waits for its end
// waiting. Close-on-exec closes nothing in this process. main runs it only on a fresh start: an
// image started by an upgrade inherits only what the previous image handed over (which it marked
// at its own start) and adopts those itself.
func closeOnExecInherited() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("mark inherited descriptors close-on-exec: close_range: %w", err)
	}
	// Linux before 5.11: one at a time.
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
