package testutil

import (
	"os"
	"os/signal"
	"syscall"
)

// A test binary run with SIGHUP or SIGINT ignored (under nohup, or in the background of a script)
// would start every session's shell with them ignored too: an ignored signal stays ignored in
// every program a process starts, so a kill's HUP or a typed Ctrl-C would do nothing there. As
// the gateway does (internal/earlysignal), the test binary goes on ignoring them through a
// handler whose signals nobody reads, which the exec resets to the default action in a child.
// Only these two: Go keeps an inherited "ignore" for SIGHUP and SIGINT alone, and installs its
// own handler for the others, which the exec resets likewise.
func init() {
	for _, sig := range []os.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if signal.Ignored(sig) {
			signal.Notify(make(chan os.Signal, 1), sig)
		}
	}
}
