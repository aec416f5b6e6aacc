// Package child waits for muxterm's child processes and reaps the orphans re-parented to it.
//
// A Waiter reaps children through their pidfds (wait4 once the pidfd is readable) with one
// goroutine parked on one epoll instance, whose fd is registered with the runtime poller, so no
// goroutine holds an OS thread while a child runs. A child whose pidfd is readable but which
// wait4 cannot reap yet (a tracer such as strace holds its zombie), or one the Waiter could not
// take (Watch), is waited for by blockingWait, which holds a thread. Detach takes children out
// of a Waiter, their pidfds still open (an upgrade in place hands them to the next image).
//
// AdoptOrphans (called by cmd/gateway's main on a fresh start, through package session, not by
// its run, so tests that call run keep their own children; an image started by an upgrade calls
// it in run once the adopted children are registered) sets PR_SET_CHILD_SUBREAPER: a session's
// descendant whose parent dies is re-parented to the gateway instead of PID 1 (which, in a
// container, may never reap it). The orphan reaper reaps them without ever taking an exit status
// someone else waits for: a Waiter reaps session children, and StartChild callers through
// cmd.Wait. Every such child is started (Start, StartChild) under orphanReaper.gate held shared
// and its pid is put in own before the gate is released (a child this process did not start, an
// adopted session's, is put there by Adopt); the reaper, woken by SIGCHLD, holds the gate
// exclusively and loops: waitid(P_ALL, WEXITED|WNOHANG|WNOWAIT|__WALL) peeks at one zombie
// without reaping it; if it is in own it stops (waitid shows one zombie at a time; that child's
// waiter reaps it, removes it from own (Reaped) and kicks the reaper, which then sees past it);
// otherwise it reaps that pid (wait4(pid, WNOHANG)) and peeks again. A pid leaves own only after
// its reap, so a recycled pid is at worst reaped one round late, never stolen. Any code in the
// gateway that starts a child and waits for it must use StartChild.
//
// Every start (Start, StartWith, StartChild) also holds starts, a mutex, from before the
// descriptors meant for its child alone exist (StartWith's ends: a session's terminal slave or
// pipes) until exec.Cmd.Start has returned, that is until the child's exec closed what it
// inherited, and our copies of those ends are closed: no child is forked while another child's
// ends are open in the gateway, so no process but the one they were made for ever holds them.
//
// Package child imports golang.org/x/sys/unix and no muxterm package.
//
// # Goroutines
//
//   - Waiter.loop: one per Waiter while any of its children is unreaped (package session's
//     process-wide one serves every registry). Started by Watch when none runs; owns the epoll
//     instance that holds every unreaped child's pidfd and runs wait4(WNOHANG) on each pidfd it
//     reports; ends when the last child is reaped or detached (it closes the epoll fd; the next
//     Watch starts a new one).
//   - The reaped hand-off: one per child reaped by Waiter.loop, short: the callback Watch was
//     given, on a goroutine of its own (it takes its session's locks; the waiter never waits for
//     them).
//   - blockingWait: the fallback, one per child it takes: from Watch if the Waiter cannot take
//     the pidfd, or from Waiter.loop for a child whose pidfd is readable but which wait4 cannot
//     reap yet (it would keep the level-triggered epoll busy). A blocking wait4 (it holds a
//     thread) until the child is reaped; then it runs the callback.
//   - The orphan reaper: one per process, started by AdoptOrphans (in the gateway binary only);
//     SIGCHLD (os/signal) and orphans.kick wake it; it runs until the process exits.
//
// # Locks
//
// Their place in the whole order is written once, at package session's Registry.mu.
//
//   - Waiter.mu: ep, waiting (the epoll fd and the pidfd → child table); under it only
//     epoll_ctl, close, wait4(WNOHANG) and map updates, never a blocking wait or a caller's lock.
//   - starts: held by every start of a child (Start, StartWith, StartChild) from before its own
//     descriptors are opened until its exec closed what it inherited and our copies are closed.
//     A deliberate exception to "no lock across a blocking call": it is held across the fork
//     and the child's exec, which is what it orders. Taken with no other lock held; only
//     orphanReaper.gate is taken under it.
//   - orphanReaper.gate (RWMutex): the order of "a child of ours exists" and "the orphan reaper
//     looks at zombies": held shared by every start of a child we wait for ourselves (Start,
//     StartWith, StartChild, Adopt) from before the fork until its pid is in own, exclusively by
//     the orphan reaper while it peeks and reaps; taken with no other lock held but starts.
//   - orphanReaper.mu: own (pids of our own children not reaped yet: added under gate, removed by
//     their waiter after the reap); taken under Waiter.mu and under gate; nothing is taken under
//     it.
package child
