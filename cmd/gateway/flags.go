package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/muxterm/muxterm/gateway"
	"github.com/muxterm/muxterm/internal/buildinfo"
	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/session"
)

// config is every flag, each with a MUXTERM_* environment twin.
type config struct {
	listen       string
	token        string
	renewToken   bool
	shell        string
	scrollback   byteSize
	screen       bool
	screenLines  int
	window       byteSize
	idleGrace    time.Duration
	reapInterval time.Duration
	killGrace    time.Duration
	resumeHold   time.Duration
	echoHold     time.Duration
	allowOrigin  listFlag
	basePath     string
	allowHost    listFlag
	allowCmd     listFlag
	maxSessions  int
	maxChannels  int
	shutdownWait time.Duration
	logLevel     string
	metrics      bool
	metricsAddr  string
	pprofAddr    string
	windowSize   windowSizeFlag
	envDeny      envDenyFlag
	showVersion  bool
	cgroupRoot   string
	pidFile      string
	sec          securityConfig // security.go
	cl           clusterConfig  // cluster.go
	rec          recordConfig   // record.go
}

// defaultText describes the defaults that are not a flag's zero-value text, for --help.
var defaultText = map[string]string{
	"token":           "generated, kept in $XDG_STATE_HOME/muxterm/token, printed",
	"shell":           "$SHELL, else /bin/sh",
	"max-input-burst": "one second of --max-input-rate, at least 64KiB",
	"cgroup-root":     "muxterm-sessions under the gateway's own cgroup when writable, else off",
}

// parse reads the environment twins, then args. --help and --version print to stdout and
// return flag.ErrHelp or errVersion; a command line the flag set refuses is a *usageError.
func parse(args []string, getenv func(string) string, stdout io.Writer) (*config, error) {
	c := &config{scrollback: 1 << 20, window: mux.DefaultWindow}
	fs := c.flagSet()
	// Environment first, so flags given on the command line win.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "version" {
			return // a command, not a setting
		}
		name := envName(f.Name)
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
		if isBool(f) {
			v = boolWord(v)
		}
		if err := f.Value.Set(v); err != nil && envErr == nil {
			envErr = fmt.Errorf("%s: %w", name, err)
		}
	})
	if envErr != nil {
		return nil, &usageError{envErr}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(fs, stdout)
			return nil, err
		}
		return nil, &usageError{err}
	}
	if c.showVersion {
		v, cm := buildinfo.Describe(version, defaultVersion, commit)
		fmt.Fprintf(stdout, "muxterm gateway %s (commit %s)\n", v, cm)
		return nil, errVersion
	}
	if fs.NArg() > 0 {
		return nil, &usageError{fmt.Errorf("unexpected arguments: %q", fs.Args())}
	}
	if err := c.check(); err != nil {
		return nil, &usageError{err}
	}
	return c, nil
}

// check refuses values out of range and flags that contradict each other.
func (c *config) check() error {
	if c.renewToken && (c.token != "" || c.sec.tokensFile != "") {
		return errors.New("--new-token replaces the generated token; with --token or --tokens there is none: drop one of them")
	}
	if c.idleGrace <= 0 || c.reapInterval <= 0 || c.killGrace <= 0 {
		return errors.New("--idle-grace, --reap-interval and --kill-grace must be positive")
	}
	bp, err := gateway.NormBasePath(c.basePath)
	if err != nil {
		return fmt.Errorf("--base-path: %w", err)
	}
	c.basePath = bp
	if c.screenLines < 0 || c.screenLines > 100000 {
		return errors.New("--screen-scrollback must be between 0 and 100000 lines")
	}
	if c.resumeHold < 0 {
		return errors.New("--resume-hold must not be negative")
	}
	if c.echoHold < 0 || c.echoHold > time.Second {
		return errors.New("--echo-hold must be between 0 and 1s")
	}
	if c.pprofAddr != "" {
		if _, err := pprofAddr(c.pprofAddr); err != nil {
			return err
		}
	}
	if c.window < 1024 || c.window > 64<<20 {
		return errors.New("--window must be between 1KiB and 64MiB")
	}
	if c.scrollback < 4096 || c.scrollback > 1<<30 {
		return errors.New("--scrollback must be between 4KiB and 1GiB")
	}
	if err := c.sec.check(); err != nil {
		return err
	}
	if err := c.cl.check(); err != nil {
		return err
	}
	if err := c.rec.check(); err != nil {
		return err
	}
	return nil
}

