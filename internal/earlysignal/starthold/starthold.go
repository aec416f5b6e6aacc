// Package starthold is a test hook: imported (only by a gateway built with the tag
// muxterm_starthold), it makes an image started by an upgrade in place wait, in a package
// initializer that runs before internal/earlysignal's, until a test opens the FIFO named by
// $MUXTERM_TEST_START_HOLD for writing and writes a byte. The test sends signals meanwhile: it
// reaches the stretch of the new image's start after the Go runtime installed its signal
// handlers and before earlysignal registers for the gateway's signals (docs/operations.md,
// "Upgrade and restart", Limits).
//
// It imports only syscall, so that it is initialized before os/signal and therefore before
// earlysignal (packages are initialized in import path order among those whose dependencies
// are initialized).
package starthold

import "syscall"

func init() {
	fifo, ok := syscall.Getenv("MUXTERM_TEST_START_HOLD")
	if _, upgraded := syscall.Getenv("MUXTERM_HANDOVER_FD"); !ok || !upgraded {
		return
	}
	fd, err := syscall.Open(fifo, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	var b [1]byte
	for {
		if _, err := syscall.Read(fd, b[:]); err != syscall.EINTR {
			break
		}
	}
	syscall.Close(fd)
}
