package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"golang.org/x/term"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/buildinfo"
)

// version and commit are set with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = defaultVersion
	commit  = "unknown"
)

// defaultVersion is version when no -ldflags set it.
const defaultVersion = "0.1.0-dev"

// callTimeout bounds each dial and call.
const callTimeout = 10 * time.Second

func main() {
	a := &app{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(a.run(os.Args[1:]))
}

// app is one invocation: its standard streams, environment and resolved configuration.
type app struct {
	stdin          *os.File
	stdout, stderr io.Writer
	getenv         func(string) string
	cfg            *config

	flagURL, flagToken string
}

// usageError is a command line that makes no sense; it exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func (a *app) run(args []string) int {
	fs := a.flagSet("muxterm")
	var showVersion bool
	fs.BoolVar(&showVersion, "version", false, "")
	fs.BoolVar(&showVersion, "V", false, "")
	if err := fs.Parse(args); err != nil {
		return a.fail(flagError(err))
	}
	if fs.Lookup("help").Value.String() == "true" {
		a.usage(a.stdout)
		return 0
	}
	if showVersion {
		a.printVersion()
		return 0
	}
	args = fs.Args()
	if len(args) == 0 {
		a.usage(a.stderr)
		return 2
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "help":
		a.usage(a.stdout)
		return 0
	case "version":
		a.printVersion()
		return 0
	case "ls", "list":
		err = a.cmdLs(rest)
	case "new":
		return a.exit(a.cmdNew(rest))
	case "attach", "a":
		return a.exit(a.cmdAttach(rest))
	case "kill":
		err = a.cmdKill(rest)
	case "capture":
		err = a.cmdCapture(rest)
	case "send":
		err = a.cmdSend(rest)
	case "exec":
		return a.exit(a.cmdExec(rest))
	case "recordings":
		err = a.cmdRecordings(rest)
	case "play":
		err = a.cmdPlay(rest)
	case "share":
		err = a.cmdShare(rest)
	default:
		return a.fail(usageError{fmt.Sprintf("unknown command %q (muxterm help lists them)", cmd)})
	}
	if err != nil {
		return a.fail(err)
	}
	return 0
}

// exit prints an outcome's line and returns its code.
func (a *app) exit(o outcome, err error) int {
	if err != nil {
		return a.fail(err)
	}
	if o.line != "" {
		fmt.Fprintln(a.stderr, "muxterm:", visibleLines(o.line)) // it may quote the gateway
	}
	return o.code
}

// fail prints err; a usage error ends with the hint to run --help and exits 2.
func (a *app) fail(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(a.stderr, "muxterm:", visibleLines(err.Error())) // it may quote the gateway
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(a.stderr, "Run 'muxterm --help' for usage.")
		return 2
	}
	return 1
}

// flagError is what a flag set's Parse refused: a usage error (flag.ErrHelp passes as is).
func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError{err.Error()}
}

// printVersion prints the version and commit (internal/buildinfo: stamped, else recorded).
func (a *app) printVersion() {
	v, c := buildinfo.Describe(version, defaultVersion, commit)
	fmt.Fprintf(a.stdout, "muxterm %s (commit %s, %s, %s/%s)\n", v, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// flagSet has the flags every command takes.
func (a *app) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&a.flagURL, "url", a.flagURL, "")
	fs.StringVar(&a.flagToken, "token", a.flagToken, "")
	var help bool
	fs.BoolVar(&help, "help", false, "")
	fs.BoolVar(&help, "h", false, "")
	return fs
}

// parse parses a command's flags; with interleave, flags may follow positional arguments (up to
// a --).
func (a *app) parse(fs *flag.FlagSet, args []string, interleave bool) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				a.usage(a.stdout)
			}
			return nil, flagError(err)
		}
		if h := fs.Lookup("help"); h != nil && h.Value.String() == "true" {
			a.usage(a.stdout)
			return nil, flag.ErrHelp
		}
		rest := fs.Args()
		if !interleave || len(rest) == 0 {
			return append(pos, rest...), nil
		}
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// setup resolves the configuration.
func (a *app) setup() error {
	cfg, err := resolveConfig(a.flagURL, a.flagToken, a.getenv)
	if err != nil {
		return err
	}
	if cfg.token == "" {
		hint := ""
		if kept := keptTokenPath(a.getenv); kept != "" {
			if _, err := os.Stat(kept); err == nil {
				hint = fmt.Sprintf(" (a gateway of yours started without --token keeps its token in %s: export MUXTERM_TOKEN=$(cat %s))", kept, kept)
			}
		}
		return fmt.Errorf("no token: set MUXTERM_TOKEN, pass --token, or put `token = ...` in %s (mode 600)%s", cfg.file, hint)
	}
	a.cfg = cfg
	return nil
}

func (cfg *config) dialOptions() client.DialOptions {
	return client.DialOptions{Token: cfg.token, Name: "muxterm-cli"}
}

