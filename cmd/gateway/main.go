package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/muxterm/muxterm/gateway"
	"github.com/muxterm/muxterm/internal/earlysignal"
	"github.com/muxterm/muxterm/internal/upgrade"
	"github.com/muxterm/muxterm/session"
)

// version and commit are set by the Makefile with
// -ldflags "-X main.version=$(git describe --always --dirty) -X main.commit=$(git rev-parse --short HEAD)".
var (
	version = defaultVersion
	commit  = "unknown"
)

// defaultVersion is version when no -ldflags set it.
const defaultVersion = "0.1.0-dev"

// errVersion says --version was given and answered.
var errVersion = errors.New("version printed")

// usageError is a command line the flag set could not parse: exit status 2 with a hint.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func main() {
	if handled, code := handoverCheck(os.Args[1:], os.Stdout); handled { // handovercheck.go
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// What a fresh start inherited reaches no session; an image started by an upgrade marks it
	// in run, once it has adopted (cloexec.go).
	handed, handedErr := upgrade.Inherited()
	if !handed && handedErr == nil && keepInherited == "" {
		if err := closeOnExecInherited(); err != nil {
			fmt.Fprintln(os.Stderr, "muxterm: warning:", err)
		}
	}
	// Descendants that double-fork are re-parented to us and reaped here (not in run: the
	// tests that call run must keep their own children's exit statuses). An image started by
	// an upgrade does it in run, once the sessions it adopted have registered their children,
	// so that the orphan reaper never takes an adopted child's exit status.
	if !handed {
		if err := session.AdoptOrphans(slog.Default()); err != nil {
			fmt.Fprintln(os.Stderr, "muxterm: warning:", err)
		}
	}
	go func() { // also one caught before NotifyContext (internal/earlysignal, internal/upgrade)
		<-earlysignal.Stop
		stop()
	}()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) || errors.Is(err, errVersion) {
			return
		}
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(os.Stderr, "gateway: %v\nRun 'gateway --help' for usage.\n", ue.err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "muxterm:", err)
		os.Exit(1)
	}
}

// run starts the gateway with the configuration of args and getenv (MUXTERM_*), the start-up
// lines on stdout and the log on stderr, and serves until a stop (server.serve). Its steps
// (setup.go) run in this order; what they leave to its return (atReturn) runs then, the latest
// first, and last the teardown of handed-over sessions that were never adopted.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parse(args, getenv, stdout)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return &usageError{fmt.Errorf("--log-level: %w", err)}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// An upgrade in place hands over listeners, sessions and a generated token (internal/upgrade).
	ho, err := upgrade.Take(log, c.killGrace)
	if err != nil {
		return err
	}
	defer ho.TearDownUnlessAdopted(log, c.killGrace)
	ho.Mark("decode")
	if err := c.rec.prepare(log); err != nil { // record.go
		return err
	}
	token, generated, keptAt, err := resolveToken(c, ho, getenv, log) // tokenstate.go
	if err != nil {
		return err
	}
	c.token = token
	tokens, err := loadPrincipals(c, log)
	if err != nil {
		return err
	}
	s := &server{c: c, log: log, serveErr: make(chan serveResult, 1)}
	defer s.cleanup() // what the steps below leave to run's return, the latest first
	hl, ln, useTLS, err := s.listen(ctx, ho)
	if err != nil {
		return err
	}
	addr := hl.Addr().String()
	if s.cgroups, err = openCgroups(ctx, c.cgroupRoot, log); err != nil {
		ln.Close()
		return err
	}
	ho.Mark("cgroups")
	node, err := s.clusterNode(addr, useTLS, ln, ho)
	if err != nil {
		return err
	}
	if err := s.newRegistry(node, ln); err != nil {
		return err
	}
	if stopped, err := s.joinCluster(ctx, node, ho, ln); stopped || err != nil {
		return err
	}
	warnWindow(c, s.reg.Options(), log)
	listeners := map[string]*gateway.HandoverListener{"main": hl}
	metricsOnMain, err := s.serveMetricsAndPprof(ho, listeners, ln, stdout)
	if err != nil {
		return err
	}
	if err := s.newGateway(tokens, addr, useTLS, node, metricsOnMain, ln); err != nil {
		return err
	}
	s.newReaper()
	ho.Mark("setup")

	// After an upgrade the listener serves before the sessions are adopted: what needs them
	// (WebSocket upgrades, /readyz) waits for the adoption (internal/upgrade's adoption gate).
	s.handler = ho.Gate(s.gw)
	s.serveMain(ln)
	ho.Mark("serve")
	s.adopt(ctx, ho)
	s.keepRecordings(ctx)
	printStarted(stdout, c, addr, useTLS, generated, keptAt)
	s.keepPidFile()
	s.logStarted(addr, ho)
	s.newUpgrader(ctx, ho, listeners, generated)
	return s.serve(ctx, ho)
}

// HTTP timeouts of every server (main, metrics, pprof). A request head must arrive within
// readHeaderTimeout and the whole request within readTimeout; an upgraded WebSocket clears them
// (gorilla's Upgrade) and runs on mux's own deadlines.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 20 * time.Second
)

// newServer is an http.Server with read and idle timeouts: no connection stays open without
// a request in flight for longer than idle.
func newServer(h http.Handler, idle time.Duration) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		IdleTimeout: idle}
}
