package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/muxterm/muxterm/cluster"
	"github.com/muxterm/muxterm/frontend"
	"github.com/muxterm/muxterm/gateway"
	"github.com/muxterm/muxterm/internal/cgroup"
	"github.com/muxterm/muxterm/internal/upgrade"
	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/reaper"
	"github.com/muxterm/muxterm/session"

	"go.opentelemetry.io/otel/attribute"
	otelmetric "go.opentelemetry.io/otel/metric"
)

// run's steps, in the order it takes them up to serve (resolveToken, before them, is in
// tokenstate.go); a step's helpers follow it.

// loadPrincipals loads the principals (principal default's token, from --token or generated,
// and --tokens) and refuses a --cluster-token that is one of their tokens.
func loadPrincipals(c *config, log *slog.Logger) (map[string]gateway.Principal, error) {
	tokens, err := gateway.LoadPrincipals(c.token, c.sec.tokensFile, log)
	if err != nil {
		return nil, err
	}
	if _, clash := tokens[c.cl.token]; c.cl.on() && clash {
		// The cluster token acts for any principal: it must be no principal's own.
		return nil, errors.New("--cluster-token must differ from every principal's token")
	}
	return tokens, nil
}

// atReturn has f run when run returns, whichever way, before what was registered earlier: a
// defer of run's, registered by a step.
func (s *server) atReturn(f func()) { s.cleanups = append(s.cleanups, f) }

// cleanup runs what atReturn registered, the latest first, each as a defer (one that panics
// does not keep the others from running); run defers it.
func (s *server) cleanup() {
	for _, f := range s.cleanups {
		defer f()
	}
}

// listen opens the main listener, or takes the one an upgrade in place handed over (hl, which
// the next upgrade hands on), starts telemetry (s.tel; run's return flushes it, within 5 s) and
// the connection guard (s.guard), and returns the listener to serve: hl behind the guard, with
// TLS if --tls-cert is set (useTLS). Once hl listens, a failure closes it.
func (s *server) listen(ctx context.Context, ho *upgrade.State) (
	hl *gateway.HandoverListener, ln net.Listener, useTLS bool, err error) {
	c, log := s.c, s.log
	if hl, err = upgrade.ListenOrInherit(ho, "main", c.listen); err != nil {
		return nil, nil, false, err
	}
	ho.Mark("listener")
	tel, err := otel.Setup(ctx, otel.Options{ServiceVersion: version,
		Prometheus: c.metrics || c.metricsAddr != ""})
	if err != nil {
		hl.Close()
		return nil, nil, false, err
	}
	s.tel = tel
	s.atReturn(func() {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(fctx); err != nil {
			log.Warn("telemetry flush", "err", err)
		}
	})
	ho.Mark("telemetry")
	s.guard = gateway.NewConnGuard(gateway.GuardOptions{MaxPending: c.sec.maxPending,
		MaxPendingPerAddr: c.sec.maxPendingPerAddr, TLS: c.sec.tlsCert != "", Logger: log,
		Telemetry: tel})
	if limit, reserve := s.guard.Reserve(); limit > 0 {
		log.Debug("descriptor reserve", "limit", limit, "reserve", reserve)
	}
	if ln, useTLS, err = c.sec.secureListener(s.guard.Listener(hl), log); err != nil {
		hl.Close()
		return nil, nil, false, err
	}
	return hl, ln, useTLS, nil
}

// clusterNode makes this gateway's cluster node, not started, with --cluster-url or
// --cluster-embedded (nil without either); the sessions it counts are s.reg's, which
// newRegistry builds next. On failure it closes ln and, started fresh, this gateway's cgroup
// directory.
func (s *server) clusterNode(addr string, useTLS bool, ln net.Listener, ho *upgrade.State) (
	*cluster.Node, error) {
	if !s.c.cl.on() {
		return nil, nil
	}
	node, err := s.c.cl.newNode(addr, useTLS, func() int { return s.reg.Len() }, s.tel.Instruments,
		s.log)
	if err != nil {
		ln.Close()
		if ho == nil { // an upgrade's directory holds the sessions it hands over
			closeCgroupsEarly(s.cgroups, s.log)
		}
		return nil, err
	}
	return node, nil
}

