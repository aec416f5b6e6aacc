package upgrade

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxterm/muxterm/gateway"
	"github.com/muxterm/muxterm/internal/earlysignal"
	"github.com/muxterm/muxterm/session"
)

// Upgrade in place (docs/operations.md, "Upgrade and restart" and "How an upgrade in place
// works"): SIGUSR2 re-executes the gateway binary in this process, handing every session over.

// handoverEnv names the memfd that carries the state to the next image. init removes it from
// the environment before anything else reads it.
const handoverEnv = "MUXTERM_HANDOVER_FD"

// ignoredEnv carries the wall-clock time (Unix nanoseconds) at which the old image set the stop
// signals to SIG_IGN for the exec: the start of the window in which a stop signal is not
// caught, which ends at internal/earlysignal's init (LogTimeline's "unguarded"). init removes
// it from the environment.
const ignoredEnv = "MUXTERM_HANDOVER_IGNORED"

// handoverCheckFlag is the dry run: `gateway --handover-check N [flags…]` exits 0 when this
// build can adopt a state of version N and accepts the flags (and MUXTERM_* environment) the
// running gateway was started with, 3 when it cannot, 2 on a usage error.
const handoverCheckFlag = "--handover-check"

// The test builds' knobs (this one, breakAdoption, holdAfterCheck, breakExec, holdAdoption) are
// set with -ldflags "-X github.com/muxterm/muxterm/internal/upgrade.NAME=VALUE".

// stateVersion, when set to N, makes this build write and accept state version N instead of
// session.HandoverVersion. For tests of a refused upgrade.
var stateVersion = ""

// breakAdoption, when set to 1, makes this build pass the dry run but fail to read the state
// after the exec. For the test of the teardown that follows.
var breakAdoption = ""

// holdAfterCheck, when set to PATH (a FIFO), makes this build, once an upgrade's dry run has
// passed, open PATH for reading before it goes on: it waits there until a test opens the FIFO
// for writing. For the test of a binary replaced after its dry run.
var holdAfterCheck = ""

// drainWait bounds how long an upgrade waits for HTTP connections accepted before it stopped
// accepting to send their request and get the answer (a browser's speculative connection may
// send none).
const drainWait = time.Second

// checkTimeout bounds the dry run of the new binary.
const checkTimeout = 10 * time.Second

func handoverVersion() uint32 {
	if v, err := strconv.ParseUint(stateVersion, 10, 32); err == nil {
		return uint32(v)
	}
	return session.HandoverVersion
}

// inheritedFD is the state memfd of the previous image, -1 when started fresh; inheritedErr
// says why the variable could not be read.
var (
	inheritedFD  = -1
	inheritedErr error
)

// Inherited reports whether this image was started by an upgrade in place with a state it can
// read (handed), or with one whose variable it could not read (err).
func Inherited() (handed bool, err error) { return inheritedFD >= 0, inheritedErr }

// ignoredAt is ignoredEnv's time; zero when absent.
var ignoredAt time.Time

func init() {
	if v, ok := os.LookupEnv(ignoredEnv); ok {
		os.Unsetenv(ignoredEnv)
		if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
			ignoredAt = time.Unix(0, ns)
		}
	}
	v, ok := os.LookupEnv(handoverEnv)
	if !ok {
		return
	}
	os.Unsetenv(handoverEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		inheritedErr = fmt.Errorf("%s=%q: not a descriptor", handoverEnv, v)
		return
	}
	unix.CloseOnExec(fd)
	inheritedFD = fd
}

// HandoverCheck runs the dry run when args start with --handover-check: it reports whether
// it can adopt the version named, and whether it handled args. version is this build's;
// checkConfig parses the rest of args as the gateway would, and loads the files it loads.
func HandoverCheck(args []string, stdout io.Writer, version string,
	checkConfig func([]string) error) (handled bool, code int) {
	if len(args) == 0 || args[0] != handoverCheckFlag {
		return false, 0
	}
	if len(args) < 2 {
		fmt.Fprintf(stdout, "usage: gateway %s VERSION [flags]\n", handoverCheckFlag)
		return true, 2
	}
	v, err := strconv.ParseUint(args[1], 10, 32)
	if err != nil || uint32(v) != handoverVersion() {
		fmt.Fprintf(stdout, "muxterm %s: cannot adopt handover state version %s (reads %d)\n",
			version, args[1], handoverVersion())
		return true, 3
	}
	// The configuration the new image will be started with (the same flags and environment):
	// a flag this build no longer knows, a value it refuses, a tokens file or TLS key pair that
	// no longer loads would make it fail after the exec, with every session to tear down.
	if err := checkConfig(args[2:]); err != nil {
		fmt.Fprintf(stdout, "muxterm %s: cannot start with this configuration: %v\n", version, err)
		return true, 3
	}
	fmt.Fprintf(stdout, "muxterm %s: can adopt handover state version %d\n", version,
		handoverVersion())
	return true, 0
}

