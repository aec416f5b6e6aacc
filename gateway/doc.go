// Package gateway is muxterm's HTTP face: an Echo app that serves every route under --base-path
// (paths.go), authenticates (auth.go: bearer token or the cookie muxterm_token_<listen port>, one
// per gateway; principals from --token and --tokens, tokens.go, read-only viewers, admins for
// /metrics; share links, shares.go: in memory, a timer per link, the cancels of the sockets open
// with it, which a revocation or expiry calls with mux.ErrRevoked outside the store's lock),
// checks Origin and Host (origin.go), upgrades GET /ws (that exact path only) to a WebSocket and
// hands it to a mux connection, bounds sockets per principal, serves the embedded frontend,
// /auth, /auth/check, /healthz and /readyz, and drains every socket on shutdown and on an
// upgrade in place (restart.go: Restart, Resume and HandoverListener). It is the only package
// that imports Echo.
// It speaks the protocol through mux, and imports proto only for the HTTP side of it: the
// subprotocol it offers and requires at the upgrade, and the relay headers it believes only from
// the cluster token.
//
// conns.go is the connection guard: pending connections (not yet upgraded) bounded in all and per
// address, and a reserve of descriptors counted from /proc/self/fd at each accept; when a bound
// or the reserve is reached it evicts idle pending connections oldest first, and when accept
// fails with EMFILE or ENFILE it evicts and accepts again at once.
//
// # Shutdown
//
// Shutdown cancels every socket's context with mux.ErrShutdown (each writer sends session.closed
// {reason: shutdown} and closes with 1001), starts the registry's Shutdown (every session's kill,
// in parallel) and waits for the sockets within its context. Sockets still open at the deadline
// are ErrSocketsOpen: a client that does not read keeps its close frame from being written,
// nothing of a session is lost, and cmd/gateway logs it in its last line and exits 0. The kills
// are not bounded by the context: when it ends first, Shutdown returns nil and the caller waits
// for the kills with a second Registry.Shutdown, whose error (processes that survived their kill)
// is the failure.
//
// Restart cancels every socket's context with mux.ErrRestart (each writer sends gateway.restart
// and closes with 1012) and waits for the sockets within its context; Resume ends the draining
// and hands new sockets a new base context and a new group.
//
// # Goroutines
//
//   - Shutdown's two waits (per call): one runs Registry.Shutdown (its result on a buffered
//     channel), one waits for every socket's handler (conns.Wait()); both outlive a call whose
//     context ended first.
//   - Restart's wait (per call): waits for the group of the sockets Restart closed; it outlives a
//     call whose context ended first, and Resume gives later sockets a new group, so no Add races
//     it.
//
// # Locks
//
// Nothing is taken under any of these.
//
//   - Gateway.drainMu: draining (set under it, read lock-free), baseCtx and cancelBase (the
//     sockets' parent context: enter counts a socket in conns and hands it out, Shutdown and
//     Restart cancel it, Resume replaces it), conns (the group of sockets being served: enter
//     adds a socket to it and returns it for the socket's Done; Shutdown and Restart wait on the
//     group they read; Resume replaces it, so a wait that a timed-out Restart left pending never
//     sees an Add).
//   - socketLimit.mu: n (principal → sockets held).
//   - ConnGuard.mu: pending (connections not yet upgraded, with when each was accepted and went
//     idle), perAddr, spare (the descriptor held back for an accept at EMFILE), lastWarn; evicted
//     connections are closed after it is released (a close waits for the connection's reader to
//     let go of the descriptor).
//   - HandoverListener.mu: stopping, accepting (Accept calls in flight), open (connections
//     accepted and not closed), changed (what Drain waits on).
package gateway
