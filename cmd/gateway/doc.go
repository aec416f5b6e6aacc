// Command gateway runs muxterm: a WebSocket gateway that multiplexes PTY sessions over one
// socket. It parses flags and MUXTERM_* environment (flags.go: config, parse, usage, the flag
// types, --help by groups), wires the packages (main.go: run, whose steps are setup.go's) into a
// server (server.go: serve, the signal loop; resume, serving again after an upgrade that could
// not exec; shutdown, in order), picks the token it serves with and keeps a generated one
// between starts in the user's state directory (tokenstate.go), writes --pid-file (pidfile.go),
// records sessions (record.go: --record and retention), marks inherited descriptors
// close-on-exec at start (cloexec.go), joins a cluster (cluster.go) and wires the upgrade in
// place, which internal/upgrade runs (SIGUSR2, the dry run, the exec, the adoption gate,
// adopting); its part of the dry run, the configuration the new image would start with, is
// handovercheck.go's. How an upgrade in place works, step by step: docs/operations.md, "How an
// upgrade in place works".
//
// # Shutdown
//
// shutdown, on SIGTERM or SIGINT: stop the reaper; stop accepting (http.Server.Shutdown);
// gateway.Gateway.Shutdown tells every socket session.closed {shutdown}, closes it with 1001,
// starts Registry.Shutdown (every session's kill, in parallel) and waits for the sockets within
// --shutdown-timeout; then wait for the idle reaper's teardowns, then
// Registry.Shutdown(context.Background()) waits for every kill to reach its end (the timeout
// bounds the wait for clients, never the escalation to KILL); then the cluster node closes and
// the cgroup tree's Close. The last log line is "stopped: every session process ended" (exit
// status 0; sockets still open after the timeout are added to that line as a note, closed by the
// exit), or "stopped: <what failed>" naming each failure (processes that survived their kill, a
// cgroup that could not be removed), with exit status 1.
//
// # Inherited descriptors
//
// On a fresh start main marks every descriptor above 2 close-on-exec (close_range(3, ~0,
// CLOSE_RANGE_CLOEXEC); one fcntl per entry of /proc/self/fd where close_range is missing, before
// Linux 5.11, or refused by a seccomp profile) before anything is spawned (cloexec.go). What the
// gateway opens itself is close-on-exec already; what it inherited from whatever started it (a
// shell's redirection, a supervisor's or CI runner's pipe) would otherwise reach every session's
// processes, which could read or write it, and a pipe a session holds keeps the one waiting for
// its end waiting. An image started by an upgrade marks them in run instead, once it has adopted
// what it was handed and before its gate lets a WebSocket in: until then "not close-on-exec" is
// how the handover's teardown (session.KillOrphans) tells what was handed over, and an image
// older than cloexec.go passed its launcher's descriptors on unmarked. A consequence: a file flag
// naming an inherited descriptor (--tokens /dev/fd/3) works at start, but the upgrade's dry run
// and the new image would not have it, so checkConfig refuses the upgrade with a message that
// says so.
//
// # Cgroups
//
// At start it opens an internal/cgroup Tree (--cgroup-root; default muxterm-sessions under the
// gateway's own cgroup); without a usable cgroup v2 subtree (no cgroup2 mount, read-only, Linux
// before 5.14) the default falls back to no cgroups with one log line (why, and the kill policy
// that applies); an explicit --cgroup-root that cannot be used stops the start.
//
// # Goroutines
//
//   - The signal loop: run's own goroutine, in server.serve, waits for stop signals and
//     SIGUSR2, and runs an upgrade (upgrade.Upgrader.Upgrade: the dry run, quiescing, the exec)
//     on itself; nothing else runs an upgrade (the Upgrader refuses a second one meanwhile). An
//     upgrade is refused (returns), fails (this image serves again: server.resume, on this
//     goroutine) or the exec replaces the image. It owns the server's srv, msrv and stopReaper.
//   - The early stop watcher (one, from main): internal/earlysignal.Stop cancels run's context;
//     it lasts until the process ends.
//   - The HTTP server's Serve (server.serveMain, from run, again from server.resume after an
//     upgrade that could not exec): accepting through a gateway.HandoverListener; it ends with
//     http.Server.Shutdown or, on an upgrade, with its listener's Stop; the signal loop ignores
//     the end of servers an upgrade shut down (serveResult).
//   - The metrics server (with --metrics-listen: server.serveMetrics, from run's step
//     serveMetricsAndPprof, again from server.resume after an upgrade that could not exec) and
//     the pprof server (with --pprof-listen, loopback only, from servePprof): /metrics and
//     /debug/pprof/ on their own addresses, until run returns (Close) or, for the metrics
//     server, an upgrade quiesces (Close).
//   - Retention of recordings (one, with --record, from run's step keepRecordings after the
//     adoption: keepPruned): Registry.PruneRecordings every hour, until run returns.
//   - The embedded NATS server's shutdown (one, when the cluster closes): the wait for it is
//     bounded (embeddedShutdownWait); a server that takes longer is left to the exit.
package main
