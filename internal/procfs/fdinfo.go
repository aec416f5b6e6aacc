package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// FDFlags reads the open flags of pid's descriptor fd from /proc/PID/fdinfo/FD (proc(5)).
func FDFlags(pid int, fd string) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/fdinfo/" + fd)
	if err != nil {
		return 0, err
	}
	flags, err := ParseFDInfoFlags(b)
	if err != nil {
		return 0, fmt.Errorf("fdinfo %d/%s: %w", pid, fd, err)
	}
	return flags, nil
}

// ParseFDInfoFlags returns the flags line of an fdinfo file's contents (octal there).
func ParseFDInfoFlags(b []byte) (uint64, error) {
	v, ok := ParseFDInfo(b)["flags"]
	if !ok {
		return 0, fmt.Errorf("no flags line in %q", b)
	}
	flags, err := strconv.ParseUint(v, 8, 64)
	if err != nil {
		return 0, fmt.Errorf("flags %q: %w", v, err)
	}
	return flags, nil
}

// FDInfo reads the fields of pid's descriptor fd from /proc/PID/fdinfo/FD (ParseFDInfo).
func FDInfo(pid int, fd string) (map[string]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/fdinfo/" + fd)
	if err != nil {
		return nil, err
	}
	return ParseFDInfo(b), nil
}

// ParseFDInfo returns an fdinfo file's "key: value" lines as key → value, both trimmed (pos,
// flags, mnt_id, ino, and what the descriptor's kind adds: a pidfd's Pid, a PTY's tty-index).
// A key that repeats (an epoll instance's tfd lines) keeps its first value.
func ParseFDInfo(b []byte) map[string]string {
	fields := make(map[string]string)
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if k = strings.TrimSpace(k); !ok || k == "" {
			continue
		}
		if _, seen := fields[k]; !seen {
			fields[k] = strings.TrimSpace(v)
		}
	}
	return fields
}

// Writable reports whether open flags allow writing (O_WRONLY or O_RDWR).
func Writable(flags uint64) bool { return flags&syscall.O_ACCMODE != syscall.O_RDONLY }