// newRegistry registers the gauges telemetry reads (the descriptor reserve's uses and, in a
// cluster, the nodes) and builds the session registry (s.reg); in a cluster (node not nil)
// node observes its sessions and, with --record, stores every ended recording for the
// cluster. On failure it closes ln.
func (s *server) newRegistry(node *cluster.Node, ln net.Listener) error {
	c := s.c
	var observer func(session.Event)
	obs := otel.Observed{FDReserveUses: session.FDReserveUses}
	if node != nil {
		observer = node.Observe
		obs.Nodes = node.NodeCounts
	}
	if err := s.tel.Observe(obs); err != nil {
		ln.Close()
		return err
	}
	recOpts := c.rec.options()
	if node != nil && c.rec.dir != "" {
		// In a cluster, an ended recording is also stored for every node (cluster/recordings.go).
		recOpts.OnEnd = node.RecordingEnded
		node.SetRecordings(recOpts.Retention)
	}
	s.reg = session.NewRegistry(session.Options{Shell: c.shell, ScrollbackBytes: int(c.scrollback),
		NoScreen: !c.screen, ScreenScrollback: c.screenLines, KillGrace: c.killGrace,
		ResumeHold: c.resumeHold, EchoHold: echoHold(c.echoHold), WindowSize: c.windowSize.WindowSize,
		EnvDeny: c.envDeny, Cgroups: s.cgroups, Logger: s.log, Tracer: s.tel.Tracer,
		Instruments: s.tel.Instruments, Observer: observer, Record: recOpts}, nil)
	return nil
}

// echoHold maps --echo-hold to session.Options.EchoHold, where 0 is the default and a negative
// value is off.
func echoHold(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// joinCluster starts node (cluster.go: start; nothing without a node) and has run's return
// close the membership (s.cl) within 5 s, unless shutdown closed it first. On failure it closes
// ln and, started fresh, this gateway's cgroup directory; a failure while a stop signal ends
// ctx is a stop like any other: logged, then stopped and no error.
func (s *server) joinCluster(ctx context.Context, node *cluster.Node, ho *upgrade.State,
	ln net.Listener) (stopped bool, err error) {
	if node == nil {
		return false, nil
	}
	cl, err := s.c.cl.start(ctx, node, ho, s.log)
	if err != nil {
		ln.Close()
		// No session ran yet: our gw-<pid> directory goes (an upgrade's holds the handed sessions).
		if ho == nil {
			closeCgroupsEarly(s.cgroups, s.log)
		}
		if ctx.Err() != nil {
			// SIGTERM or SIGINT while the cluster formed: a stop like any other.
			s.log.Info("stopped while joining the cluster", "err", err)
			return true, nil
		}
		return false, err
	}
	s.cl = cl
	// On an early return; a graceful shutdown closes it, within its deadline.
	s.atReturn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cl.close(ctx)
	})
	return false, nil
}

// closeCgroupsEarly removes this gateway's cgroup directory when it stops before serving (no
// session ran in it), so that nothing of it is left for a later start's sweep.
func closeCgroupsEarly(cgroups *cgroup.Tree, log *slog.Logger) {
	if cgroups == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cgroups.Close(ctx); err != nil {
		log.Warn("cgroups: removing this gateway's directory", "err", err)
	}
}

// warnWindow warns when --resume-hold is on and --window is larger than what the ring keeps
// behind a paused reader with the registry's options o, naming the --scrollback or --window
// that would fit.
func warnWindow(c *config, o session.Options, log *slog.Logger) {
	kept := o.KeptBehind()
	if c.resumeHold <= 0 || int(c.window) <= kept {
		return
	}
	var fixes []string
	if sb := scrollbackFor(o, int(c.window)); sb > 0 {
		fixes = append(fixes, fmt.Sprintf("--scrollback to at least %s", byteSize(sb)))
	}
	if kept >= 1024 { // --window's least
		fixes = append(fixes, fmt.Sprintf("--window to at most %s", byteSize(kept)))
	}
	fix := "set " + strings.Join(fixes, ", or ")
	log.Warn("--window is larger than what the ring keeps behind a paused reader: bytes in "+
		"flight when a socket drops can be lost despite --resume-hold; "+fix,
		"window", int(c.window), "kept", kept, "scrollback", int(c.scrollback))
}

