// Command muxbench measures a muxterm gateway over its wire protocol: throughput, fairness,
// echo latency, connect time, scale, kill latency, churn and resume, each against baselines
// measured in the same run (a PTY read directly, and a minimal PTY-to-WebSocket pass-through).
//
// It starts the gateway binary itself on 127.0.0.1:0, samples it through /proc, and stops it at
// the end; every process it starts, directly or through the gateway, carries MUXBENCH_RUN in
// its environment and is killed before muxbench exits.
//
//	go run ./cmd/muxbench -short                      # about 3 minutes
//	go run ./cmd/muxbench -json out.json -md out.md    # the full run
//	go run ./cmd/muxbench -short -only echo,kill       # a subset
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is every knob; it is recorded in the report.
type config struct {
	Short         bool          `json:"short"`
	Reps          int           `json:"reps"`
	Gateway       string        `json:"gateway"`
	Bytes         int64         `json:"bytes"`          // input to base64 for the single-session stream
	Window        time.Duration `json:"window_ns"`      // measuring window of the flooding runs
	EchoN         int           `json:"echo_n"`         // keystrokes per repetition, back to back and under load
	EchoIdleN     int           `json:"echo_idle_n"`    // keystrokes per repetition from idle
	IdlePause     time.Duration `json:"idle_pause_ns"`  // the pause before each keystroke from idle
	EchoLean      bool          `json:"echo_lean"`      // also time the echo through the lean client (lean.go)
	ConnectN      int           `json:"connect_n"`      // samples per repetition
	ScaleSessions int           `json:"scale_sessions"` // sessions held on one socket
	KillN         int           `json:"kill_n"`         // kills per repetition (plain, escapee)
	KillTrapN     int           `json:"kill_trap_n"`    // kills per repetition of the HUP/TERM-ignoring shell
	Churn         int           `json:"churn"`          // open → echo → kill cycles
	ChurnWorkers  int           `json:"churn_workers"`  // concurrent cycles on the one socket
	Resume        int           `json:"resume"`         // detach/reattach cycles
	Only          []string      `json:"only,omitempty"` // sections to run; empty: all
	Seed          uint64        `json:"seed"`           // for the resume points
	JSON          string        `json:"json,omitempty"` // report path
	MD            string        `json:"md,omitempty"`   // Markdown path (also printed)
	CPUProfile    string        `json:"cpuprofile,omitempty"`
	GatewayArgs   []string      `json:"gateway_args,omitempty"` // extra flags for every gateway
	Variants      []string      `json:"variants,omitempty"`     // -variant: compare these gateways (compare.go)
	TraceGateway  string        `json:"trace_gateway,omitempty"`
	EchotraceOut  string        `json:"echotrace_out,omitempty"` // -only echotrace: save the raw ftrace text here

	UpgradeSessions int `json:"upgrade_sessions"` // sessions held across each upgrade in place (upgrade.go)
}

// sectionTimeout bounds each section, so that a gateway that stops answering fails the section
// instead of hanging the run.
const sectionTimeout = 30 * time.Minute

// sectionNames in run order.
var sectionNames = []string{"throughput", "aggregate", "echo", "connect", "kill", "scale", "churn", "resume", "upgrade", "cluster", "cluster-failover", "clusterpool", "echotrace"}

// namedOnlySections run only when -only names them: never in the default or -short runs.
var namedOnlySections = []string{"cluster-failover", "clusterpool", "echotrace"}

