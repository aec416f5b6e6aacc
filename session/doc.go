// Package session owns muxterm's PTY sessions: a child process on a pseudo-terminal, the readers
// shared by every session (a few goroutines on one epoll instance) that read its output into a
// bounded scrollback ring addressed by 64-bit byte offsets, one waiter shared by every session
// that reaps the children, the viewers that pull from the ring, the resume holds a lost viewer
// leaves behind, and a kill that never waits for the reader. Registry holds the sessions by id
// and provides the atomic attach and the reaper's claim.
//
// Package session knows nothing of sockets or protocols; it imports creack/pty and os/exec and
// nothing of muxterm but otel and the internal helpers cgroup and procfs. Which file holds which
// concern: docs/architecture.md, "Files of session".
package session
