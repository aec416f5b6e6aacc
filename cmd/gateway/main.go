// Command gateway runs muxterm: a WebSocket gateway that multiplexes PTY sessions over one
// socket. main only parses flags and environment, wires the packages and handles signals.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/muxterm/muxterm/frontend"
	"github.com/muxterm/muxterm/gateway"
	"github.com/muxterm/muxterm/internal/earlysignal"
	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/reaper"
	"github.com/muxterm/muxterm/session"
)

// version is set with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	if handled, code := handoverCheck(os.Args[1:], os.Stdout); handled { // upgrade.go
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { // also one caught before NotifyContext (internal/earlysignal, upgrade.go)
		<-earlysignal.Stop
		stop()
	}()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "muxterm:", err)
		os.Exit(1)
	}
}

// config is every flag, each with a MUXTERM_* environment twin.
type config struct {
	listen       string
	token        string
	shell        string
	scrollback   byteSize
	window       byteSize
	idleGrace    time.Duration
	reapInterval time.Duration
	killGrace    time.Duration
	resumeHold   time.Duration
	allowOrigin  listFlag
	allowHost    listFlag
	allowCmd     listFlag
	maxSessions  int
	maxChannels  int
	shutdownWait time.Duration
	logLevel     string
	metrics      bool
	metricsAddr  string
	pprofAddr    string
	sec          securityConfig // security.go
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	c := &config{scrollback: 1 << 20, window: mux.DefaultWindow}
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8222", "address to listen on (host:port)")
	fs.StringVar(&c.token, "token", "", "access token (default: generated and printed)")
	fs.StringVar(&c.shell, "shell", "", "shell for new sessions (default: $SHELL, else /bin/sh)")
	fs.Var(&c.scrollback, "scrollback", "scrollback ring per session, bytes (suffixes KiB, MiB)")
	fs.Var(&c.window, "window", "flow-control window per channel, bytes (suffixes KiB, MiB)")
	fs.DurationVar(&c.idleGrace, "idle-grace", 15*time.Minute, "reap sessions unwatched for longer than this")
	fs.DurationVar(&c.reapInterval, "reap-interval", 30*time.Second, "time between reaper sweeps")
	fs.DurationVar(&c.killGrace, "kill-grace", 250*time.Millisecond, "kill escalation step: HUP, wait, TERM, wait, KILL")
	fs.DurationVar(&c.resumeHold, "resume-hold", 10*time.Second, "after a socket drops, hold each read-write session's output this long at the offset its client acknowledged, for a byte-exact reattach (0: off)")
	fs.Var(&c.allowOrigin, "allow-origin", "extra origin allowed to open sockets (repeatable)")
	fs.Var(&c.allowHost, "allow-host", "extra Host header value accepted (repeatable)")
	fs.Var(&c.allowCmd, "allow-cmd", "command session.open may run besides the shell, or * for any (repeatable)")
	fs.IntVar(&c.maxSessions, "max-sessions", mux.DefaultMaxSessions, "sessions per principal")
	fs.IntVar(&c.maxChannels, "max-channels", mux.DefaultMaxChannels, "channels per socket")
	fs.DurationVar(&c.shutdownWait, "shutdown-timeout", 5*time.Second, "bound on graceful shutdown")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&c.metrics, "metrics", false, "serve Prometheus metrics at /metrics (behind the token)")
	fs.StringVar(&c.metricsAddr, "metrics-listen", "", "serve /metrics on this address instead, without auth (implies --metrics)")
	fs.StringVar(&c.pprofAddr, "pprof-listen", "", "serve net/http/pprof at /debug/pprof/ on this loopback address, without auth")
	c.sec.register(fs)
	// Environment first, so flags given on the command line win.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "MUXTERM_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v := getenv(name)
		if v == "" {
			return
		}
		if lf, ok := f.Value.(*listFlag); ok {
			for _, item := range strings.Split(v, ",") {
				if item = strings.TrimSpace(item); item != "" {
					_ = lf.Set(item)
				}
			}
			return
		}
		if err := f.Value.Set(v); err != nil && envErr == nil {
			envErr = fmt.Errorf("%s: %w", name, err)
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if c.idleGrace <= 0 || c.reapInterval <= 0 || c.killGrace <= 0 {
		return nil, errors.New("--idle-grace, --reap-interval and --kill-grace must be positive")
	}
	if c.resumeHold < 0 {
		return nil, errors.New("--resume-hold must not be negative")
	}
	if c.pprofAddr != "" {
		if _, err := pprofAddr(c.pprofAddr); err != nil {
			return nil, err
		}
	}
	if c.window < 1024 || c.window > 64<<20 {
		return nil, errors.New("--window must be between 1KiB and 64MiB")
	}
	if c.scrollback < 4096 || c.scrollback > 1<<30 {
		return nil, errors.New("--scrollback must be between 4KiB and 1GiB")
	}
	if err := c.sec.check(); err != nil {
		return nil, err
	}
	return c, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// An upgrade in place hands over listeners, sessions and a generated token (upgrade.go).
	ho, err := takeHandover(log, c.killGrace)
	if err != nil {
		return err
	}
	defer ho.tearDownUnlessAdopted(log, c.killGrace)
	generated := false
	if c.token == "" && c.sec.tokensFile == "" && ho != nil && ho.Token != "" {
		c.token, generated = ho.Token, true
	} else if c.token == "" && c.sec.tokensFile == "" {
		var b [24]byte
		_, _ = rand.Read(b[:])
		c.token = hex.EncodeToString(b[:])
		generated = true
	}
	tokens, err := gateway.LoadPrincipals(c.token, c.sec.tokensFile, log)
	if err != nil {
		return err
	}
	hl, err := listenOrInherit(ho, "main", c.listen)
	if err != nil {
		return err
	}
	listeners := map[string]*gateway.HandoverListener{"main": hl}
	var ln net.Listener = hl
	addr := ln.Addr().String()
	sln, useTLS, err := c.sec.secureListener(ln, log)
	if err != nil {
		ln.Close()
		return err
	}
	ln = sln

	tel, err := otel.Setup(ctx, otel.Options{ServiceVersion: version, Prometheus: c.metrics || c.metricsAddr != ""})
	if err != nil {
		ln.Close()
		return err
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(fctx); err != nil {
			log.Warn("telemetry flush", "err", err)
		}
	}()
	reg := session.NewRegistry(session.Options{Shell: c.shell, ScrollbackBytes: int(c.scrollback),
		KillGrace: c.killGrace, ResumeHold: c.resumeHold, Logger: log, Tracer: tel.Tracer, Instruments: tel.Instruments}, nil)
	if kept := reg.Options().KeptBehind(); c.resumeHold > 0 && int(c.window) > kept {
		log.Warn("--window is larger than what the ring keeps behind a paused reader: bytes in flight when a socket drops can be lost despite --resume-hold",
			"window", int(c.window), "kept", kept, "scrollback", int(c.scrollback))
	}
	var metricsOnMain http.Handler
	var msrv *http.Server
	if c.metricsAddr != "" {
		mln, err := listenOrInherit(ho, "metrics", c.metricsAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("metrics: %w", err)
		}
		listeners["metrics"] = mln
		if !loopbackListener(mln) {
			// Metrics reveal no terminal content, but they are unauthenticated here.
			log.Warn("serving /metrics without auth on a non-loopback address", "metrics-listen", mln.Addr().String())
		}
		mm := http.NewServeMux()
		mm.Handle("GET /metrics", tel.Metrics)
		msrv = &http.Server{Handler: mm, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = msrv.Serve(mln) }()
		defer msrv.Close()
		fmt.Fprintf(stdout, "muxterm: metrics on http://%s/metrics\n", mln.Addr())
	} else if c.metrics {
		metricsOnMain = tel.Metrics
	}
	if c.pprofAddr != "" {
		stop, err := servePprof(c.pprofAddr, stdout)
		if err != nil {
			ln.Close()
			return err
		}
		defer stop()
	}
	dist, err := fs.Sub(frontend.Dist, "dist")
	if err != nil {
		return fmt.Errorf("frontend: %w", err)
	}
	inputRate, openRate := c.sec.rateLimiters()
	gw, err := gateway.New(gateway.Options{
		Registry: reg, Tokens: tokens, TLS: useTLS, MaxSockets: c.sec.maxSockets,
		AllowOrigins: c.allowOrigin, AllowHosts: c.allowHost, ListenAddr: addr,
		AllowCmd: c.allowCmd, Frontend: dist, Logger: log, Version: version,
		Telemetry: tel, Metrics: metricsOnMain,
		Mux: mux.ServerOptions{Window: int(c.window), MaxSessions: c.maxSessions, MaxChannels: c.maxChannels,
			InputRate: inputRate, OpenRate: openRate},
	})
	if err != nil {
		ln.Close()
		return err
	}
	rp := reaper.New(reaper.Options{Registry: reg, Grace: c.idleGrace, Interval: c.reapInterval,
		Logger: log, Telemetry: tel})
	reapCtx, stopReaper := context.WithCancel(context.Background())
	defer stopReaper()
	rp.Start(reapCtx)
	if ho != nil {
		adoptHandover(ho, reg, log)
	}

	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	base := "http://" + addr
	if useTLS {
		base = "https://" + addr
	}
	fmt.Fprintf(stdout, "muxterm: listening on %s\n", base)
	if generated {
		fmt.Fprintf(stdout, "muxterm: open %s/auth?token=%s\n", base, c.token)
	} else {
		fmt.Fprintf(stdout, "muxterm: open %s/auth?token=<your token>\n", base)
	}
	log.Info("muxterm started", "listen", addr, "version", version, "pid", os.Getpid())
	if ho != nil {
		log.Info("upgrade complete", "from", ho.FromVersion, "to", version, "sessions", reg.Len(),
			"took", time.Since(ho.Signalled).Round(time.Microsecond))
	}
	up := newUpgrader(log, c.shutdownWait, listeners, srv, msrv, gw, reg, func() {
		stopReaper()
		select {
		case <-rp.Done():
		case <-time.After(c.shutdownWait):
		}
	})
	if generated {
		up.token = c.token
	}
	up.terminating = func() bool { return ctx.Err() != nil }
wait:
	for !ho.terminate(log) {
		select {
		case <-ctx.Done():
			break wait
		case err := <-serveErr:
			return fmt.Errorf("serve: %w", err)
		case <-upgradeSignals:
			// Returns only if refused (nothing changed) or aborted (shut down below).
			if err := up.upgrade(time.Now()); errors.Is(err, errUpgradeAborted) {
				break wait
			}
		}
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownWait)
	defer cancel()
	stopReaper()
	// Stop accepting first; http.Server.Shutdown does not touch hijacked sockets, so the
	// gateway drains those itself.
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Shutdown(sctx) }()
	gwErr := gw.Shutdown(sctx)
	select { // the reaper's teardowns finish within the shutdown bound, or are abandoned
	case <-rp.Done():
	case <-sctx.Done():
	}
	if err := <-httpDone; err != nil {
		log.Warn("http shutdown", "err", err)
	}
	if gwErr != nil {
		return gwErr
	}
	log.Info("stopped")
	return nil
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// byteSize parses "1048576", "64KiB", "1MiB".
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }
func (b *byteSize) Set(v string) error {
	mult := int64(1)
	s := strings.TrimSpace(v)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			mult, s = u.m, strings.TrimSuffix(s, u.suffix)
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return fmt.Errorf("invalid size %q", v)
	}
	*b = byteSize(n * mult)
	return nil
}