func parseFlags(args []string) (config, error) {
	var c config
	var bytes, only string
	fs := flag.NewFlagSet("muxbench", flag.ContinueOnError)
	fs.BoolVar(&c.Short, "short", false, "a run of about 3 minutes (smaller counts; flags given explicitly win)")
	fs.IntVar(&c.Reps, "reps", 5, "interleaved repetitions of each measurement")
	fs.StringVar(&c.Gateway, "gateway", "bin/gateway", "gateway binary to run")
	fs.StringVar(&bytes, "bytes", "256MiB", "input bytes of the single-session stream (head -c N /dev/zero | base64); KiB/MiB/GiB suffixes")
	fs.DurationVar(&c.Window, "window", 3*time.Second, "measuring window of the 8- and 64-session floods")
	fs.IntVar(&c.EchoN, "echo-n", 5000, "keystrokes per repetition, back to back and under load")
	fs.IntVar(&c.EchoIdleN, "echo-idle-n", 300, "keystrokes per repetition from idle")
	fs.DurationVar(&c.IdlePause, "idle-pause", 20*time.Millisecond, "pause before each keystroke from idle")
	fs.BoolVar(&c.EchoLean, "echo-lean", false, "a diagnostic: also time the echo through muxbench's lean protocol client, which reads the socket in the measuring goroutine (rows \"echo (lean client)\")")
	fs.IntVar(&c.ConnectN, "connect-n", 50, "connect samples per repetition")
	fs.IntVar(&c.ScaleSessions, "sessions", 1000, "sessions held on one socket")
	fs.IntVar(&c.KillN, "kill-n", 50, "kills per repetition of the plain and escapee shells")
	fs.IntVar(&c.KillTrapN, "kill-trap-n", 8, "kills per repetition of the shell that ignores HUP and TERM")
	fs.IntVar(&c.Churn, "churn", 10000, "open → echo → kill cycles")
	fs.IntVar(&c.ChurnWorkers, "churn-workers", 4, "concurrent churn cycles on the one socket")
	fs.IntVar(&c.Resume, "resume", 1000, "detach/reattach cycles")
	fs.IntVar(&c.UpgradeSessions, "upgrade-sessions", 1000, "sessions held across each upgrade in place (SIGUSR2), 8 of them streaming")
	fs.StringVar(&only, "only", "", "comma-separated sections to run: "+strings.Join(sectionNames, ","))
	fs.Uint64Var(&c.Seed, "seed", 1, "seed for the resume points")
	fs.StringVar(&c.JSON, "json", "bench-results/muxbench.json", "write the report as JSON here (empty: don't)")
	fs.StringVar(&c.MD, "md", "", "also write the Markdown table here")
	fs.Func("gateway-arg", "an extra flag for the gateway, e.g. -gateway-arg=--window=32KiB (repeatable)", func(v string) error {
		c.GatewayArgs = append(c.GatewayArgs, v)
		return nil
	})
	fs.Func("variant", "compare gateways instead of the sections: name=BIN [--flag=value ...] (repeatable); echo, throughput and aggregate, interleaved with the baselines", func(v string) error {
		c.Variants = append(c.Variants, v)
		return nil
	})
	fs.StringVar(&c.TraceGateway, "trace-gateway", "", "with -variant: save a 2 s execution trace of each variant's gateway during echo into PREFIX.<variant>.<mode>.trace")
	fs.StringVar(&c.EchotraceOut, "echotrace-out", "", "with -only echotrace: also save the raw ftrace text into PATH")
	fs.StringVar(&c.CPUProfile, "cpuprofile-gateway", "", "profile the main gateway's CPU into PATH.1, PATH.2, … (5 s each, through its --pprof-listen; perf record into PATH for a binary without it)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.Short {
		short := map[string]func(){
			"bytes":       func() { bytes = "64MiB" },
			"window":      func() { c.Window = time.Second },
			"echo-n":      func() { c.EchoN = 1000 },
			"echo-idle-n": func() { c.EchoIdleN = 50 },
			"connect-n":   func() { c.ConnectN = 20 },
			"kill-n":      func() { c.KillN = 20 },
			"kill-trap-n": func() { c.KillTrapN = 4 },
			"churn":       func() { c.Churn = 1000 },
			"resume":      func() { c.Resume = 200 },
		}
		for name, apply := range short {
			if !set[name] {
				apply()
			}
		}
	}
	n, err := parseSize(bytes)
	if err != nil {
		return c, fmt.Errorf("-bytes: %w", err)
	}
	c.Bytes = n
	if only != "" {
		for _, s := range strings.Split(only, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(sectionNames, s) || len(c.Variants) > 0 && !slices.Contains(compareSections, s) {
				return c, fmt.Errorf("-only: unknown section %q (have %s)", s, strings.Join(sectionNames, ","))
			}
			c.Only = append(c.Only, s)
		}
	}
	if c.Reps < 1 || c.EchoN < 1 || c.EchoIdleN < 1 || c.ConnectN < 1 || c.ScaleSessions < 1 ||
		c.KillN < 1 || c.KillTrapN < 1 || c.Churn < 1 || c.ChurnWorkers < 1 || c.Resume < 1 || c.Bytes < 1 || c.UpgradeSessions < upgradeStreams {
		return c, errors.New("counts must be positive")
	}
	return c, nil
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = rest, u.m
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	return n * mult, nil
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == passthroughArg {
		if err := servePassthrough(); err != nil {
			fmt.Fprintln(os.Stderr, "muxbench pass-through:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "muxbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "muxbench:", err)
		os.Exit(1)
	}
}

// bench is one run: the configuration, the processes it started, and the report it builds.
type bench struct {
	cfg    config
	tagKey string
	tagVal string
	log    io.Writer
	rng    *mrand.Rand

	gwArgs   []string       // extra gateway flags: lifted rate limits, -gateway-arg
	pprof    bool           // profile the main gateway through its --pprof-listen
	gw       *gatewayProc   // the main gateway (throughput, echo, connect, kill, resume)
	gateways []*gatewayProc // every gateway started, to stop at the end
	pt       *passthrough
	report   *Report
	// neighbour, while runEcho runs: the streaming neighbour's MiB/s during each repetition's
	// keystrokes, by client (raw, pass, mux, lean).
	neighbour map[string][]float64
	// leanStats, while runEcho runs: per repetition, the lean client's ack frames during the
	// keystrokes ("acks: MODE") and the bytes its streaming neighbour's session.gap reported
	// skipped ("stream gap bytes: MODE").
	leanStats map[string][]int64
	// tracefsRoots, if not nil, replaces defaultTracefsRoots for the echotrace section (tests).
	tracefsRoots []string
	// tracefsOps, if set, make and remove the echotrace section's tracefs instance (tests).
	tracefsOps tracefsOps
	// tracingOn, if not nil, is called by the echotrace section once tracing is on (tests).
	tracingOn func()
	// echoKeyTimeout, if not 0, replaces echotraceKeyTimeout (tests).
	echoKeyTimeout time.Duration
}

func (b *bench) tag() string { return b.tagKey + "=" + b.tagVal }

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "muxbench: "+format+"\n", args...)
}