// State is the whole handover: the gateway's part and the registry's.
//
// A State belongs to one goroutine, and its methods are not safe for concurrent use. In the old
// image that is the one running Upgrader.Upgrade, which builds and encodes it. In the new image
// it is cmd/gateway's run, which takes it (Take), marks its steps, adopts it and opens its gate,
// and, as the signal loop, asks StopRequested. The one part other goroutines see is the
// adoption gate (Gate): HTTP handlers wait on its channel, which OpenGate closes.
type State struct {
	FromVersion string
	Signalled   time.Time // when SIGUSR2 arrived, for the log line of the next image
	// Token is the generated token (none was configured), so the URL printed stays valid.
	Token string
	// Listeners are the listening sockets' descriptors by name ("main", "metrics").
	Listeners map[string]int
	Sessions  *session.HandoverState
	// Terminate: SIGTERM or SIGINT arrived during the upgrade, after the point of no return;
	// the new image shuts down as soon as it has adopted everything.
	Terminate bool
	// Binary is the path upgrades read the binary from (binaryPath at the first start): the
	// image runs from a memfd, so neither its argv[0] nor /proc/self/exe names it. Comm is the
	// process's name, which the exec from the memfd would change. "" in a state from an image
	// without them (the new image resolves argv[0] again and keeps the name the exec gave it).
	Binary, Comm string
	// Image is a descriptor of the old image's executable (its memfd after an earlier
	// upgrade), 0 for none: the new image closes it once it has adopted the sessions, so that
	// freeing a memfd's pages (tens of megabytes, milliseconds) is not part of the exec, where
	// no stop signal is caught.
	Image int
	// Stopped is when the old image's listeners stopped accepting (from then on connections
	// wait in the backlog until the new image serves); Quiesced is when the sessions' snapshot
	// was complete (the state's encoding and the exec follow). Wall clock: they cross the exec.
	// Zero in a state from an image without them.
	Stopped, Quiesced time.Time

	adopted bool          // set by Adopt; not part of the state
	marks   []mark        // the new image's start, for the "upgrade timeline" log line
	ready   chan struct{} // closed by OpenGate once the sessions are adopted (adoptionGate)
}

// binaryPath is the binary an upgrade executes: the path this process was started from
// (argv[0] resolved against $PATH and the working directory, at start), not /proc/self/exe,
// so a deploy that replaced the file at that path is what SIGUSR2 runs. An image started by an
// upgrade takes the path from the state instead (State.Binary): the first start's.
func binaryPath() (string, error) {
	p := os.Args[0]
	if filepath.Base(p) == p {
		lp, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("binary %q: %w", p, err)
		}
		p = lp
	}
	return filepath.Abs(p)
}

// Options wire an Upgrader (New).
type Options struct {
	// Logger receives the upgrade's log lines. Required.
	Logger *slog.Logger
	// Version is this build's, handed on as State.FromVersion.
	Version string
	// Wait bounds the sockets' end (gateway.Gateway.Restart) and, separately, the sessions'
	// quiesce (session.Registry.Handover): cmd/gateway's --shutdown-timeout. Required.
	Wait time.Duration
	// Binary is the path upgrades read the binary from: the one the previous image handed
	// over (State.BinaryPath). Default (""): argv[0] resolved at New; if that fails, every
	// upgrade is refused.
	Binary string
	// Listeners are the listeners by name ("main", "metrics"), before any TLS wrapping, and
	// Servers the HTTP servers serving them. An upgrade stops both; one that serves again
	// replaces them with what Resume returns.
	Listeners map[string]*gateway.HandoverListener
	Servers   []*http.Server
	// Gateway and Registry are what an upgrade quiesces (the sockets, the sessions). Required.
	Gateway  *gateway.Gateway
	Registry *session.Registry
	// StopReaper stops the reaper's loop and returns once it has ended (or its own wait ran
	// out). Required.
	StopReaper func()
	// Token is the generated token, handed on (State.Token). Default (""): none was generated.
	Token string
	// Terminating reports whether a stop signal (SIGTERM, SIGINT) has arrived; the new image
	// then shuts down once it has adopted everything (State.Terminate). Default (nil): never.
	Terminating func() bool
	// Resume serves again in this image, on new listeners made from duplicates of the sockets
	// (fds by name, which stay the Upgrader's to close), with a new reaper loop, after an
	// upgrade past the point of no return that could not exec; it returns the new listeners (by
	// name, before any TLS wrapping) and the servers serving them, which the next upgrade
	// stops. Default (nil): the gateway shuts down instead (ErrAborted).
	Resume func(fds map[string]int) (map[string]*gateway.HandoverListener, []*http.Server, error)
}

