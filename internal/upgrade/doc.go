// Package upgrade is the gateway's upgrade in place: SIGUSR2 re-executes the gateway binary in
// the same process, handing every session, the listening sockets and a generated token over to
// the new image. How it works, step by step: docs/operations.md, "How an upgrade in place
// works". The sessions' side (quiescing, the state's encoding, adopting) is session's
// (session/handover.go, handover_codec.go, adopt.go); the sockets' side (Restart, Resume, the
// listeners' descriptors) is gateway's (restart.go). cmd/gateway wires it (run; its server
// serves again through Options.Resume) and decides what follows an upgrade's outcome.
//
// The old image's side (upgrade.go): Signals (SIGUSR2, caught by internal/earlysignal), the
// Upgrader and its Upgrade (the dry run of HandoverCheck, quiescing, the exec, or serving again
// through Options.Resume when it cannot exec: ErrFailed, else ErrAborted), Relisten; the
// sealed copy of the binary that the dry run and the exec both run (image.go); the stop signals
// ignored across the exec (sigaction.go).
//
// The new image's side (adopt.go): Inherited and Take read the state (State) the old image
// handed over, ListenOrInherit the listeners, State.Gate serves behind the adoption gate until
// Adopt has registered the sessions and State.OpenGate lets WebSocket upgrades and /readyz
// through; State.LogTimeline logs where the upgrade's time went; State.TearDownUnlessAdopted
// ends the handed sessions of an image that could not start.
//
// Test builds set knobs with -ldflags "-X github.com/muxterm/muxterm/internal/upgrade.NAME=VALUE"
// (stateVersion, breakAdoption, holdAfterCheck, breakExec, holdAdoption; docs/operations.md),
// and the build tag muxterm_starthold makes an upgraded image wait at its start
// (starthold.go).
//
// # Goroutines
//
// None of its own. Upgrader.Upgrade runs on the caller's goroutine (cmd/gateway's signal loop),
// and Options.Resume with it; a second Upgrade meanwhile is refused (Upgrader.busy). The dry
// run's child is waited for by that goroutine. A State belongs to one goroutine (the Upgrade
// that builds it, the new image's run that takes it); only its adoption gate's channel is
// shared, with the HTTP handlers that wait on it (State's doc).
package upgrade