func run(ctx context.Context, cfg config, stdout, stderr io.Writer) (err error) {
	if len(cfg.Variants) > 0 {
		return runVariants(ctx, cfg, stdout, stderr)
	}
	if _, err := os.Stat(cfg.Gateway); err != nil {
		return fmt.Errorf("gateway binary %s: %w (build it with: go build -o bin/gateway ./cmd/gateway)", cfg.Gateway, err)
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return fmt.Errorf("run id: %w", err)
	}
	start := time.Now()
	b := &bench{cfg: cfg, tagKey: "MUXBENCH_RUN", tagVal: hex.EncodeToString(id[:]), log: stderr,
		rng: mrand.New(mrand.NewPCG(cfg.Seed, 0x6d7578)),
		report: &Report{Tool: "muxbench", Date: start.UTC().Format(time.RFC3339), Machine: readMachine(),
			Command: strings.Join(os.Args, " "), Config: cfg, Gateway: cfg.Gateway, Details: map[string]any{}}}
	b.report.Machine.Go = runtime.Version()
	flags, err := gatewayFlags(cfg.Gateway)
	if err != nil {
		return err
	}
	for _, l := range liftedLimits {
		if flags[l[0]] {
			b.gwArgs = append(b.gwArgs, "--"+l[0], l[1])
		}
	}
	if b.report.GatewaySHA256, err = fileSHA256(cfg.Gateway); err != nil {
		return err
	}
	b.gwArgs = append(b.gwArgs, cfg.GatewayArgs...)
	b.pprof = cfg.CPUProfile != "" && flags["pprof-listen"]
	b.report.GatewayArgs = strings.Join(b.gwArgs, " ")
	if cfg.CPUProfile != "" {
		note := fmt.Sprintf("%s.1, %s.2, … are 5 s CPU profiles of the main gateway from its --pprof-listen (read them with `go tool pprof %s %s.*`)", cfg.CPUProfile, cfg.CPUProfile, cfg.Gateway, cfg.CPUProfile)
		if !b.pprof {
			note = fmt.Sprintf("the gateway has no --pprof-listen: %s is a `perf record -g` of the main gateway (read it with `perf report -i %s`)", cfg.CPUProfile, cfg.CPUProfile)
		}
		b.report.Notes = append(b.report.Notes, note)
	}
	defer func() {
		if cerr := b.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()

	for _, name := range sectionNames {
		if !runsSection(cfg, name) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		b.logf("== %s", name)
		t := time.Now()
		sctx, cancel := context.WithTimeout(ctx, sectionTimeout)
		err := b.section(sctx, name)
		cancel()
		if err != nil {
			b.logf("%s failed: %v", name, err)
			b.report.Errors = append(b.report.Errors, fmt.Sprintf("%s: %v", name, err))
		}
		b.logf("   %s took %.1fs", name, time.Since(t).Seconds())
	}
	if err := b.cleanup(); err != nil {
		b.report.Errors = append(b.report.Errors, err.Error())
	}
	b.report.Seconds = time.Since(start).Seconds()
	if ctx.Err() != nil {
		b.report.Errors = append(b.report.Errors, "interrupted: "+ctx.Err().Error())
	}
	writeMarkdown(stdout, b.report)
	if cfg.MD != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.MD), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", cfg.MD, err)
		}
		f, err := os.Create(cfg.MD)
		if err != nil {
			return fmt.Errorf("create %s: %w", cfg.MD, err)
		}
		writeMarkdown(f, b.report)
		if err := f.Close(); err != nil {
			return fmt.Errorf("write %s: %w", cfg.MD, err)
		}
	}
	if cfg.JSON != "" {
		if err := writeJSON(cfg.JSON, b.report); err != nil {
			return err
		}
		b.logf("wrote %s", cfg.JSON)
	}
	if len(b.report.Errors) > 0 {
		return fmt.Errorf("%d section(s) failed; see the report", len(b.report.Errors))
	}
	return nil
}

