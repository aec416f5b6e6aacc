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
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			if err != nil {
				return 0, fmt.Errorf("flags %q: %w", strings.TrimSpace(v), err)
			}
			return flags, nil
		}
	}
	return 0, fmt.Errorf("no flags line in %q", b)
}

// Writable reports whether open flags allow writing (O_WRONLY or O_RDWR).
func Writable(flags uint64) bool { return flags&syscall.O_ACCMODE != syscall.O_RDONLY }
