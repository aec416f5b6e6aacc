// Package session owns muxterm's PTY sessions: a child process on a pseudo-terminal, the readers
// shared by every session (a few goroutines on one epoll instance) that read its output into a
// bounded scrollback ring addressed by 64-bit byte offsets, one waiter (internal/child) shared by
// every session that reaps the children, the viewers that pull from the ring, the resume holds a lost viewer
// leaves behind, the terminal model of each session's screen, and a kill that never waits for the
// reader. Registry holds the sessions by id and provides the atomic attach and the reaper's
// claim, and the hand-over of every session to the next image in an upgrade in place.
//
// Package session knows nothing of sockets or protocols. It imports creack/pty, os/exec,
// golang.org/x/sys/unix, otel and, of muxterm's internal packages, cgroup, child, poller, procfs,
// record and vt.
//
// # Files
//
// One concern per file; the Session type's methods are spread over the files of their concern.
//
//   - session.go: the Session type and its fields' guards, its accessors (ID, Exit, State, Info,
//     ...), State, Reason, ExitStatus, Info, Event, and reaped (the waiter's hand-off of the
//     exit).
//   - options.go: the errors (ErrSessionClosed, ClosedError, ...), the limits, Options and its
//     defaults (withDefaults, batchSize, KeptBehind), Spec.
//   - spawn.go: spawn (on a PTY, or on pipes with Spec.Pipes), children (the process-wide
//     child.Waiter), openPTY (the non-blocking master),
//     the child's directory and environment
//     (checkDir, homeDir, childEnv, CheckEnvPattern), sizes (checkSize, setSize, Resize), Signal.
//   - read.go: a reader's turn at a master (readState, readReady, readBatch), re-arming it after
//     backpressure (wakeReaderLocked), the end of reading (failReading, endReading, closePTY,
//     finishOutput), ingest.
//   - readers.go: readers, the masters' registrations with an internal/poller Poller (its epoll
//     instance and workers) and the fair share's place in a turn's end (add, rearm, remove,
//     settle); defaultReaders, the process-wide one.
//   - fair.go: the readers' fair share among streaming masters (below).
//   - echofirst.go: echo first (below): echoGroup, one per owner; keystroke, echoed, holding,
//     hold, release, unhold, holdReading, Held, DefaultEchoHold.
//   - hold.go: backpressure (minLagLocked, maybeResumeLocked), the resume holds (holdLocked,
//     takeOverHoldLocked, dropHoldsLocked), waking viewers, the exit settle (armSettleLocked,
//     settleExit).
//   - input.go: input to the PTY (or a pipe session's stdin: inputFile): Write, writeNow,
//     inputLoop.
//   - pipe.go: a pipe session (Spec.Pipes, below): Stream (Stdout, Stderr), pipeIO (our ends of
//     the three pipes, their pipe:[inode] names for the kill's scan of holders, the readers'
//     cond), openPipes, the two readers (readPipe), CloseStdin, endStdin.
//   - ring.go: the scrollback ring addressed by 64-bit offsets; a pipe session's ring
//     (newTaggedRing) keeps each byte's stream beside it (tags), and readStream stops where the
//     stream changes.
//   - viewer.go: Viewer, a reader of the ring at its own offset, after the paint of the screen it
//     may start with (Subscribe, Read, ReadStream: one stream's bytes at a time, Close,
//     CloseHolding).
//   - screen.go: the session's screen (below): screen, screenFeeder, keepForScreenLocked,
//     noteSizeLocked, Capture, the paint of an attach (paintLocked), its hand-over (handScreen,
//     adoptScreen).
//   - record.go: the session's recording (internal/record): started before the reader
//     (startRecording), fed by ingest, sizes, input and markers, ended once exit and output are
//     both known or the teardown returns (endRecording), handed over and continued in the same
//     file; Registry.Recordings, ReadRecording, PruneRecordings, OpenRecordingFile.
//   - size.go: the window-size policy over the read-write viewers' sizes (WindowSize).
//   - kill.go: teardown: the kill point, the escalation, the PTY's holders, the result
//     (KillResult).
//   - procscan.go: the /proc scans a kill makes (ptyHolders, holder.still, sessionGroups,
//     zombie).
//   - cgroup.go: a session's cgroup (newCgroup, removeCgroup, killCgroup).
//   - fdreserve.go: the kill path's descriptor reserve (withFDs) and its /proc listings.
//   - orphans.go: AdoptOrphans, StartChild and OrphansReaped, the gateway's doors to
//     internal/child's orphan reaper.
//   - registry.go: Registry: ids, owners, open, attach, claim, lease, kill, shutdown, the
//     tombstones.
//   - handover.go, adopt.go, handover_codec.go: the upgrade in place: quiescing, resuming, the
//     teardowns of what was not handed; adopting; the state's encoding.
//
// # Reading
//
// No goroutine holds an OS thread while it waits, and no goroutine waits for one session's output:
// every master is non-blocking (creack/pty's Open returns a blocking master; openPTY duplicates it,
// sets O_NONBLOCK and wraps it with os.NewFile) and registered with the readers' poller
// (internal/poller), whose epoll fd is itself registered with the runtime poller; the workers park
// on it, one in the poller and the others on its read lock, and the one that wakes takes one ready
// master (epoll_wait with room for one event, so the next ready master goes to the next worker).
// Every master is registered EPOLLIN|EPOLLONESHOT, so a master is handed to one worker at a time; a
// worker claims a reported master by moving its readState from armed to busy, so a stale report is
// dropped. The child waiter parks the same way on its own epoll fd. Resizes use
// SyscallConn().Control, never Fd(), which would turn the master blocking again.
//
// Both are owned by the Options a Registry was made with (Options.readers, Options.children,
// unexported): they default to the process-wide defaultReaders and children (withDefaults), so in
// production every registry, and a handover's resume or adoption, shares one epoll instance with
// its workers and one waiter; a test that sets their test hooks, holds a worker or watches them
// go idle gives its options instances of its own (ownPollers) and runs in parallel with the
// others. A session at rest costs no goroutine and two fds (the master and its child's pidfd;
// os.Process's own pidfd is released right after start).
//
// A worker's turn (Session.readReady) reads in batches (Session.readBatch) of up to
// Options.batchSize (32 KiB by default), appending each to the ring and waking the viewers once
// per batch, until the master would block, backpressure holds, another session of the same owner
// awaits an echo, or maxBatchesPerTurn (4) batches were read. It then counts the turn in the fair
// share and re-arms the master (readers.settle; Session.inTurn is set from the claim to the
// count, so the fair share never takes a master in a turn for idle), or leaves it disarmed while
// backpressure holds, while it is held for an echo (in its owner's echoGroup.held; a master taken
// while held is parked before it is read) or while the fair share holds it, or ends the session's
// reading (EIO when the last slave fd closes): unregister, close the master, close readerDone.
// Only endReading closes a master, after unregistering it: a master closed behind the readers'
// back would silently leave their epoll instance, and its reading would never end.
//
// Fair share (fair.go): a streaming master more than 32 KiB (less than one turn) ahead of the
// slowest streaming one is held (not re-armed) until it is not, for at most 20 ms; a streaming
// master that goes idle (no turn for 5 ms, none under way, its master not readable: its program
// stopped producing, e.g. after a burst) stops counting, checked before a hold and every 5 ms
// while one lasts, so it holds nobody. A master under backpressure, held for its owner's echo or
// past its kill point never counts. A held master typed into is re-armed at once (unless
// backpressure holds it), level with the slowest, and its next turn is not held, at most once
// per 20 ms while it counts: an echo that comes by that turn does not wait for the hold; a later
// one may (fairShare.settle, dropIdleLocked, holdExpired, releaseHeld, letGo).
//
// Echo first (echofirst.go): a keystroke (Session.Write of at most 64 bytes) marks its session
// awaitingEcho, makes it its group's last and extends the group's holdUntil to Options.EchoHold
// from now (default 2 ms, negative: off; --echo-hold, 0: off). Until then, or until a viewer
// reads any output of the session that took the group's latest keystroke (Viewer.Read of n > 0;
// the reader's ingest when no viewer is attached; the end of its reading), which sets holdUntil
// to now, the readers hold the master of every other session of the same owner (the principal
// that opened it) that awaits no echo of its own and whose program has not exited: a worker that
// takes one parks it (readParked, listed in its echoGroup.held) instead of reading it, and a
// worker in a turn stops at the next batch. An earlier keystroke without an echo (a key the
// program takes silently) does not prolong the hold past the latest one's echo. The echo that
// ends the hold, or a timer armed at the holdUntil of the first hold, re-arms the held masters
// (those not under backpressure); a session typed into while held is taken out and re-armed at
// once (unless backpressure holds it); a released master reads a batch before it can be held
// again. A master held for an echo counts as light in the fair share, so another owner's
// streams never wait for it; after the kill point or the program's exit no hold applies (reaped
// re-arms a held master), so the tail is read before the exit is reported. Meanwhile
// Session.Held makes a socket's writer send the held sessions' output in frames of at most
// 4 KiB (mux.heldFrame), so an echo waits behind little. A
// stream loses at most EchoHold per keystroke of its owner's; while nobody types nothing is held
// and the cost is an atomic load per read batch and per output frame. The hold is per owner,
// never process-wide: one principal who types cannot slow another principal's streams. Each
// session points to its owner's echoGroup (the latest keystroke's session, the hold's end, the
// held masters and their timer), which the Registry makes on the owner's first Open or adoption
// (echoGroupLocked, under Registry.mu) and keeps as long as it lives: a few words per principal
// that ever opened a session there (the principals are the configured tokens), and a session
// never outlives the group it points to or changes group. A session spawned outside a registry
// (tests) has a group of its own unless its test gives it one.
//
// # Ring, viewers and backpressure
//
//   - Output is never pushed to viewers. The reader appends to the ring and calls each viewer's
//     wake (non-blocking); the socket's writer pulls from the viewer by offset.
//   - Every byte has a 64-bit offset. A viewer that falls behind the ring's start gets the exact
//     number of bytes lost (a gap) and continues.
//   - Read-only principals attach passive viewers: they never count for backpressure, so a
//     stalled read-only viewer falls behind and gets a gap instead of pausing the owner's
//     program.
//   - Backpressure: while at least one read-write viewer or resume hold counts and every one of
//     them is more than HighWaterBytes (default half the ring) behind, the reader stops reading
//     the PTY; it resumes below LowWaterBytes. With nothing counting, the ring overwrites its
//     oldest bytes.
//   - Resume hold: when a socket ends, mux.Serve closes each binding's viewer with
//     Viewer.CloseHolding(bytes in flight). For ResumeHold (--resume-hold) the session keeps a
//     hold at that offset (where the client will resume) in Session.holds, which minLagLocked
//     counts like a viewer while the ring still has its offset, so backpressure keeps the bytes
//     the client will ask for until it reattaches and reads on. Each hold has its own timer,
//     which removes it; a read-write attach whose offset lies in a hold's [from, upTo] (what the
//     lost client acknowledged, what it had been sent) takes that one hold over (the narrowest;
//     removes it); an attach that fails to reply, or whose socket ends before it is published,
//     leaves a hold at its own offset, a new hold prunes those the ring has overwritten, and
//     closing the session drops them all. Viewer.Close (session.detach) holds nothing.
//   - Replay boundary: an attach's live offset is AttachInfo.End, the ring's end read under
//     Session.mu in the same critical section that subscribes the viewer, so every byte below it
//     was ingested before the attach and every byte from it on after (ingest appends under the
//     same lock). A painted attach takes effect at its paint, which catches up at least to that
//     end: End is the paint's offset (Registry.AttachWith), and the bytes up to it are in the
//     paint.
//   - A viewer reports the exit once nothing is pending and the reader reached the end of output,
//     or exitSettle (50 ms) after the exit when a descendant keeps the PTY open.
//
// # Window size
//
// size.go: each read-write Viewer has its own size (the opener's from Spec, Viewer.Resize for an
// attach with a size or a resize) and a used stamp from Session.sizeSeq (bumped when it declares
// a size, and when it types under the latest policy: Viewer.Write). applySize computes the
// policy's size over them (wantSizeLocked, under Session.mu), then, if it differs from the
// applied one, does the TIOCSWINSZ ioctl with only Session.resizeMu held (and the screen.mu of a
// painted attach that declares its size), stores the size, bumps Session.sizeGen and wakes every
// viewer. It runs after a viewer declares a size, types (when that makes it the latest) or
// leaves (Viewer.Close, CloseHolding: after Session.mu is released).
// Each computation is fresh under resizeMu, so concurrent changes end with the size of the final
// state. A socket's writer compares sizeGen (an atomic) with the generation its channel last
// reported.
//
// # Pipe sessions
//
// A pipe session's child (Spec.Pipes; protocol.md §3 "Pipe sessions") has pipes for stdin,
// stdout and stderr (os.Pipe: our ends non-blocking, served by the runtime poller; the child's
// made blocking by the exec), leads its own session and process group without a controlling
// terminal, and runs in its own cgroup, through the same spawn, waiter (pidfd), kill and reaper
// as a PTY session. Two goroutines, not the readers' epoll workers, read stdout and stderr and
// ingestStream each chunk with its stream into one ring: one offset space, each byte tagged
// (ring.tags), so a resume from an offset is byte-exact for both streams, and credit, gaps,
// backpressure (a reader waits on pipeIO.cond while Session.paused; wakeReaderLocked broadcasts)
// and resume holds are unchanged. The socket's writer reads with Viewer.ReadStream and sends
// stderr's bytes in stderr frames (type 4) to a socket whose client declared capabilities.pipes,
// in output frames to any other. session.closeStdin (Session.CloseStdin, under Session.inMu)
// closes the stdin pipe now, or after the queued input (inputLoop), and refuses later input
// (ErrStdinClosed). A kill finds escapees by the pipe:[inode] of stdout and stderr in
// /proc/PID/fd (as it finds a PTY's holders by the slave's path); closePTY closes both read ends
// once both readers ended. No screen (no paint; Capture refuses with ErrNoPipesScreen), no
// echo-first keystrokes, no fair share (they are about terminals' readers), and no handover:
// Handover ends the pipe sessions first (endPipeSessions, reason shutdown).
//
// # Screens
//
// screen.go: the reader only appends to the ring. The model (an internal/vt Terminal) reads the
// ring behind it by offset, like a viewer that never holds the reader back: once it lags 64 KiB
// (a quarter of a smaller ring) the session is queued for the feeder, a goroutine that runs while
// some session waits, catches each up by at most 1 MiB a turn and ends when its queue is empty,
// so a keystroke's echo costs the model nothing on its path. Bytes the ring is about to drop
// before the model read them are copied into the screen's backlog in ingest (a copy under
// Session.mu, no parsing; at most 4 MiB, beyond which the oldest are counted lost): the model
// falls behind, it does not lose. A size applied to the PTY is queued with the ring's end
// (Session.screenSizes) and applied after exactly the bytes read before it. An attach that paints
// (Registry.AttachWith), Capture and a handover catch the model up themselves, under screen.mu,
// within 50 ms (then the ring's bytes from where it got follow the paint), paint it
// (AppendSnapshot + AppendPending), and subscribe the viewer at the paint's offset with the paint
// as its first bytes (Viewer.paint, read before the ring, counted in Pending); if the ring
// dropped that offset meanwhile they paint again.
//
// # State machine
//
//	running ──kill / claim / shutdown──▶ closing(reason) ──teardown done──▶ closed
//	   │
//	   └─ the process may exit while running: exited is closed, the session stays attachable
//	      (viewers get the exit) until the reaper claims it (reason exited) or a kill.
//
// States only move forward. beginCloseLocked is the kill point, taken under Session.mu: for a
// kill, an idle reap or a shutdown it sets dropOutput and outputFinal together (a reap of a
// session whose process exited does not: the reader still drains what the program printed before
// it exited), so a chunk the reader read before the kill but ingests after it is dropped (the
// ingest checks dropOutput under the same lock), and the final offset is fixed. Kill, claim and
// shutdown all go through it; the first decides, the others wait for its result. The session is
// removed from the registry at that point (compare-and-delete) and leaves a tombstone, so an
// attach by id fails with ErrSessionClosed rather than a silent miss.
//
// Claim (the reaper's): under Registry.mu and Session.mu, re-check that sessions[id] is the
// session selected and the whole predicate (ReapReason), mark the kill point and remove the
// entry. An attach either happened before the claim (the claim sees a viewer and refuses) or
// after it (ErrSessionClosed).
//
// # Kill
//
// teardown: at each step (HUP, wait KillGrace, TERM, wait, KILL, wait up to max(4×KillGrace, 1s))
// signal every process group of the child's terminal session (the groups, getpgid, of the live
// processes whose session id, getsid, is the child's pid, the child's own group always), so an
// interactive shell's jobs, each in a group of its own, get the same signal at the same step;
// KillResult.Groups counts the distinct groups signalled. A step's wait ends early once the child
// is reaped and no live (non-zombie) process of that session is left (re-read from /proc every 10
// ms after the reap: the jobs are not our children; when /proc cannot be listed then, the
// escalation stops and counts one check in Unverified). Then find processes that still hold the
// PTY slave (/proc/*/fd; skipped when the master already sees a hang-up; no other child of the
// gateway can be among them, see Children and orphans; a pipe session's holders are those with
// its output pipes open for writing, read from /proc/PID/fdinfo, since the gateway's read ends
// name the same pipes and every child it forks holds them until its exec), remember which of its
// fds hold the slave, open a pidfd for each, re-check those fds (holdsFD: readlink, and a pipe's
// fdinfo) to see it still holds the slave, and signal through the pidfd with the same escalation: group stragglers always, escapees (another session
// id) unless SpareEscapees. Kill never waits for the reader: when an escapee keeps the slave
// open, the master stays registered with the readers, and the reading ends (the master closed,
// readerDone closed) when the escapee lets go of the slave and a read returns EIO.
//
// Descriptors: the kill path needs descriptors (listing /proc, each /proc/PID/fd, a pipe's
// /proc/PID/fdinfo, a stat, a pidfd per holder, cgroup.procs, cgroup.kill, cgroup.events), and a gateway whose table is full must
// still end a session and say truly what is left. The package holds 4 descriptors on /dev/null
// from its initialization (fdreserve.go, killFDs, its mutex guards them); withFDs runs a step,
// and when it fails with EMFILE or ENFILE closes the reserve, runs it again and refills the
// reserve (two kills short of descriptors take turns on the mutex). A holder whose pidfd cannot
// be had even so is signalled by pid, each time right after holdsFD showed its fds still hold
// the slave (readlink, getsid, getpgid and kill need no descriptor; a pipe's fdinfo takes the
// reserve's), and watched the same way every 10 ms. Whatever could not be checked (a process's
// fds or a pipe's fdinfo unreadable or unparseable for another reason than its exit or another
// owner, /proc or the cgroup unreadable) is counted in KillResult.Unverified:
// Survivors is then a lower bound, never a claim.
//
// With cgroups (Options.Cgroups), the kill ends with killCgroup: write 1 to the session's
// cgroup.kill (the kernel SIGKILLs every process in it, forks racing the kill included), wait on
// cgroup.events (poll, POLLPRI) for populated 0 within max(4×KillGrace, 1s), wait for the child's
// reap within the same bound, and rmdir the cgroup, deepest first with any cgroups the session
// made below it (a session running as root can; a gateway run inside a session does), retried on
// EBUSY within the bound. Survivors is then the pids still in cgroup.procs (its own and below),
// plus the processes outside the cgroup that a second scan finds holding the PTY, made once
// those the first scan found have let go or KillGrace has passed (settle: one on its way out, an
// escapee that KILL reached, lets go within it; a survivor, or one it handed the terminal to, is
// still there); Unverified counts
// 1 when cgroup.procs could not be read; without cgroups it is the unreaped child plus the PTY holders
// still alive. SpareEscapees still spares escapees from the holders' signals, but not from
// cgroup.kill. Zombies are not in cgroup.procs and do not keep a cgroup from being removed. At
// spawn, newCgroup makes the session's directory and SysProcAttr.UseCgroupFD/CgroupFD make
// os/exec use clone3(CLONE_INTO_CGROUP), so the child's first instruction already runs in the
// session's cgroup; Session.CgroupPath exposes it (an upgrade in place carries it to the next
// image).
//
// # Children and orphans
//
// internal/child waits for the children and reaps the orphans. spawn starts each child through
// child.StartWith (so the orphan reaper leaves its exit status alone), which opens the child's
// terminal or pipes under the lock every start of a child of the process takes and closes our
// copies of the child's ends once its exec has closed what it inherited: a child forked by
// another spawn, or by the upgrade's dry run, never holds a session's terminal slave or the
// write end of its pipes, so a kill's scan finds only processes that got them from the session (the cgroup, the recording's file and the
// environment are made before the lock: it covers the terminal's opening and the fork and exec
// alone). spawn then hands the child's pidfd to
// Options.children (child.Waiter.Watch, which falls back to a blocking wait when it cannot take
// it); Session.reaped receives the status. AdoptOrphans, StartChild and OrphansReaped (orphans.go)
// pass cmd/gateway on to internal/child, whose doc says how the orphan reaper never steals a
// status.
//
// # Upgrade in place
//
// Registry.Handover quiesces every session and snapshots it; Registry.Adopt takes the state over
// in the next image; Registry.ResumeHandover gives the sessions back to this image when the exec
// fails. The whole sequence is in docs/operations.md, "How an upgrade in place works".
//
// Quiescing a session (Session.stopReading, under Session.mu): handingOver is set. A master that
// is armed or parked is unregistered at once (readHanded; lock order Session.mu before
// fairShare.mu and Poller.mu, as for a re-arm); one a worker is reading is left to it, and the
// worker, at the end of its turn (it breaks out of its batches as soon as it sees handingOver),
// unregisters it instead of re-arming it. Either way readStopped is closed once no worker reads
// the master, and only then is the ring snapshotted: no byte is read from a master after its ring
// was snapshotted. Bytes the program writes from then on wait in the PTY (the program blocks when
// the terminal's buffer is full) and are read by the new image. A master whose reading had already
// ended (readDone, the PTY hung up) is handed as absent. child.Waiter.Detach takes the pidfds of
// the handed sessions' children out of the waiter's epoll instance under Waiter.mu (closing the
// instance when none is left): from then on this image does not reap them; it keeps waiting for
// the children of sessions being torn down. A child the waiter reaped just before publishes its
// status on its own goroutine; Handover waits up to 2 s for that exited. A child waited for by a
// blockingWait (traced) is handed without a pidfd: the new image opens one if the pid is still its
// child (checked in /proc/<pid>/stat after the open, which pins the process).
//
// The orphan reaper must never take an adopted child's exit status: Adopt registers every live
// child as ours (child.Adopt) before the new image starts the orphan reaper.
//
// # Telemetry
//
// The session.reader span is started by spawn (a child of the session.open span, passed in
// Spec.Trace) and ended when reading the master ends (endReading). teardown starts session.kill
// (child of the caller's context: the client's traceparent, ws.connection, or reaper.sweep),
// links it to the reader span and the reader span back to it, and records the kill histogram.
// Instruments are updated lock-free (OTel instruments are safe for concurrent use) and never
// under a lock that guards I/O.
//
// # Goroutines
//
//   - internal/poller's workers (Poller.loop): GOMAXPROCS per Poller while any of its masters
//     is being read (the process-wide defaultReaders serve every registry; only a test gives
//     Options.readers readers of its own). Started by Poller.Add from readers.add in spawn (and
//     startReading after a resumed or adopted handover) when none run. Each owns one read buffer
//     and takes one ready master at a time (Reading, above). They end when the last master is
//     unregistered: it closes the epoll fd and every worker returns; the next spawn starts new
//     ones.
//   - screenFeeder.loop: one per process (feeder) while some session's screen lags; started by
//     screenFeeder.enqueue from ingest when a model lags 64 KiB; catches the queued models up
//     from the ring and their backlogs, at most 1 MiB per session per turn (Session.feedScreen);
//     ends when its queue is empty.
//   - Recording end: one per recorded session, short: endRecording runs Recorder.Close (what is
//     queued written within recordCloseWait, 5 s, then the file closed) on a goroutine of its own
//     so a stalled disk delays no teardown, then tells RecordOptions.OnEnd (a cluster node's
//     upload queue; it never blocks) the file and its header. The recorder's writer is
//     internal/record's.
//   - The child waiter's loop and its blocking-wait fallback: internal/child's (one per
//     child.Waiter while any of its children is unreaped; the process-wide children serve every
//     registry), fed by spawn and waitChild (after a resumed or adopted handover).
//   - Session.reaped hand-off: one per exit, short, on a goroutine the waiter starts (or on the
//     blocking wait's): writes exit, closes exited, takes Session.mu, wakes viewers, arms the
//     settle timer.
//   - The fair share's hold timer: a time.AfterFunc of fairShare.holdExpired, at most one
//     pending per fairShare, armed by fairShare.settle when it holds a streaming master back
//     and no timer is pending, and by holdExpired itself while masters stay held (at most
//     defaultFairIdle, 5 ms, later). It takes fairShare.mu, turns light the streaming masters
//     behind a held one that went idle (a zero-timeout poll finds the master empty) and those
//     that let a held one wait defaultFairWait (20 ms) without catching up, lets go of the
//     masters no longer ahead, then re-arms them (releaseHeld: each Session.mu, after
//     fairShare.mu is released). One still pending when the last held master was re-armed or
//     unregistered finds nothing held and does nothing.
//   - The echo hold timer: at most one per owner's echoGroup while a master of that owner's is
//     held for an echo; armed by Session.hold at the group's holdUntil as the first hold saw it;
//     runs echoGroup.release (echoGroup.mu to empty held, then each held session's Session.mu,
//     never both at once, to re-arm its master); stopped when an echo releases the masters first.
//   - Session.endReading on a goroutine of its own: rare, at most one per session, from
//     wakeReaderLocked when re-arming a master parked by backpressure fails (it holds Session.mu,
//     which endReading takes).
//   - Session.inputLoop: at most one per session, on demand, from Session.Write when the PTY did
//     not take all input; writes the queued input until the queue is empty or the master is
//     closed.
//   - The cgroup removal of a failed spawn: one, from spawn when the master could not be
//     registered with the readers after the child started (the child is killed): it waits for the
//     child's exit, then removes the session's cgroup.
//   - Registry.Shutdown's teardowns, one per session, each run with context.WithoutCancel (the
//     shutdown timeout never cuts the escalation short, which bounds it: KillGrace twice, then
//     max(4×KillGrace, 1s) for KILL, the same for the PTY holders and for the cgroup); and its
//     wait, one per call: r.wg.Wait(), then it closes the call's done; it outlives a call whose
//     context ended first.
//   - The orphan reaper: internal/child's, one per process, started by AdoptOrphans (in the
//     gateway binary only); it runs until the process exits.
//   - Adopters: GOMAXPROCS-1 goroutines (at least 1, at most 4), only in a new image after an
//     upgrade, started by Registry.Adopt; each takes the next handed session and adopts and
//     registers it (or tears it down); Adopt waits for them.
//   - The dying children's kill: one, only after an adoption whose state lists children of
//     sessions still being torn down, started by Registry.EndStrays: HUP, TERM, KILL and the reap
//     of those children; it ends when they are reaped or survived KILL (logged).
//   - The exit settle timer (time.AfterFunc, one per exit, again when a paused reader resumes
//     after the exit), armed by armSettleLocked: settleExit takes Session.mu and, unless a later
//     timer superseded it (settleGen), sets exitSettled and wakes viewers.
//   - The resume hold timer (time.AfterFunc, one per hold), armed by holdLocked and stopped when
//     its hold is taken over or pruned or the session closes: it takes Session.mu, removes its
//     hold from holds and lets a paused reader resume.
//
// # Locks
//
// The order is written once, at Registry.mu (registry.go). Each mutex:
//
//   - Registry.mu: sessions (id → session), closed, the tombstones of recently closed ids,
//     echoGroups (owner → echo-first group).
//   - Session.mu: handingOver, readStopped (an upgrade in place takes the session over), state,
//     reason, dropOutput (the kill point), outputFinal, exitSettled, settleGen, ring, viewers,
//     every Viewer's next, closed, size and used, unwatchedSince, leaseUntil, cols and rows (the
//     applied size; written only with resizeMu also held), sizeSeq, paused, readState (armed,
//     read by a worker, parked by backpressure, held for another session's echo or held by the
//     fair share, done), holds, dropped, killDone, killRes, tearing.
//   - Session.ptyMu: ptmxClosed; held by the reader to close the master and by the kill's scan
//     for PTY holders up to opening their pidfds (not while waiting for them to die), so a slave
//     name reused by a newer session is never scanned. It is one of the deliberate exceptions to
//     "no lock across a blocking call": the scan is skipped when the master already sees a
//     hang-up.
//   - Session.resizeMu: serialises computing and applying the window size (applySize,
//     Session.Resize), so the size stored is the size applied and the last computation wins; held
//     across the TIOCSWINSZ ioctl (through SyscallConn().Control), with no other lock but, when a
//     painted attach declares its size, its screen.mu; taken before Session.mu, never while
//     holding Session.mu or Registry.mu (a leaving viewer applies the size after releasing
//     Session.mu).
//   - Session.inMu: inQueue, inDraining; held across one non-blocking write(2) attempt on the
//     master, so input stays in order; taken before Session.mu when a write fails (never after).
//   - fairShare.mu (one per readers): shares (bytes read by each streaming master and when its
//     last turn ended), held and holdTimer. Under it only map updates, timer calls and the
//     zero-timeout poll of an idle-looking master (dropIdleLocked), none of which waits; no lock
//     is taken under it. A turn's end holds Session.mu and fairShare.mu while it is counted, and
//     re-arms the master after fairShare.mu is released, still under Session.mu; a held master
//     is let go by re-arming it after fairShare.mu is released, never under it. A master leaves
//     the fair share (readers.remove, or the failed callback after a failed wait) before it is
//     closed, so the idle poll never sees a closed fd.
//   - poller Poller.mu: internal/poller's (its doc): the epoll fd and the token → registration
//     table; no callback runs and no lock is taken under it. Re-arming a master holds Session.mu
//     and Poller.mu across one epoll_ctl, so the state and the registration change together (so
//     does unregistering it for an upgrade in place, stopReadingLocked). Whether a master is
//     registered is also an atomic of its registration (Registered), which a turn's end reads
//     under Session.mu and fairShare.mu: the poller's failure reaches a session's reading only
//     through failReading, which takes Session.mu.
//   - echoGroup.mu (one per owner): held, holdTimer; under it only slice updates and arming or
//     stopping the timer.
//   - child.Waiter.mu, starts, orphanReaper.gate and orphanReaper.mu: internal/child's (its
//     doc); session takes them (Watch, Detach, StartWith, StartChild, Adopt, Reaped) with none of
//     its own locks held, and no session lock is taken under them (StartWith's ends, which open
//     the child's terminal or pipes under starts, take none).
//   - recordings.mu (one per registry): writing, the recordings being written (id → recorder);
//     under it only map updates; no lock is taken under it.
//   - fdReserve.mu (killFDs): the kill path's reserve of descriptors; held by withFDs only when a
//     step failed for want of a descriptor, while it runs the step again on the released reserve
//     and refills it (a cgroup wait included), so two such kills take turns; may be taken under
//     Session.ptyMu; nothing is taken under it.
//   - Registry's atomics survivors and survivorSessions: what Shutdown's kills left alive.
//
// Fields without a lock: Session.sizeGen (atomic; written under resizeMu and Session.mu, read
// lock-free by socket writers); Session.awaitingEcho, echoGroup.last and echoGroup.holdUntil
// (atomics: a keystroke sets them, in its session's owner's group, before it is written to the
// PTY; the session's next read clears awaitingEcho and, if it is last, sets holdUntil to now);
// Session.echo (set before the master is read, never changed); Session.readEnded (atomic: set by
// endReading before it clears the session's wait for an echo; a keystroke that sees it clears its
// own, so a keystroke after the reading ended leaves no wait that no read would end);
// Session.released (atomic: set when its master is released from a hold, cleared by its next
// batch; until then it is not held again, so keystrokes without an echo cannot stop a stream);
// Session.exit (written before exited is closed; read only after <-exited).
package session
