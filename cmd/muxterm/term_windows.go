//go:build windows

package main

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/windows"
	"golang.org/x/term"
)

// stopSignals end attach (detaching) and exec (killing the session).
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// sizePoll is how often the console size is read: Windows has no SIGWINCH.
const sizePoll = 250 * time.Millisecond

// watchSize sends fd's console size on out whenever it changes, until ctx ends. out has
// capacity 1 and holds only the latest size.
func watchSize(ctx context.Context, fd int, out chan [2]int) {
	go func() {
		w0, h0, _ := term.GetSize(fd)
		t := time.NewTicker(sizePoll)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if w, h, err := term.GetSize(fd); err == nil && (w != w0 || h != h0) {
					w0, h0 = w, h
					sendLatest(out, [2]int{w, h})
				}
			case <-ctx.Done():
				return
			}
		}
	}()
}

// prepareOutput turns on VT processing on the console, so escape sequences are interpreted.
func prepareOutput(f *os.File) (restore func()) {
	h := windows.Handle(f.Fd())
	var mode uint32
	if windows.GetConsoleMode(h, &mode) != nil {
		return func() {}
	}
	if windows.SetConsoleMode(h, mode|windows.ENABLE_VIRTUAL_TERMINAL_PROCESSING) != nil {
		return func() {}
	}
	return func() { _ = windows.SetConsoleMode(h, mode) }
}

// isConnRefused reports a dial refused because nothing listens.
func isConnRefused(err error) bool {
	var errno syscall.Errno
	return errors.As(err, &errno) && errno == windows.WSAECONNREFUSED
}

// openNoBlock opens path for reading (a named pipe is refused by its mode after the open).
func openNoBlock(path string) (*os.File, error) { return os.Open(path) }