// runsSection reports whether a run of cfg runs section name: every section but those of
// namedOnlySections without -only, else those -only names.
func runsSection(cfg config, name string) bool {
	if len(cfg.Only) == 0 {
		return !slices.Contains(namedOnlySections, name)
	}
	return slices.Contains(cfg.Only, name)
}

func (b *bench) section(ctx context.Context, name string) error {
	switch name {
	case "throughput":
		return b.runThroughput(ctx)
	case "aggregate":
		return b.runAggregate(ctx)
	case "echo":
		return b.runEcho(ctx)
	case "connect":
		return b.runConnect(ctx)
	case "kill":
		return b.runKill(ctx)
	case "scale":
		return b.runScale(ctx)
	case "churn":
		return b.runChurn(ctx)
	case "resume":
		return b.runResume(ctx)
	case "upgrade":
		return b.runUpgrade(ctx) // upgrade.go
	case "cluster":
		return b.runCluster(ctx) // cluster.go
	case "cluster-failover":
		return b.runClusterFailover(ctx) // failover.go
	case "clusterpool":
		return b.runClusterPool(ctx) // clusterpool.go
	case "echotrace":
		return b.runEchotrace(ctx) // echotrace.go
	}
	return fmt.Errorf("unknown section %q", name)
}

// mainGateway starts the shared gateway on first use.
func (b *bench) mainGateway(ctx context.Context) (*gatewayProc, error) {
	if b.gw != nil {
		return b.gw, nil
	}
	var extra []string
	if b.pprof {
		extra = []string{"--pprof-listen", "127.0.0.1:0"}
	}
	g, err := b.startGateway(ctx, 4096, extra...)
	if err != nil {
		return nil, err
	}
	b.gw = g
	if b.cfg.CPUProfile != "" {
		if err := g.startProfile(b.cfg.CPUProfile); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func (b *bench) startGateway(ctx context.Context, maxSessions int, extra ...string) (*gatewayProc, error) {
	g, err := startGateway(ctx, b.cfg.Gateway, maxSessions, append(slices.Clone(b.gwArgs), extra...)...)
	if err != nil {
		return nil, err
	}
	b.gateways = append(b.gateways, g)
	b.logf("   gateway pid %d on %s", g.Pid, g.Addr)
	return g, nil
}

// stopGateway stops one gateway this run started.
func (b *bench) stopGateway(g *gatewayProc) error {
	err := g.stop()
	b.gateways = slices.DeleteFunc(b.gateways, func(x *gatewayProc) bool { return x == g })
	if b.gw == g {
		b.gw = nil
	}
	return err
}

// stopGatewayLater is stopGateway for a defer: an error is recorded in the report.
func (b *bench) stopGatewayLater(g *gatewayProc) {
	if err := b.stopGateway(g); err != nil {
		b.report.Errors = append(b.report.Errors, fmt.Sprintf("stop gateway %d: %v", g.Pid, err))
	}
}

// passthrough starts the pass-through process on first use.
func (b *bench) passthrough(ctx context.Context) (*passthrough, error) {
	if b.pt != nil {
		return b.pt, nil
	}
	pt, err := startPassthrough(ctx, b.tag())
	if err != nil {
		return nil, err
	}
	b.pt = pt
	return pt, nil
}

// mainAndPassthrough returns the shared gateway and the pass-through baseline, starting each on
// first use.
func (b *bench) mainAndPassthrough(ctx context.Context) (*gatewayProc, *passthrough, error) {
	gw, err := b.mainGateway(ctx)
	if err != nil {
		return nil, nil, err
	}
	pt, err := b.passthrough(ctx)
	if err != nil {
		return nil, nil, err
	}
	return gw, pt, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// cleanup stops every gateway and the pass-through, then kills any process of this run that
// is still alive (there should be none). It can be called more than once.
func (b *bench) cleanup() error {
	var errs []error
	for len(b.gateways) > 0 {
		if err := b.stopGateway(b.gateways[0]); err != nil {
			errs = append(errs, err)
		}
	}
	if b.pt != nil {
		b.pt.close()
		b.pt = nil
	}
	if n := sweepTagged(b.tag()); n > 0 {
		errs = append(errs, fmt.Errorf("%d process(es) of this run outlived their gateway or test and were killed", n))
	}
	return errors.Join(errs...)
}

// addRow appends a finished row to the report and logs it.
func (b *bench) addRow(r Row) {
	b.report.Rows = append(b.report.Rows, r)
	verdict := ""
	if r.Met != nil {
		verdict = map[bool]string{true: " [met]", false: " [MISSED]"}[*r.Met]
	}
	ratio := ""
	if r.RatioRaw != nil {
		ratio = " ratio " + fmtStat(r.RatioRaw, "×")
	}
	if r.Mux == nil && r.Pass != nil {
		ratio += " pass-through " + fmtStat(r.Pass, r.Unit)
	}
	if r.Lean != nil {
		ratio += " lean client " + fmtStat(r.Lean, r.Unit)
	}
	b.logf("   %s / %s: %s%s%s", r.Section, r.Name, fmtStat(r.Mux, r.Unit), ratio, verdict)
}

// order returns the variants rotated by rep, so no variant always runs first.
func order[T any](vs []T, rep int) []T {
	k := rep % len(vs)
	return append(slices.Clone(vs[k:]), vs[:k]...)
}