// serveMetricsAndPprof starts the metrics server with --metrics-listen, on the listener an
// upgrade in place handed over as "metrics" or a new one (added to listeners, which the next
// upgrade hands on), and the pprof server with --pprof-listen; run's return closes both (the
// metrics server current then: resume replaces it). It returns the handler of /metrics on the
// main server: tel.Metrics with --metrics alone, nil otherwise. On failure it closes ln.
func (s *server) serveMetricsAndPprof(ho *upgrade.State,
	listeners map[string]*gateway.HandoverListener, ln net.Listener, stdout io.Writer) (
	metricsOnMain http.Handler, err error) {
	c, log := s.c, s.log
	if c.metricsAddr != "" {
		mln, err := upgrade.ListenOrInherit(ho, "metrics", c.metricsAddr)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("metrics: %w", err)
		}
		listeners["metrics"] = mln
		if !loopbackListener(mln) {
			// Metrics reveal no terminal content, but they are unauthenticated here.
			log.Warn("serving /metrics without auth on a non-loopback address",
				"metrics-listen", mln.Addr().String())
		}
		s.metricsMux = http.NewServeMux()
		s.metricsMux.Handle("GET /metrics", s.tel.Metrics)
		s.serveMetrics(mln)
		s.atReturn(func() { s.msrv.Close() }) // the one current at the return (resume replaces it)
		fmt.Fprintf(stdout, "muxterm: metrics on http://%s/metrics\n", mln.Addr())
	} else if c.metrics {
		metricsOnMain = s.tel.Metrics
	}
	if c.pprofAddr != "" {
		stop, err := servePprof(c.pprofAddr, c.sec.httpIdle, stdout)
		if err != nil {
			ln.Close()
			return nil, err
		}
		s.atReturn(stop)
	}
	return metricsOnMain, nil
}

// newGateway builds the gateway (s.gw) on the registry: tokens' principals on addr (useTLS: it
// serves TLS), the cluster's token, node name and remote sessions in a cluster (node not nil),
// and metricsOnMain as its /metrics (nil: none). If gateway.New fails it closes ln.
func (s *server) newGateway(tokens map[string]gateway.Principal, addr string, useTLS bool,
	node *cluster.Node, metricsOnMain http.Handler, ln net.Listener) error {
	c := s.c
	var remote mux.Remote // nil, not a nil *cluster.Node, outside a cluster
	var clusterToken, nodeName string
	if node != nil {
		clusterToken, nodeName = c.cl.token, c.cl.node
		remote = node
	}
	dist, err := fs.Sub(frontend.Dist, "dist")
	if err != nil {
		return fmt.Errorf("frontend: %w", err)
	}
	inputRate, openRate := c.sec.rateLimiters()
	gw, err := gateway.New(gateway.Options{
		Registry: s.reg, Tokens: tokens, TLS: useTLS, MaxSockets: c.sec.maxSockets,
		AllowOrigins: c.allowOrigin, AllowHosts: c.allowHost, ListenAddr: addr, BasePath: c.basePath,
		AllowCmd: c.allowCmd, Frontend: dist, Logger: s.log, Version: version,
		Telemetry: s.tel, Metrics: metricsOnMain,
		ClusterToken: clusterToken, Remote: remote, Node: nodeName,
		Mux: mux.ServerOptions{Window: int(c.window), MaxSessions: c.maxSessions,
			MaxChannels: c.maxChannels, InputRate: inputRate, OpenRate: openRate},
	})
	if err != nil {
		ln.Close()
		return err
	}
	s.gw = gw
	return nil
}

// newReaper makes the idle reaper (s.rp) and starts its loop; run's return stops the loop
// current then (resume starts another).
func (s *server) newReaper() {
	s.rp = reaper.New(reaper.Options{Registry: s.reg, Grace: s.c.idleGrace,
		Interval: s.c.reapInterval, Logger: s.log, Telemetry: s.tel})
	s.startReaper()
	s.atReturn(func() { s.stopReaper() }) // the one current at the return (resume replaces it)
}

// adopt, after an upgrade in place (nothing when started fresh, ho nil), adopts the sessions
// handed over into the registry while the main server serves behind the adoption gate, marks
// close-on-exec what is still inheritable, makes this process the reaper of orphaned
// descendants, then opens the gate and logs the upgrade's timeline.
func (s *server) adopt(ctx context.Context, ho *upgrade.State) {
	if ho == nil {
		return
	}
	log := s.log
	upgrade.HoldForTest(log) // nothing unless built for that test
	upgrade.Adopt(ho, s.reg, log)
	s.tel.Instruments.Upgrades.Add(ctx, 1, otelmetric.WithAttributes(
		attribute.String(otel.AttrUpgradeOutcome, otel.UpgradeAdopted)))
	// What is still inheritable now was not handed over to be adopted: what an image older
	// than cloexec.go inherited from its launcher and passed on unmarked. Nothing has been
	// spawned yet (the gate holds every WebSocket).
	if err := closeOnExecInherited(); err != nil { // cloexec.go
		log.Warn("inherited descriptors", "err", err)
	}
	// Only now: every adopted child is registered as ours (see main).
	if err := session.AdoptOrphans(log); err != nil {
		log.Warn("child subreaper", "err", err)
	}
	ho.OpenGate()
	ho.Mark("adopt")
	ho.LogTimeline(log)
	ho.ReleaseImage()
}