// Upgrader runs an upgrade in place on SIGUSR2.
//
// Upgrade may be called from any goroutine (cmd/gateway calls it from its signal loop only),
// but one upgrade runs at a time: a call while another runs is refused at once (busy). The
// goroutine whose call runs owns the Upgrader's listeners and servers for that long (it stops
// them and, serving again, replaces them with what Options.Resume returned; the next call sees
// those), and calls Options.StopReaper, Terminating and Resume on itself. Everything else is
// immutable after New. An Upgrader starts no goroutine: the dry run's child is waited for by the
// calling one.
type Upgrader struct {
	// immutable after New (opts.Listeners and opts.Servers are only the first ones):
	opts Options
	log  *slog.Logger // opts.Logger
	bin  string       // opts.Binary or binaryPath at New; "" when it could not be resolved

	busy atomic.Bool // an Upgrade runs; the one that set it owns the fields below

	// owned by the running Upgrade: the current listeners and servers, which it stops, and
	// which abort replaces when this image serves again.
	listeners map[string]*gateway.HandoverListener
	servers   []*http.Server
}

// ErrAborted: the upgrade got past the point of no return, could not exec, and this
// image could not serve again either: the sessions are back in this image but nothing serves
// them, so the caller shuts down. ErrFailed: the same, but this image serves again.
var (
	ErrAborted = errors.New("upgrade aborted after quiescing")
	ErrFailed  = errors.New("upgrade failed after quiescing; serving again")
)

// breakExec, when set to 1, makes every exec of an upgrade fail (the fallback's too). For the
// test of an upgrade that serves again.
var breakExec = ""

