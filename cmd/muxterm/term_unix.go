//go:build !windows

package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

// stopSignals end attach (detaching) and exec (killing the session).
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// watchSize sends fd's terminal size on out whenever SIGWINCH says it changed, until ctx ends.
// out has capacity 1 and holds only the latest size.
func watchSize(ctx context.Context, fd int, out chan [2]int) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		defer signal.Stop(winch)
		for {
			select {
			case <-winch:
				if w, h, err := term.GetSize(fd); err == nil {
					sendLatest(out, [2]int{w, h})
				}
			case <-ctx.Done():
				return
			}
		}
	}()
}

// prepareOutput readies stdout for escape sequences; nothing to do outside Windows.
func prepareOutput(*os.File) (restore func()) { return func() {} }

// isConnRefused reports a dial refused because nothing listens.
func isConnRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// openNoBlock opens path for reading without waiting: a FIFO opens at once (and is then refused
// by its mode) instead of waiting for a writer.
func openNoBlock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
