package mux

import (
	"syscall"
	"time"

	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// exitInfo is the wire form of an exit; nil stays nil.
func exitInfo(e *session.ExitStatus) *proto.ExitInfo {
	if e == nil {
		return nil
	}
	out := &proto.ExitInfo{Code: e.Code}
	if n := e.SignalName(); n != "" {
		out.Signal = &n
	}
	return out
}

// killResult is the wire form of a kill result.
func killResult(id string, res session.KillResult) proto.KillResult {
	out := proto.KillResult{Session: id, Status: res.Status,
		DurationMs: float64(res.Duration.Microseconds()) / 1000, Signals: res.Signals,
		Groups: res.Groups, Escapees: res.Escapees, Survivors: res.Survivors, Unverified: res.Unverified,
		Offset: res.Offset}
	if res.Reaped {
		out.Exit = exitInfo(&res.Exit)
	}
	if out.Signals == nil {
		out.Signals = []string{}
	}
	return out
}

// sessionInfo is the wire form of a listing entry.
func sessionInfo(in session.Info) proto.SessionInfo {
	return proto.SessionInfo{Session: in.ID, Name: in.Name, Pid: in.Pid, Cmd: in.Argv,
		Created: in.Created.UTC().Format(time.RFC3339Nano), Cols: in.Cols, Rows: in.Rows,
		Viewers: in.Viewers, End: in.End, Exit: exitInfo(in.Exit), TTY: ttyOf(in)}
}

// ttyOf is a result's tty: false for a pipe session, absent (nil) for a PTY session.
func ttyOf(in session.Info) *bool {
	if !in.Pipes {
		return nil
	}
	f := false
	return &f
}

// signals maps each of proto.Signals to this platform's signal.
var signals = map[string]syscall.Signal{
	"INT":   syscall.SIGINT,
	"QUIT":  syscall.SIGQUIT,
	"TERM":  syscall.SIGTERM,
	"HUP":   syscall.SIGHUP,
	"KILL":  syscall.SIGKILL,
	"TSTP":  syscall.SIGTSTP,
	"CONT":  syscall.SIGCONT,
	"USR1":  syscall.SIGUSR1,
	"USR2":  syscall.SIGUSR2,
	"WINCH": syscall.SIGWINCH,
}