// Upgrade copies the binary into a sealed memfd (holdImage), asks that copy whether it can
// adopt this state, then quiesces everything and execs the same copy. It returns only when the
// upgrade was refused (nothing changed: the gateway serves on), or when the quiesce failed
// after the sockets were closed or even the fallback exec failed: then the sessions go back to
// this image, which serves again (ErrFailed), or, if that fails too, ErrAborted
// (docs/operations.md: the gateway then shuts down).
func (u *Upgrader) Upgrade(signalled time.Time) error {
	if !u.busy.CompareAndSwap(false, true) {
		u.log.Warn("upgrade refused: an upgrade is running")
		return errors.New("upgrade running")
	}
	defer u.busy.Store(false)
	if u.bin == "" {
		u.log.Error("upgrade refused: the binary's path could not be resolved at start")
		return errors.New("no binary path")
	}
	img, err := holdImage(u.bin)
	if err != nil {
		u.log.Error("upgrade refused; still serving", "binary", u.bin, "err", err)
		return err
	}
	defer img.Close() // still here: the upgrade was refused or the exec failed
	if err := u.check(img); err != nil {
		u.log.Error("upgrade refused; still serving", "binary", u.bin, "err", err)
		return err
	}
	if holdAfterCheck != "" {
		u.log.Info("upgrade: held after the dry run until " + holdAfterCheck +
			" is opened (a test build)")
		if f, err := os.Open(holdAfterCheck); err == nil {
			f.Close()
		}
	}
	fds := make(map[string]int, len(u.listeners))
	for name, ln := range u.listeners {
		fd, err := gateway.ListenerFD(ln)
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			u.log.Error("upgrade refused; still serving", "err", err)
			return err
		}
		fds[name] = fd
	}
	u.log.Info("upgrade: the new binary can adopt this state; quiescing", "binary", u.bin,
		"state_version", handoverVersion(),
		"dry_run", time.Since(signalled).Round(time.Microsecond))
	ctx, cancel := context.WithTimeout(context.Background(), u.opts.Wait)
	defer cancel()
	// From here on there is no way back but the fallback exec of this very image.
	u.opts.StopReaper()
	// The listeners stop accepting (the duplicates keep the sockets and their backlogs). The
	// HTTP servers close their idle keep-alive connections and answer every request already
	// accepted, with Connection: close (not http.Server.Shutdown: it drops a request it reads
	// after it began, unanswered). The sockets are told and closed with 1012. Then every
	// connection accepted has ended, or is closed when drainWait runs out.
	for _, ln := range u.listeners {
		ln.Stop()
	}
	stopped := time.Now()
	for _, srv := range u.servers {
		srv.SetKeepAlivesEnabled(false)
	}
	if err := u.opts.Gateway.Restart(ctx); err != nil {
		u.log.Warn("upgrade: sockets did not end in time; their viewers hold no resume", "err", err)
	}
	restarted := time.Now()
	// The drain gets drainWait of its own, as the readers get their wait below: ctx may be spent
	// by a socket that did not end, and a connection that sent no request still gets its time.
	// drainWait is the whole bound: what is left when it ends is closed at once (Close, not
	// Shutdown: Shutdown leaves a connection that sent no request open for its first 5 s, so
	// it would only wait out a second deadline; a socket that did not end is closed by the exec).
	dctx, dcancel := context.WithTimeout(context.Background(), drainWait)
	for name, ln := range u.listeners {
		if err := ln.Drain(dctx); err != nil {
			u.log.Warn("upgrade: connections that sent no request are closed",
				"listener", name, "err", err)
		}
	}
	dcancel()
	for _, srv := range u.servers {
		_ = srv.Close() // nothing blocks: it closes the listener and what is left
	}
	drained := time.Now()
	// The readers get a wait of their own: ctx may be spent by a socket that did not end, and
	// only a reader that does not stop fails the quiesce.
	hctx, hcancel := context.WithTimeout(context.Background(), u.opts.Wait)
	st, err := u.opts.Registry.Handover(hctx)
	hcancel()
	if err != nil {
		u.log.Error("upgrade: quiescing failed", "err", err)
		return u.abort(nil, fds)
	}
	quiesced := time.Now()
	self := ownImage()
	if self > 0 {
		defer unix.Close(self) // still here: the exec failed
	}
	state := &State{FromVersion: u.opts.Version, Signalled: signalled, Token: u.opts.Token,
		Listeners: fds, Sessions: st, Terminate: u.opts.Terminating != nil && u.opts.Terminating(),
		Binary: u.bin, Comm: ownComm(), Image: self, Stopped: stopped, Quiesced: quiesced}
	memfd, err := session.WriteHandoverMemfd(handoverVersion(), state)
	if err != nil {
		u.log.Error("upgrade: writing the state failed", "err", err)
		return u.abort(st, fds)
	}
	keep := append(st.FDs(), memfd)
	for _, fd := range fds {
		keep = append(keep, fd)
	}
	if self > 0 {
		keep = append(keep, self)
	}
	env := append(os.Environ(), handoverEnv+"="+strconv.Itoa(memfd))
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	u.log.Info("upgrade: executing", "binary", u.bin, "sessions", len(st.Sessions),
		"quiesce", r(time.Since(signalled)), "sockets", r(restarted.Sub(stopped)),
		"drain", r(drained.Sub(restarted)),
		"handover", r(quiesced.Sub(drained)), "encode", r(time.Since(quiesced)))
	// The checked copy, not the path: argv stays os.Args, so the new image's argv[0] is this
	// one's.
	err = execKeeping(imagePath(img), os.Args, env, keep)
	// Still here: the exec failed. The running image can always read its own state.
	u.log.Error("upgrade: exec failed; re-executing the running image", "binary", u.bin, "err", err)
	err = execKeeping("/proc/self/exe", os.Args, env, keep)
	u.log.Error("upgrade: exec of the running image failed too", "err", err)
	unix.Close(memfd)
	return u.abort(st, fds)
}