// keepRecordings, with --record, enforces the recordings' retention now and every
// pruneInterval until run returns (keepPruned) and, in a cluster, stores in the cluster's store
// the recordings this node holds and it lacks. run calls it after the adoption: a handed
// session's recording is active, never pruned.
func (s *server) keepRecordings(ctx context.Context) {
	c, reg, log := s.c, s.reg, s.log
	if c.rec.dir == "" {
		return
	}
	s.atReturn(keepPruned(ctx, reg, log))
	if s.cl != nil {
		// What this node holds and the cluster's store lacks (a crash, a start outside the
		// cluster) is stored now; handed sessions' recordings are active and wait for their end.
		if infos, err := reg.Recordings("", true, ""); err != nil {
			log.Warn("recordings: not compared with the cluster's store", "err", err)
		} else {
			s.cl.node.StoreMissing(c.rec.dir, infos)
		}
	}
}

// printStarted prints to w where the gateway listens (addr; useTLS: https) and the URL to open:
// with the token when the gateway generated it, then where that token is kept (keptAt, if it
// is), else with a placeholder for the operator's token.
func printStarted(w io.Writer, c *config, addr string, useTLS, generated bool, keptAt string) {
	base := "http://" + addr
	if useTLS {
		base = "https://" + addr
	}
	fmt.Fprintf(w, "muxterm: listening on %s\n", base)
	base += strings.TrimSuffix(c.basePath, "/")
	if generated {
		fmt.Fprintf(w, "muxterm: open %s/auth?token=%s\n", base, c.token)
		if keptAt != "" {
			fmt.Fprintf(w, "muxterm: token kept in %s for the next start (--new-token replaces it)\n",
				keptAt)
		}
	} else {
		fmt.Fprintf(w, "muxterm: open %s/auth?token=<your token>\n", base)
	}
}

// keepPidFile writes --pid-file, if set, and has run's return remove it (removePidFile: if it
// still names this process). run calls it once serving, so that the file names a gateway that
// answers; a failure stops nothing (an upgraded image holds sessions by now), it is logged.
func (s *server) keepPidFile() {
	c, log := s.c, s.log
	if c.pidFile == "" {
		return
	}
	if err := writePidFile(c.pidFile); err != nil {
		log.Error("pid file not written", "err", err)
		return
	}
	s.atReturn(func() {
		if err := removePidFile(c.pidFile); err != nil {
			log.Warn("pid file not removed", "err", err)
		}
	})
}

// logStarted logs that the gateway started on addr and, after an upgrade in place (ho not nil),
// that the upgrade is complete: from which version, with how many sessions, how long since its
// signal.
func (s *server) logStarted(addr string, ho *upgrade.State) {
	s.log.Info("muxterm started", "listen", addr, "version", version, "pid", os.Getpid())
	if ho != nil {
		s.log.Info("upgrade complete", "from", ho.FromVersion, "to", version, "sessions", s.reg.Len(),
			"took", time.Since(ho.Signalled).Round(time.Microsecond))
	}
}

// newUpgrader makes the upgrade in place the signal loop runs on SIGUSR2 (s.up): it hands over
// listeners and the sessions, and the token when the gateway generated it; one that cannot
// exec serves again in this image (resume).
func (s *server) newUpgrader(ctx context.Context, ho *upgrade.State,
	listeners map[string]*gateway.HandoverListener, generated bool) {
	servers := []*http.Server{s.srv}
	if s.msrv != nil {
		servers = append(servers, s.msrv)
	}
	uo := upgrade.Options{Logger: s.log, Version: version, Wait: s.c.shutdownWait,
		Binary: ho.BinaryPath(), Listeners: listeners, Servers: servers, Gateway: s.gw,
		Registry: s.reg, StopReaper: s.pauseReaper,
		Terminating: func() bool { return ctx.Err() != nil },
		// An upgrade that stopped serving and then could not exec serves again in this image,
		// on the same sockets.
		Resume: s.resume}
	if generated {
		uo.Token = s.c.token
	}
	s.up = upgrade.New(uo)
}

// scrollbackFor is the smallest scrollback, a whole number of KiB up to 1GiB, whose ring keeps
// window bytes behind a paused reader with o's other settings; 0 if none does.
func scrollbackFor(o session.Options, window int) int {
	keeps := func(kib int) bool {
		// The watermarks follow the scrollback unless set (the gateway sets none).
		o.ScrollbackBytes, o.HighWaterBytes, o.LowWaterBytes = kib<<10, 0, 0
		return o.KeptBehind() >= window
	}
	lo, hi := 4, 1<<20 // KiB
	if !keeps(hi) {
		return 0
	}
	for lo < hi {
		if mid := (lo + hi) / 2; keeps(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi << 10
}