// flagSet registers every flag of c.
func (c *config) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // main prints one error line and a hint; --help prints usage
	fs.Usage = func() {}
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8222", "address to listen on (`host:port`)")
	fs.StringVar(&c.token, "token", "", "access `token` of principal default, read-write (MUXTERM_TOKEN keeps it out of ps)")
	fs.BoolVar(&c.renewToken, "new-token", false, "replace the generated token kept in $XDG_STATE_HOME/muxterm/token (else ~/.local/state/muxterm/token) with a new one")
	fs.StringVar(&c.shell, "shell", "", "`shell` for new sessions")
	fs.Var(&c.scrollback, "scrollback", "scrollback ring per session, `bytes` (suffixes KiB, MiB)")
	fs.BoolVar(&c.screen, "screen", true, "keep a terminal model of each session's screen, to paint an attach the scrollback ring cannot replay and to answer session.capture")
	fs.IntVar(&c.screenLines, "screen-scrollback", 1000, "`lines` of history each session's screen keeps above its rows and paints above them on an attach (0-100000)")
	fs.Var(&c.window, "window", "flow-control window per channel, `bytes` (suffixes KiB, MiB)")
	fs.DurationVar(&c.idleGrace, "idle-grace", 15*time.Minute, "reap sessions unwatched for longer than this")
	fs.DurationVar(&c.reapInterval, "reap-interval", 30*time.Second, "time between reaper sweeps")
	fs.DurationVar(&c.killGrace, "kill-grace", 250*time.Millisecond, "kill escalation step: HUP, wait, TERM, wait, KILL")
	fs.DurationVar(&c.resumeHold, "resume-hold", 10*time.Second, "after a socket drops, hold each read-write session's output this long at the offset its client acknowledged, for a byte-exact reattach (0: off)")
	fs.DurationVar(&c.echoHold, "echo-hold", session.DefaultEchoHold, "after a keystroke, hold the output of its principal's other sessions until its echo is read, at most this long (0: off)")
	fs.StringVar(&c.basePath, "base-path", "/", "serve the UI, /auth, /ws and every other route under this URL `path` (behind a reverse proxy at a sub-path: /term/)")
	fs.Var(&c.allowOrigin, "allow-origin", "extra `origin` allowed to open sockets (repeatable)")
	fs.Var(&c.allowHost, "allow-host", "extra `host` accepted in the Host header (repeatable)")
	fs.Var(&c.allowCmd, "allow-cmd", "`command` session.open may run besides the shell, or * for any (repeatable)")
	fs.IntVar(&c.maxSessions, "max-sessions", mux.DefaultMaxSessions, "sessions per principal")
	fs.IntVar(&c.maxChannels, "max-channels", mux.DefaultMaxChannels, "channels per socket")
	fs.DurationVar(&c.shutdownWait, "shutdown-timeout", 5*time.Second, "bound on graceful shutdown")
	fs.StringVar(&c.logLevel, "log-level", "info", "`level`: debug, info, warn or error")
	fs.BoolVar(&c.metrics, "metrics", false, "serve Prometheus metrics at /metrics to admin principals (--token, or admin in --tokens)")
	fs.StringVar(&c.metricsAddr, "metrics-listen", "", "serve /metrics on this `address` instead, without auth (implies --metrics)")
	fs.StringVar(&c.cgroupRoot, "cgroup-root", "", "cgroup v2 `directory` under which each session gets a cgroup (a kill ends with cgroup.kill; a start sweeps what a dead gateway left); off: none")
	fs.StringVar(&c.pprofAddr, "pprof-listen", "", "serve net/http/pprof at /debug/pprof/ on this loopback `address`, without auth")
	fs.Var(&c.windowSize, "window-size", "a session's size follows its read-write viewers by this `policy`: latest (the one that last typed or resized), smallest or largest")
	fs.Var(&c.envDeny, "env-deny", "comma-separated `names` (FOO) or prefixes (FOO_*) of the gateway's environment that sessions do not inherit, e.g. secrets (MUXTERM_* and OTEL_* never are)")
	fs.StringVar(&c.pidFile, "pid-file", "", "write this process's pid to this `file` once serving (an upgrade in place keeps the pid), and remove it at exit")
	fs.BoolVar(&c.showVersion, "version", false, "print the version and commit, then exit")
	c.sec.register(fs)
	c.cl.register(fs)
	c.rec.register(fs)
	return fs
}

// isBool reports whether f is a switch (--metrics, not --metrics=x).
func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// boolWord reads on and off, the words --help shows for a switch's default, as true and false;
// anything else goes to strconv.ParseBool as is.
func boolWord(v string) string {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "on":
		return "true"
	case "off":
		return "false"
	}
	return v
}

