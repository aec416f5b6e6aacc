// Package earlysignal catches the gateway's process signals from its first package
// initializer on. After an upgrade in place (cmd/gateway/upgrade.go) the new image holds every
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
)

func init() {
	signal.Notify(Upgrade, syscall.SIGUSR2)
	signal.Notify(Stop, syscall.SIGTERM, os.Interrupt)
}
