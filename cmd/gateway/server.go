package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/muxterm/muxterm/gateway"
	"github.com/muxterm/muxterm/internal/cgroup"
	"github.com/muxterm/muxterm/internal/upgrade"
	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/reaper"
	"github.com/muxterm/muxterm/session"

	"go.opentelemetry.io/otel/attribute"
	otelmetric "go.opentelemetry.io/otel/metric"
)

// server is one image's serving, once run's steps (setup.go) have wired it: the main HTTP
// server (and --metrics-listen's) on their listeners, the reaper's loop and the upgrade in place.
// serve runs it until a stop, resume serves again after an upgrade that could not exec,
// shutdown ends it. Everything but the immutable fields is owned by the goroutine that runs
// serve (an upgrade, and so resume, runs on it).
type server struct {
	// Immutable once serve runs:
	c          *config
	log        *slog.Logger
	tel        *otel.Telemetry
	guard      *gateway.ConnGuard
	handler    http.Handler   // the gateway, behind the adoption gate after an upgrade
	metricsMux *http.ServeMux // msrv's handler; nil without --metrics-listen
	gw         *gateway.Gateway
	reg        *session.Registry
	rp         *reaper.Reaper
	cgroups    *cgroup.Tree
	cl         *joined
	up         *upgrade.Upgrader
	serveErr   chan serveResult // the end of every main server's Serve (serveMain)

	// Replaced by resume:
	srv        *http.Server // the main server
	msrv       *http.Server // the metrics server; nil without --metrics-listen
	stopReaper func()       // cancels the reaper loop's context

	// Run's: what its return undoes, registered by its steps (atReturn, cleanup).
	cleanups []func()
}

// startReaper starts a reaper loop under a new context (stopReaper cancels it); false if the
// previous loop has not ended.
func (s *server) startReaper() bool {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopReaper = cancel
	return s.rp.Start(ctx)
}

// pauseReaper stops the reaper's loop for an upgrade and waits for its end, up to
// --shutdown-timeout (a sweep may still be tearing a session down).
func (s *server) pauseReaper() {
	s.stopReaper()
	select {
	case <-s.rp.Done():
	case <-time.After(s.c.shutdownWait):
	}
}

// serveMain serves the gateway on ln with a new main server; its end goes to serveErr.
func (s *server) serveMain(ln net.Listener) {
	srv := newServer(s.handler, s.c.sec.httpIdle)
	srv.ConnState = s.guard.ConnState
	srv.ErrorLog = slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
	s.srv = srv
	go func() { s.serveErr <- serveResult{srv, srv.Serve(ln)} }()
}

// serveMetrics serves /metrics on ln with a new metrics server.
func (s *server) serveMetrics(ln net.Listener) {
	msrv := newServer(s.metricsMux, s.c.sec.httpIdle)
	s.msrv = msrv
	go func() { _ = msrv.Serve(ln) }()
}

// serve runs the signal loop: an upgrade in place on SIGUSR2, until a stop signal (ctx), a stop
// that arrived during the upgrade that started this image (ho), or the main server's failure;
// then it shuts down. An upgrade that could not exec serves again (resume) and the loop goes on.
func (s *server) serve(ctx context.Context, ho *upgrade.State) error {
wait:
	for !ho.StopRequested(s.log) {
		select {
		case <-ctx.Done():
			break wait
		case r := <-s.serveErr:
			if r.srv != s.srv {
				continue // a server an upgrade shut down before this image served again
			}
			err := r.err
			// Still end every session: the processes must not outlive the gateway.
			s.log.Error("serve failed; shutting down", "err", err)
			if serr := s.shutdown(); serr != nil {
				return errors.Join(fmt.Errorf("serve: %w", err), serr)
			}
			return fmt.Errorf("serve: %w", err)
		case <-upgrade.Signals:
			// Returns if refused (nothing changed), failed (this image serves again) or aborted
			// (shut down below).
			err := s.up.Upgrade(time.Now())
			if errors.Is(err, upgrade.ErrAborted) {
				break wait
			}
			if err != nil {
				outcome := otel.UpgradeRefused
				if errors.Is(err, upgrade.ErrFailed) {
					outcome = otel.UpgradeFailed
				}
				s.tel.Instruments.Upgrades.Add(ctx, 1, otelmetric.WithAttributes(attribute.String(otel.AttrUpgradeOutcome, outcome)))
			}
		}
	}
	s.log.Info("shutting down")
	return s.shutdown()
}

