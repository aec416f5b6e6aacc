package main

import "golang.org/x/sys/unix"

// flushInput discards what the terminal fd has received and nobody read: a played recording's
// queries answered by the terminal, which would otherwise be typed into the shell after play.
func flushInput(fd int) { _ = unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIFLUSH) }
