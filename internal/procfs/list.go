package procfs

import (
	"os"
	"strconv"
)

// Pids lists the processes in /proc (this one included), in directory order. It opens one
// descriptor while it reads.
func Pids() ([]int, error) {
	names, err := readNames("/proc")
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(names))
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// FDs lists the names of pid's open descriptors (the entries of /proc/PID/fd, whose links
// name the open files). A process that is gone gives an error that satisfies
// errors.Is(err, fs.ErrNotExist); another user's, one that satisfies errors.Is(err,
// fs.ErrPermission).
func FDs(pid int) ([]string, error) {
	return readNames("/proc/" + strconv.Itoa(pid) + "/fd")
}

// readNames lists dir's entry names with one descriptor, closed before it returns. Its errors
// are *fs.PathError, which name dir.
func readNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}
