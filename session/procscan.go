package session

// The /proc scans a kill makes: the PTY's holders, a terminal session's process groups, and
// whether a pid is a zombie.

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/internal/procfs"
)

// holder is a process with an open fd on a PTY slave, and the names of those fds.
type holder struct {
	pid int
	fds []string
}

// still reports whether h still holds one of paths, re-checking only the fds found before
// (holdsFD). A process that exited, or closed them, no longer holds it; err is set
// when no link could be read for another reason.
func (h holder) still(paths []string) (bool, error) {
	var first error
	for _, fd := range h.fds {
		ok, err := holdsFD(h.pid, fd, paths)
		if ok {
			return true, nil
		}
		if err != nil && !gone(err) && first == nil {
			first = err
		}
	}
	return false, first
}

// ptyHolders lists the processes (not us) with an open fd on the slave at one of paths (a pipe
// session's: its output pipes), and counts
// those it could not inspect for want of a descriptor (or another error than the process being
// gone or another user's). err is set when /proc itself could not be listed.
func ptyHolders(paths []string) (holders []holder, unverified int, err error) {
	pids, err := procPids()
	if err != nil {
		return nil, 0, fmt.Errorf("list /proc: %w", err)
	}
	for _, pid := range pids {
		fds, err := holderFDs(pid, paths)
		switch {
		case err == nil:
			if len(fds) > 0 {
				holders = append(holders, holder{pid, fds})
			}
		case gone(err), errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
			// Exited, or another user's: not ours to signal either.
		default:
			unverified++
		}
	}
	return holders, unverified, nil
}

// holderFDs returns the names of pid's fds open on one of paths: on a pipe (a pipe session's
// output), only those open for writing. A pipe's read end names the same pipe:[inode] as its
// write end, and only the write ends keep the output open; the gateway holds the read ends, and
// so does any child it forks until that child's exec closes them.
func holderFDs(pid int, paths []string) ([]string, error) {
	names, err := fdNames(pid)
	if err != nil {
		return nil, err
	}
	var fds []string
	for _, fd := range names {
		ok, err := holdsFD(pid, fd, paths)
		if err != nil && !gone(err) { // gone: closed meanwhile
			return nil, err
		}
		if ok {
			fds = append(fds, fd)
		}
	}
	return fds, nil
}

// holdsFD reports whether pid's fd is open on one of paths: for a pipe, open for writing.
// readlink needs no descriptor; only a pipe's fdinfo does.
func holdsFD(pid int, fd string, paths []string) (bool, error) {
	target, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd)
	if err != nil || !slices.Contains(paths, target) {
		return false, err
	}
	if strings.HasPrefix(target, "pipe:") {
		return fdWritable(pid, fd)
	}
	return true, nil
}

// fdWritable reports whether pid's fd is open for writing: the access mode of the flags in
// /proc/PID/fdinfo/FD (with the reserve if the table is full).
func fdWritable(pid int, fd string) (bool, error) {
	var flags uint64
	err := withFDs(func() error {
		var err error
		flags, err = procfs.FDFlags(pid, fd)
		return err
	})
	return err == nil && procfs.Writable(flags), err
}

// sessionGroups returns the process groups of the live processes (zombies excluded) whose
// session id is sid: the groups of a terminal session whose leader is sid. getsid and getpgid
// need no descriptor; listing /proc and telling a zombie do (the reserve's).
func sessionGroups(sid int) ([]int, error) {
	pids, err := procPids()
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	var groups []int
	for _, pid := range pids {
		if s, err := unix.Getsid(pid); err != nil || s != sid {
			continue
		}
		if zombie(pid) {
			continue
		}
		pg, err := unix.Getpgid(pid)
		if err != nil || slices.Contains(groups, pg) {
			continue
		}
		groups = append(groups, pg)
	}
	return groups, nil
}

// zombie reports whether pid has exited and awaits its reaping, or is gone (an unreadable stat
// counts as alive).
func zombie(pid int) bool {
	st, err := statOf(pid)
	if err != nil {
		return gone(err)
	}
	return st.Zombie()
}

// statOf reads /proc/pid/stat (procfs.ReadStat) on the kill path: with the descriptor reserve
// when the table is full.
func statOf(pid int) (procfs.Stat, error) {
	var st procfs.Stat
	err := withFDs(func() error {
		var err error
		st, err = procfs.ReadStat(pid)
		return err
	})
	return st, err
}
