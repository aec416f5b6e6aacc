// Package earlysignal catches the gateway's process signals from its first package
// initializer on. After an upgrade in place (internal/upgrade) the new image holds every
// session from its first instruction; a SIGTERM, SIGINT or SIGUSR2 whose default action ran
// before the gateway's main package had registered for it would end the process and orphan every
// session. This package imports only os/signal, so it is initialized before the heavy
// dependencies; what it catches waits in its channels until main reads them.
package earlysignal

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

var (
	// Upgrade receives SIGUSR2.
	Upgrade = make(chan os.Signal, 1)
	// Stop receives SIGTERM and SIGINT.
	Stop = make(chan os.Signal, 1)
	// Started is when this package was initialized: close to the process's (or the new
	// image's) start, for the upgrade's timeline.
	Started = time.Now()

	// HangupIgnored says the process started with SIGHUP ignored (nohup). It goes on ignoring
	// it, but through a handler (hangup, which nothing reads: a full channel drops the signal),
	// because an ignored signal stays ignored in every program the process starts, and a
	// session's shell must not be born deaf to its kill's first signal; a handler is reset to
	// the default action by the exec. An upgrade in place ignores SIGHUP across its exec when
	// this is set, so the new image finds it ignored too.
	HangupIgnored = signal.Ignored(syscall.SIGHUP)
	hangup        = make(chan os.Signal, 1)
)

func init() {
	signal.Notify(Upgrade, syscall.SIGUSR2)
	signal.Notify(Stop, syscall.SIGTERM, os.Interrupt)
	if HangupIgnored {
		signal.Notify(hangup, syscall.SIGHUP)
	}
}
