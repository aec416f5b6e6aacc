// Package reaper closes sessions nobody watches any more: idle beyond a grace period with no
// viewer and no lease, or whose process has exited. reaper imports session and otel only.
//
// Sweep takes now, selects victims from Registry.Snapshot with ReapReason (exited; or no viewer,
// no lease and unwatched longer than the grace), then for each calls Registry.Claim, which under
// the registry's and the session's locks re-checks that the registry still holds that session and
// the whole predicate, marks the kill point and removes the entry. Claimed sessions are torn down
// in parallel with no lock held. An attach either happened before the claim (the claim sees a
// viewer and refuses) or after it (the attach fails with session_closed), so a client that
// reattaches in between always wins.
//
// # Goroutines
//
//   - Reaper.loop: one per reaper, started by Start (idempotent): the sweep ticker; it ends when
//     its context ends, and Done is closed once its teardowns have finished.
//   - The teardowns of a sweep: one per claimed session; Sweep waits for them.
//
// Reaper.mu guards done (the channel closed when the loop ends; nil before Start).
package reaper
