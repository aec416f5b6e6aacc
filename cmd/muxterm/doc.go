// Command muxterm is the terminal client of a muxterm gateway: it lists, starts, attaches to and
// kills sessions, captures their screens, sends them keys, and runs commands in them for scripts
// (see help and README).
//
// It owns its configuration (flags, MUXTERM_URL and MUXTERM_TOKEN, the config file, checked for
// its type, a regular file: a FIFO is refused unread, its mode and keys given twice), session
// names, raw mode and detach keys, the reply filter that keeps a replay's terminal answers from
// the PTY, redial and resume from the offset (not after a protocol violation), and stop signals
// that end it within a second whether or not the gateway answers (stopWait). screen.go is
// attach's model of what the terminal shows (a detach undoes the session's modes; a size another
// viewer imposes is drawn again with a status line); screencmds.go is capture and send (key
// names, arrows by the program's mode); lstable.go is ls's table (relative times, fitted to the
// terminal's width); recordings.go is recordings, recordings export and play (a recording's
// timing, --speed, --idle-limit); visible.go escapes the control characters of every string
// from the gateway it prints (names, commands, ids, error messages). SIGWINCH and raw-mode
// specifics are behind build tags (term_unix.go; term_windows.go polls the console size).
//
// # Goroutines
//
// For attach and exec: the loop (the main goroutine: stdin, sizes, stop signals, the pump's
// events; the only writer of input and caller of detach and kill); the resizer (sizes go out from
// a goroutine of their own, the latest first, so no unanswered resize delays a stop signal);
// pump.run (the only writer of stdout; reads the channel, redials and reattaches from the offset
// after a drop, and sends the loop evLost, evBound, evSentinel and evEnd on an unbuffered
// channel); readInput (stdin to the loop); watchSize (SIGWINCH, or a 250 ms console poll on
// Windows); detachOnExit (one per binding: detaches once session.exit came, so Read ends after
// the last byte). When the loop returns it cancels them and closes the client; readInput may stay
// blocked in a read until the process exits. exec also runs a connect watch while DialOpen runs:
// a stop signal cancels its context, and DialOpen kills a session its open started; a signal that
// came as DialOpen succeeded is put back for the loop.
//
// muxterm has no mutex: each of its values belongs to the loop or to the pump, which tell each
// other about changes on channels.
package main
