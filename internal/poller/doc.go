// Package poller serves many readable fds with a few goroutines: each fd is registered with one
// epoll instance, EPOLLIN | EPOLLONESHOT, whose own fd is registered with the runtime poller, so
// a goroutine waiting for its events parks without holding an OS thread. The worker that wakes
// takes one ready fd and runs its ready callback with the worker's buffer; the fd stays disarmed
// until Rearm. A report a worker has already taken may still run its callback after Remove
// returns, or alongside the callback of a report that a Rearm made from outside the callback
// armed: an owner claims its fd under a lock of its own before it touches it, and ignores a
// callback it did not expect (session's readReady claims the master, armed → busy under
// Session.mu). Package session reads every
// PTY master this way (its readers) and keeps its own policy (the fair share among streaming
// masters, echo first) on its side of the callback.
//
// A Poller makes its epoll instance and its workers with the first registration (Add) and
// closes them with the last (Remove). If waiting on the instance fails, the instance is closed
// and every fd still registered gets its failed callback, outside the Poller's lock; a later Add
// makes a new instance. Options.TestHookEpollCtl and Options.TestWaitFails stand for failures
// that cannot be produced for real on demand; they are for tests only.
//
// Package poller imports golang.org/x/sys/unix and no muxterm package.
//
// # Goroutines
//
//   - Poller.loop: GOMAXPROCS workers per Poller while any fd is registered with it. Started by
//     Add when none run. Each owns one buffer of Options.BufBytes and takes one ready fd at a
//     time (epoll_wait with room for one event, so the next ready fd goes to the next worker),
//     runs its ready callback with no lock held, and waits again. They end when the instance is
//     closed: by the last Remove, or by the worker whose wait failed, which then runs the failed
//     callbacks itself.
//
// # Locks
//
// Their place in the whole order is written once, at package session's Registry.mu.
//
//   - Poller.mu: ep, epfd, regs, next (the epoll fd and the token → registration table); each
//     Registration's live flag is written under it (and read without it: Registered). Under it
//     only epoll_ctl, close and map updates run, none of which waits; no callback runs and no
//     other lock is taken under it. A caller may hold its own locks across Add, Rearm and Remove
//     (session holds Session.mu across a re-arm, so its state and the registration change
//     together).
package poller