// resume serves again after an upgrade that stopped serving and then could not exec, once the
// sessions are back in the registry (Registry.ResumeHandover): new listeners on duplicates of
// the sockets fds (by name; they stay the caller's), a new reaper loop once the previous one
// has ended, the gateway accepting sockets again, new servers. It returns the listeners (before
// TLS) and the servers, which the next upgrade stops. upgrade.Options.Resume.
func (s *server) resume(fds map[string]int) (map[string]*gateway.HandoverListener, []*http.Server, error) {
	lns, err := upgrade.Relisten(fds)
	if err != nil {
		return nil, nil, err
	}
	mainLn, _, err := s.c.sec.secureListener(s.guard.Listener(lns["main"]), s.log)
	if err != nil {
		for _, l := range lns {
			l.Close()
		}
		return nil, nil, err
	}
	// The upgrade stopped the reaper but waited for its loop only up to --shutdown-timeout
	// (a sweep may still be tearing a session down): the loop must end before another starts.
	select {
	case <-s.rp.Done():
	case <-time.After(s.c.shutdownWait):
	}
	if !s.startReaper() {
		s.log.Error("upgrade: the reaper's previous loop has not ended; idle sessions are not reaped in this image")
	}
	s.gw.Resume()
	s.serveMain(mainLn)
	servers := []*http.Server{s.srv}
	if mln := lns["metrics"]; mln != nil {
		s.serveMetrics(mln)
		servers = append(servers, s.msrv)
	}
	return lns, servers, nil
}

// serveResult is the end of one http.Server's Serve.
type serveResult struct {
	srv *http.Server
	err error
}

// shutdown stops the gateway in order: the reaper, new connections, the sockets (within
// --shutdown-timeout), then every kill to its end, whatever the timeout (each is bounded by its
// own escalation), then the cgroups. The last log line and the error name what ran out of time
// or failed; nil means everything ended in time.
func (s *server) shutdown() error {
	c, log, srv, gw, rp, reg, cgroups, cl := s.c, s.log, s.srv, s.gw, s.rp, s.reg, s.cgroups, s.cl
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownWait)
	defer cancel()
	s.stopReaper()
	// Stop accepting first; http.Server.Shutdown does not touch hijacked sockets, so the
	// gateway drains those itself.
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Shutdown(sctx) }()
	var failed, notes []string
	if err := gw.Shutdown(sctx); errors.Is(err, gateway.ErrSocketsOpen) {
		// A client that does not read keeps its close frame from being written; nothing of a
		// session depends on it, and the exit closes the socket: said, not a failure.
		notes = append(notes, fmt.Sprintf("%v (--shutdown-timeout %v), closed by the exit", err, c.shutdownWait))
	} else if err != nil && !errors.Is(err, session.ErrSurvivors) {
		// The kills' own outcome is reported once, from reg.Shutdown below.
		failed = append(failed, fmt.Sprintf("%v (--shutdown-timeout %v)", err, c.shutdownWait))
	}
	<-rp.Done() // the reaper's teardowns are kills too: each is bounded by its own timeout
	if err := <-httpDone; err != nil {
		log.Warn("http shutdown", "err", err)
	}
	if err := reg.Shutdown(context.Background()); err != nil {
		failed = append(failed, err.Error())
	}
	// After the kills: their sessions' removals go to the directory, within a bound of its own.
	dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
	cl.close(dctx)
	dcancel()
	if cgroups != nil {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := cgroups.Close(cctx)
		ccancel()
		if err != nil {
			failed = append(failed, err.Error())
		} else if n > 0 {
			log.Warn("cgroups: killed processes that outlived their session's kill", "processes", n)
		}
	}
	if len(failed) > 0 {
		msg := strings.Join(append(failed, notes...), "; ")
		log.Error("stopped: " + msg)
		return errors.New(strings.Join(failed, "; "))
	}
	log.Info(strings.Join(append([]string{"stopped: every session process ended"}, notes...), "; "))
	return nil
}