// abort puts the sessions back in this image after a failed exec (st; nil after a failed
// quiesce, which undid itself) and serves again; ErrAborted if it cannot, and the
// caller shuts down.
func (u *Upgrader) abort(st *session.HandoverState, fds map[string]int) error {
	if st != nil {
		u.opts.Registry.ResumeHandover(st)
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if u.opts.Resume == nil {
		return ErrAborted
	}
	lns, servers, err := u.opts.Resume(fds)
	if err != nil {
		u.log.Error("upgrade: serving again failed; shutting down", "err", err)
		return ErrAborted
	}
	u.listeners, u.servers = lns, servers
	u.log.Warn("upgrade failed after the sockets were closed; "+
		"this image serves again, with every session",
		"sessions", u.opts.Registry.Len())
	return ErrFailed
}

// Relisten makes Go listeners of duplicates of the listening sockets fds (by name), which stay
// open for the caller to close.
func Relisten(fds map[string]int) (map[string]*gateway.HandoverListener, error) {
	lns := make(map[string]*gateway.HandoverListener, len(fds))
	for name, fd := range fds {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		var ln net.Listener
		if err == nil {
			ln, err = gateway.InheritListener(dup) // closes dup
		}
		var hl *gateway.HandoverListener
		if err == nil {
			if hl, err = gateway.NewHandoverListener(ln); err != nil {
				ln.Close()
			}
		}
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("listen again on %s: %w", name, err)
		}
		lns[name] = hl
	}
	return lns, nil
}

// check runs the dry run of img, the copy of the new binary, with the state version. img is
// the dry run's descriptor 3, which it executes; its argv[0] is the binary's path.
func (u *Upgrader) check(img *os.File) error {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	args := append([]string{handoverCheckFlag, strconv.FormatUint(uint64(handoverVersion()), 10)},
		os.Args[1:]...)
	cmd := exec.CommandContext(ctx, "/proc/self/fd/3", args...)
	cmd.Args[0] = u.bin
	cmd.ExtraFiles = []*os.File{img}
	cmd.Env = os.Environ()
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.WaitDelay = time.Second // a descendant holding the pipes cannot stretch the dry run
	// Started as one of our own children, so that the orphan reaper leaves its exit status to
	// cmd.Wait.
	done, err := session.StartChild(cmd)
	if err == nil {
		err = cmd.Wait()
		done()
	}
	out := buf.Bytes()
	if ctx.Err() != nil {
		return fmt.Errorf("dry run %s: no answer within %v", handoverCheckFlag, checkTimeout)
	}
	if err != nil {
		return fmt.Errorf("dry run %s %d: %w: %q", handoverCheckFlag, handoverVersion(), err,
			truncate(out, 200))
	}
	return nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}

// execKeeping execs bin with close-on-exec cleared on keep, and only for the exec: the fork
// lock keeps any concurrent fork from inheriting them, and a failed exec sets it again.
func execKeeping(bin string, argv, env []string, keep []int) error {
	if breakExec != "" {
		return fmt.Errorf("exec %s: broken by this build "+
			"(-X github.com/muxterm/muxterm/internal/upgrade.breakExec)", bin)
	}
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	for _, fd := range keep {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			restoreCloexec(keep)
			return fmt.Errorf("clear close-on-exec on fd %d: %w", fd, err)
		}
	}
	restore := ignoreAcrossExec() // sigaction.go
	env = append(env[:len(env):len(env)],
		ignoredEnv+"="+strconv.FormatInt(time.Now().UnixNano(), 10))
	err := syscall.Exec(bin, argv, env)
	restore()
	restoreCloexec(keep)
	return fmt.Errorf("exec %s: %w", bin, err)
}

func restoreCloexec(fds []int) {
	for _, fd := range fds {
		unix.CloseOnExec(fd)
	}
}

// New wires an Upgrader as opts say.
func New(opts Options) *Upgrader {
	u := &Upgrader{opts: opts, log: opts.Logger, bin: opts.Binary, listeners: opts.Listeners,
		servers: opts.Servers}
	if u.bin == "" {
		var err error
		if u.bin, err = binaryPath(); err != nil {
			u.log.Warn("upgrade in place unavailable: the binary's path cannot be resolved",
				"err", err)
		}
	}
	return u
}

// Signals receives SIGUSR2, caught from the process's first package initializer on
// (internal/earlysignal): its default action would end the gateway, and orphan every session,
// if one arrived before run is ready, in particular in a new image still adopting.
var Signals = earlysignal.Upgrade