// envName is a flag's environment twin: --idle-grace is MUXTERM_IDLE_GRACE.
func envName(flagName string) string {
	return "MUXTERM_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagGroups orders --help: what most starts set first, then each concern; every flag is in
// exactly one group (TestHelpGroupsEveryFlag).
var flagGroups = []struct {
	title string
	names []string
}{
	{"Common", []string{"listen", "token", "new-token", "tokens", "shell", "tls-cert", "tls-key",
		"insecure-listen", "base-path", "allow-cmd", "allow-origin", "allow-host", "version"}},
	{"Sessions", []string{"scrollback", "screen", "screen-scrollback", "window", "window-size",
		"idle-grace", "reap-interval", "kill-grace", "resume-hold", "echo-hold", "env-deny", "cgroup-root"}},
	{"Limits", []string{"max-sessions", "max-channels", "max-sockets", "max-input-rate", "max-input-burst",
		"max-open-rate", "max-open-burst", "http-idle-timeout", "max-pending-conns", "max-pending-per-addr"}},
	{"Operations", []string{"log-level", "metrics", "metrics-listen", "pprof-listen", "pid-file",
		"shutdown-timeout"}},
	{"Recordings", []string{"record", "record-on-request", "record-input", "record-max-age", "record-max-bytes"}},
	{"Cluster (several gateways serving one set of sessions)", []string{"cluster", "cluster-embedded",
		"cluster-routes", "cluster-listen", "cluster-store", "node-name", "node-url", "cluster-token",
		"cluster-ca", "cluster-ttl", "cluster-replicas", "placement"}},
}

// usage prints --help: what muxterm is, every flag by group with its environment twin and
// default, and two examples.
func usage(fs *flag.FlagSet, w io.Writer) {
	var b strings.Builder
	b.WriteString("muxterm is a WebSocket gateway that multiplexes many terminal sessions (PTYs) over one socket, for browsers, IDE plugins and scripts.\n\n")
	b.WriteString("Usage: gateway [flags]\n\n")
	b.WriteString("Every flag has an environment twin (shown after it); the command line wins, and list flags add up.\n")
	for _, g := range flagGroups {
		fmt.Fprintf(&b, "\n%s:\n", g.title)
		for _, name := range g.names {
			if f := fs.Lookup(name); f != nil {
				writeFlagHelp(&b, f)
			}
		}
	}
	b.WriteString(`
Examples:
  # the web UI on this machine: prints the URL to open (with a token generated once and kept)
  gateway
  # a fixed token from the environment, sessions sized by their smallest viewer, cloud secrets kept out of the shells
  MUXTERM_TOKEN=$(openssl rand -hex 24) gateway --window-size smallest --env-deny 'AWS_*,GITHUB_TOKEN'
`)
	_, _ = io.WriteString(w, b.String())
}

// writeFlagHelp writes f's lines of --help: name, argument, twin and default, then its text.
func writeFlagHelp(b *strings.Builder, f *flag.Flag) {
	arg, text := flag.UnquoteUsage(f)
	def := f.DefValue
	if d, ok := defaultText[f.Name]; ok {
		def = d
	}
	if d, ok := clusterDefaultText[f.Name]; ok {
		def = d
	}
	switch {
	case isBool(f) && def == "false":
		def = "off"
	case isBool(f) && def == "true":
		def = "on"
	case def == "":
		def = "none"
	}
	head := "  --" + f.Name
	if arg != "" {
		head += " " + arg
	}
	twin := envName(f.Name)
	if f.Name == "version" {
		twin, def = "(no twin)", "-"
	}
	fmt.Fprintf(b, "%-34s %-26s default: %s\n      %s\n", head, twin, def, text)
}

// windowSizeFlag is --window-size.
type windowSizeFlag struct{ session.WindowSize }

func (w *windowSizeFlag) Set(v string) error {
	ws, err := session.ParseWindowSize(v)
	if err != nil {
		return err
	}
	w.WindowSize = ws
	return nil
}

// envDenyFlag is --env-deny: comma-separated names and prefix patterns, which add up.
type envDenyFlag []string

func (e *envDenyFlag) String() string { return strings.Join(*e, ",") }
func (e *envDenyFlag) Set(v string) error {
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		if err := session.CheckEnvPattern(item); err != nil {
			return err
		}
		*e = append(*e, item)
	}
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

func (b byteSize) String() string {
	switch n := int64(b); {
	case n != 0 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n != 0 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	default:
		return strconv.FormatInt(n, 10)
	}
}
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