// dial resolves the configuration and connects.
func (a *app) dial(ctx context.Context) (*client.Client, error) {
	if err := a.setup(); err != nil {
		return nil, err
	}
	c, err := client.Dial(ctx, a.cfg.url, a.cfg.dialOptions())
	if err != nil {
		return nil, a.cfg.explainDial(err)
	}
	return c, nil
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool { return f != nil && term.IsTerminal(int(f.Fd())) }

// termSize is the size of terminal fd.
func termSize(fd int) (int, int, error) { return term.GetSize(fd) }

func (a *app) usage(w io.Writer) {
	fmt.Fprint(w, helpText)
}

const helpText = `muxterm: the terminal client of a muxterm gateway: start, list, attach to and kill PTY sessions that keep running on the gateway, and run commands in them from scripts.

Usage:
  muxterm [--url URL] [--token TOKEN] COMMAND [flags] [args]

Commands:
  ls [--json] [-q]            list your sessions (-q: ids only; --json: session.list's entries)
  new [flags] [-- CMD...]     start a session running CMD (default: the gateway's shell; another
                              CMD needs the gateway's --allow-cmd); print its id
      --name NAME             a label that attach and kill accept instead of the id
      --cwd DIR               working directory on the gateway's host
      --env KEY=VALUE         an extra environment variable (repeatable)
      --cols N, --rows N      size (default: this terminal's, else 80x24)
      --attach                attach right away (then the flags of attach apply)
  attach ID|NAME [flags]      attach this terminal to a session (alias: a): its whole output
                              while the gateway holds it all, else the terminal is cleared and
                              the session's screen painted, modes included; a detach undoes the
                              modes the session set (alternate screen, mouse, keys)
      --detach-keys KEYS      the key sequence that detaches (MUXTERM_DETACH_KEYS; default enter,~,.)
  capture ID|NAME [flags]     print the text on a session's screen (as tmux's capture-pane)
      --ansi                  print a paint that redraws the screen, colours and modes included
      --scrollback N          also the N lines of history above the screen
  send ID|NAME KEYS...        type into a session (as tmux's send-keys): each argument is a key
                              name (Enter, Tab, BTab, Space, BSpace, Escape, Up, Down, Left,
                              Right, Home, End, IC, DC, PPage, NPage, F1 … F12, C-x, M-x) or else
                              text; arrows follow the program's mode (ESC O A under vim)
      -l                      every argument is text, none a key name
  kill ID|NAME...             kill sessions (HUP, then TERM, then KILL) and remove them
  share ID|NAME [flags]       print a link that shows this one session in a browser, read-only
                              unless --write; anyone holding it sees the session until it ends
      --ttl D                 how long the link works (default 1h, at most 168h)
      --write                 the link's page may type and resize
  share ls ID|NAME            list a session's live links (id, mode, open pages, expiry)
  share revoke SHARE...       end links; the pages open with them close
  exec [flags] -- CMD...      run CMD in a new session without a terminal, as kubectl exec and
                              docker exec do: its stdout to stdout, its stderr to stderr; exit
                              with its exit code, and remove the session; Ctrl-C or SIGTERM kills
                              it and ends exec within a second, answered or not
                              (without CMD, --stdin feeds the gateway's shell)
      --name, --cwd, --env, --cols, --rows   as for new
      -i, --stdin             forward stdin to the program; its end closes the program's stdin
                              (with --tty: sends Ctrl-D). Without it the program's stdin is
                              closed at once (with --tty: stdin is not read). For small inputs:
                              the gateway refuses input beyond its limits (64 KiB the program has
                              not read, --max-input-rate)
      -t, --tty               run CMD on a terminal (a PTY) instead: one stream, which the
                              terminal echoes input into and ends lines with CR LF (-it: both)
      --lf                    write LF where the terminal wrote CR LF
  recordings [--json] [ID|NAME]
                              list the recordings of your sessions (a gateway run with --record)
  recordings export ID|NAME [FILE]
                              write a recording's asciicast file to FILE (mode 0600) or stdout
  play ID|NAME|FILE [flags]   play a recording, or a local .cast file, in this terminal
      --speed X               play X times as fast (default 1)
      --idle-limit D          shorten every pause to at most D (default 5s; 0: as recorded)
  version, --version, -V      print the version and commit
  help                        print this

Flags of every command, with their environment twins (a flag wins over its variable):
  --url URL        MUXTERM_URL    the gateway: ws://, wss://, http:// or https:// (the path
                                  defaults to /ws); default ws://127.0.0.1:8222/ws
  --token TOKEN    MUXTERM_TOKEN  the gateway's access token
  Without them, url and token come from $XDG_CONFIG_HOME/muxterm/config (else
  ~/.config/muxterm/config): lines "url = ..." and "token = ...", each at most once, in a
  regular file only you may read (chmod 600). The other flags have no environment twin.

Detach keys (attach): Enter, then ~ and . detach, as in ssh; ~~ sends one ~. --detach-keys takes
a comma-separated list of keys: a character, ctrl-a … ctrl-z, ctrl-@, ctrl-[, ctrl-\, ctrl-],
ctrl-^, ctrl-_, comma, and enter (first only: the rest must start a line); none turns detaching
by keys off. Typing the first key twice sends it once. Examples: "enter,~,." (the default),
"ctrl-],d", "ctrl-p,ctrl-q".

Exit codes: attach exits 0 on detach and with the program's code when it ends (128+N for signal
N); exec exits with the program's code (128+N for signal N; 130 or 143 when Ctrl-C or SIGTERM
killed it; 141 when stdout's reader left, as with | head); 1 for an error or a session closed by
the gateway; 2 for a bad command line.

Examples:
  export MUXTERM_TOKEN=...                    # the token the gateway printed
  muxterm new --name build -- make test       # prints the session id
  muxterm attach build                        # Enter ~ . detaches; attach again later
  muxterm ls
  muxterm send build C-c 'make test' Enter   # type into it from a script
  muxterm capture build                       # what its screen shows now
  muxterm exec -- sh -c 'go test ./...'       # in CI: output streamed, exit code kept
  echo hi | muxterm exec -i -- cat            # prints hi: stdin piped, closed at its end
  muxterm kill build
`
