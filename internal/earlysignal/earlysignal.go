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
)

var (
	// Upgrade receives SIGUSR2.
	Upgrade = make(chan os.Signal, 1)
	// Stop receives SIGTERM and SIGINT.
	Stop = make(chan os.Signal, 1)
)

func init() {
	signal.Notify(Upgrade, syscall.SIGUSR2)
	signal.Notify(Stop, syscall.SIGTERM, os.Interrupt)
}
