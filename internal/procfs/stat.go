// Package procfs reads what Linux's /proc says about a process: its stat, the pids in /proc, a
// process's open descriptors and a descriptor's fdinfo (its open flags, inode, ...). Stdlib
// only, so production code (the gateway's handover and kill path in session, internal/cgroup,
// cmd/muxbench, cmd/pagebench, internal/leakcheck) and tests (internal/testutil) share one
// parser of /proc/PID/stat.
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat is the part of /proc/PID/stat (proc_pid_stat(5)) muxterm reads.
type Stat struct {
	PID   int
	Comm  string // the command name, without its parentheses
	State byte   // R, S, D, Z, T, t, X, I, ...
	PPID  int
	PGRP  int
	// Session is the session id (the pid of the session leader).
	Session int
	// Utime and Stime are in clock ticks (USER_HZ, 100 on Linux).
	Utime, Stime uint64
	// StartTime is when the process started, in clock ticks since boot. It does not change
	// across execve, so (pid, StartTime) names one process even as pids are reused.
	StartTime uint64
}

// Zombie reports whether the process has exited (a zombie waiting for its parent, or dead).
func (s Stat) Zombie() bool { return s.State == 'Z' || s.State == 'X' }

// ReadStat reads and parses /proc/PID/stat. A process that is gone gives an error that
// satisfies errors.Is(err, fs.ErrNotExist).
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, fmt.Errorf("stat of %d: %w", pid, err)
	}
	s, err := ParseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return s, nil
}

// ParseStat parses the contents of a /proc/PID/stat file. The command name may hold spaces and
// parentheses, so the fields after it are counted from its last ')'.
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, fmt.Errorf("malformed: no (comm)")
	}
	var s Stat
	var err error
	if s.PID, err = strconv.Atoi(strings.TrimSpace(string(b[:open]))); err != nil {
		return Stat{}, fmt.Errorf("malformed pid: %w", err)
	}
	s.Comm = string(b[open+1 : end])
	// After "(comm)": state(3) ppid(4) pgrp(5) session(6) ... utime(14) stime(15) ...
	// starttime(22), numbered as in proc_pid_stat(5); f[0] is field 3.
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("malformed: %d fields after (comm)", len(f))
	}
	s.State = f[0][0]
	ints := []struct {
		dst *int
		i   int
	}{{&s.PPID, 1}, {&s.PGRP, 2}, {&s.Session, 3}}
	for _, x := range ints {
		if *x.dst, err = strconv.Atoi(f[x.i]); err != nil {
			return Stat{}, fmt.Errorf("malformed field %d: %w", x.i+3, err)
		}
	}
	uints := []struct {
		dst *uint64
		i   int
	}{{&s.Utime, 11}, {&s.Stime, 12}, {&s.StartTime, 19}}
	for _, x := range uints {
		if *x.dst, err = strconv.ParseUint(f[x.i], 10, 64); err != nil {
			return Stat{}, fmt.Errorf("malformed field %d: %w", x.i+3, err)
		}
	}
	return s, nil
}
