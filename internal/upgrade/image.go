package upgrade

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The image an upgrade checks is the image it executes (docs/operations.md, "How an
// upgrade in place works"). The binary at the upgrade's path is copied into a sealed memfd
// before the dry run; the dry run and the exec both run that copy. A file moved onto the path,
// or written into it, after the copy cannot reach the exec: the next image is byte for byte the
// one that answered the dry run.

// imageName names the memfd: an upgraded gateway's /proc/self/exe reads
// "/memfd:muxterm-gateway (deleted)".
const imageName = "muxterm-gateway"

// errImageChanged: the file at the path changed size while it was copied (written in place
// rather than renamed onto the path).
var errImageChanged = errors.New("the binary changed while it was read; " +
	"replace it by renaming onto the path")

// holdImage copies the executable file at path into a new memfd (close-on-exec), sealed
// against any change, and returns it at offset 0. The caller closes it.
func holdImage(path string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("binary: %w", err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return nil, fmt.Errorf("binary: %w", err)
	}
	// What an exec of the path would refuse, the copy (a memfd is executable) must refuse too.
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("binary %s: not a regular file", path)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("binary %s: not executable", path)
	}
	if err := unix.Access(path, unix.X_OK); err != nil { // execute permission, a noexec mount
		return nil, fmt.Errorf("binary %s: not executable: %w", path, err)
	}
	// MFD_EXEC: executable even where vm.memfd_noexec makes memfds non-executable by default
	// (since Linux 6.3; an older kernel refuses the flag, and its memfds are executable).
	fd, err := unix.MemfdCreate(imageName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.MemfdCreate(imageName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("hold the binary: memfd_create: %w", err)
	}
	img := os.NewFile(uintptr(fd), "memfd:"+imageName)
	n, err := io.Copy(img, src)
	if err == nil && n != fi.Size() {
		err = errImageChanged
	}
	if err == nil {
		// Sealed: nothing, not even this process, can change the copy from now on.
		_, err = unix.FcntlInt(img.Fd(), unix.F_ADD_SEALS,
			unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL)
	}
	if err == nil {
		_, err = img.Seek(0, io.SeekStart)
	}
	if err != nil {
		img.Close()
		return nil, fmt.Errorf("hold the binary %s: %w", path, err)
	}
	return img, nil
}

// imagePath is the path that executes img in this process (/proc/self/fd/N; the kernel opens
// it before the exec closes img).
func imagePath(img *os.File) string {
	return "/proc/self/fd/" + strconv.Itoa(int(img.Fd()))
}

// ownImage opens this process's executable (close-on-exec), for the next image to close once
// it has adopted the sessions (State.Image): when the last reference to a memfd goes,
// its pages are freed, and the exec drops the old image's at the end of the exec, a few
// milliseconds of freeing within the window in which no stop signal is caught. 0 when it
// cannot be opened.
func ownImage() int {
	fd, err := unix.Open("/proc/self/exe", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil || fd <= 0 {
		return 0
	}
	return fd
}

// ownComm is this process's name (/proc/self/comm), which an upgrade hands on: executed from a
// memfd, the new image would otherwise be named after the descriptor's number.
func ownComm() string {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

// restoreComm names every thread of this process comm (what ps, pidof and top show), as the
// image before the upgrade was named; threads started later inherit it. Nothing when comm is "".
func restoreComm(comm string) {
	if comm == "" {
		return
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	for _, t := range tasks {
		_ = os.WriteFile("/proc/self/task/"+t.Name()+"/comm", []byte(comm), 0)
	}
}
