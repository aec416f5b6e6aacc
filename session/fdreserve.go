package session

import (
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/procfs"
)

// killReserveFDs is how many descriptors the session package holds back for the kill path: the
// /proc scans, the pidfds of PTY holders and the cgroup files of a kill all need one, and a
// gateway whose descriptor table is full must still be able to end a session and say truly what
// is left.
const killReserveFDs = 4

// killFDs is the package's descriptor reserve: killReserveFDs descriptors on /dev/null, opened
// when the package is initialized (the table is then nearly empty), released only by withFDs.
var killFDs fdReserve

func init() { reserveKillFDs() }

type fdReserve struct {
	// mu guards fds. withFDs holds it while it runs a step on the released reserve, so two
	// kills short of descriptors take turns.
	mu  sync.Mutex
	fds []int
}

// fillLocked opens /dev/null until the reserve is whole again (as far as the table allows).
// r.mu must be held.
func (r *fdReserve) fillLocked() {
	for len(r.fds) < killReserveFDs {
		fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return
		}
		r.fds = append(r.fds, fd)
	}
}

// reserveKillFDs fills the reserve.
func reserveKillFDs() {
	killFDs.mu.Lock()
	killFDs.fillLocked()
	killFDs.mu.Unlock()
}

// withFDs runs f; if f failed for want of a descriptor (EMFILE, ENFILE), it releases the
// reserve, runs f again and fills the reserve afterwards. Another thread may take a released
// slot first; f's error then says so, and the caller counts the check as unverified.
func withFDs(f func() error) error {
	if testNoFDs.Load() {
		return unix.EMFILE
	}
	err := f()
	if !outOfFDs(err) {
		return err
	}
	fdReserveUses.Add(1)
	killFDs.mu.Lock()
	defer killFDs.mu.Unlock()
	for _, fd := range killFDs.fds {
		unix.Close(fd)
	}
	killFDs.fds = killFDs.fds[:0]
	err = f()
	killFDs.fillLocked()
	return err
}

// fdReserveUses counts withFDs' steps that ran again on the released reserve.
var fdReserveUses atomic.Int64

// FDReserveUses returns how many steps of kills ran again on the descriptor reserve because
// the descriptor table was full (the process's or the system's), since the process started.
func FDReserveUses() int64 { return fdReserveUses.Load() }

// testNoFDs makes every withFDs step fail with EMFILE, as a full table would even after the
// reserve (a test of what the kill reports then).
var testNoFDs atomic.Bool

// outOfFDs reports whether err is the process's or the system's descriptor table being full.
func outOfFDs(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE)
}

// gone reports whether err says the process is no longer there.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
}

// procPids lists the pids in /proc (ours excluded), with the reserve if the table is full.
func procPids() ([]int, error) {
	var pids []int
	err := withFDs(func() error {
		var err error
		pids, err = procfs.Pids()
		return err
	})
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	return slices.DeleteFunc(pids, func(pid int) bool { return pid == self }), nil
}

// fdNames lists the names in /proc/PID/fd, with the reserve if the table is full.
func fdNames(pid int) ([]string, error) {
	var names []string
	err := withFDs(func() error {
		var err error
		names, err = procfs.FDs(pid)
		return err
	})
	return names, err
}
