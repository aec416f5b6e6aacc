package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// envFlag is a repeatable KEY=VALUE flag.
type envFlag map[string]string

func (e envFlag) String() string { return "" }
func (e envFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	e[k] = v
	return nil
}

func (a *app) cmdLs(args []string) error {
	fs := a.flagSet("ls")
	asJSON := fs.Bool("json", false, "")
	quiet := fs.Bool("q", false, "")
	pos, err := a.parse(fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{"ls takes no arguments"}
	}
	var list []proto.SessionInfo
	err = a.withClient(func(ctx context.Context, c *client.Client) error {
		if list, err = c.List(ctx); err != nil {
			return fmt.Errorf("list sessions: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case *asJSON:
		if list == nil {
			list = []proto.SessionInfo{}
		}
		b, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return err
		}
		_, err = a.stdout.Write(append(jsonVisible(b), '\n'))
		return err
	case *quiet:
		for _, s := range list {
			fmt.Fprintln(a.stdout, visible(s.Session))
		}
		return nil
	}
	rows := [][]string{{"ID", "NAME", "PID", "SIZE", "VIEWERS", "STATUS", "CREATED", "CMD"}}
	now := time.Now()
	for _, s := range list {
		status := "running"
		if s.Exit != nil {
			if s.Exit.Signal != nil {
				status = "signal " + visible(*s.Exit.Signal)
			} else {
				status = fmt.Sprintf("exited %d", s.Exit.Code)
			}
		}
		name := visible(s.Name)
		if name == "" {
			name = "-"
		}
		cmd := strings.Join(visibleAll(s.Cmd), " ")
		if cmd == "" {
			cmd = "(shell)"
		}
		rows = append(rows, []string{visible(s.Session), name, strconv.Itoa(s.Pid), fmt.Sprintf("%dx%d", s.Cols, s.Rows),
			strconv.Itoa(s.Viewers), status, visible(createdText(s.Created, now)), cmd})
	}
	// On a terminal narrower than the table: VIEWERS, SIZE, PID and CREATED go first, then
	// the lines are cut (CMD, the last column, first).
	_, err = io.WriteString(a.stdout, fitTable(rows, a.stdoutWidth(), []int{4, 3, 2, 6}))
	return err
}

func (a *app) cmdKill(args []string) error {
	fs := a.flagSet("kill")
	pos, err := a.parse(fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError{"kill needs a session id or name"}
	}
	return a.withClient(func(ctx context.Context, c *client.Client) error {
		for _, arg := range pos {
			s, err := resolveSession(ctx, c, arg)
			if err != nil {
				return err
			}
			res, err := c.Kill(ctx, s.Session)
			if err != nil {
				return fmt.Errorf("kill %s: %w", s.Session, err)
			}
			if res.Status == "exited" && res.Exit != nil {
				fmt.Fprintf(a.stdout, "removed %s (it had %s)\n", visible(s.Session), visible(describeExit(res.Exit)))
			} else {
				fmt.Fprintf(a.stdout, "killed %s (%s)\n", visible(s.Session), strings.Join(visibleAll(res.Signals), ", "))
			}
		}
		return nil
	})
}

// withClient dials the gateway and runs f with a context that bounds its calls (callTimeout),
// then closes the connection. Where f hands the connection to the attach loop, the loop has
// closed it already (it closes every client it had when it ends) and the second Close does
// nothing.
func (a *app) withClient(f func(ctx context.Context, c *client.Client) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(ctx, c)
}

// openFlags are the flags of new and exec that shape session.open.
type openFlags struct {
	name, cwd  string
	env        envFlag
	cols, rows int
}

// check refuses a size given out of range, before any credential or connection is looked at.
func (o *openFlags) check(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, d := range []struct {
		name string
		n    int
	}{{"cols", o.cols}, {"rows", o.rows}} {
		if set[d.name] && (d.n < 1 || d.n > maxWinsizeDim) {
			return usageError{fmt.Sprintf("--%s %d: must be between 1 and %d (leave it out for this terminal's size)", d.name, d.n, maxWinsizeDim)}
		}
	}
	return nil
}

// maxWinsizeDim is the largest size a PTY takes (a uint16).
const maxWinsizeDim = 65535

// options are session.open's options for cmd, sized like the terminal on stdout or stdin.
func (a *app) openOptions(o *openFlags, cmd []string) client.OpenOptions {
	cols, rows := o.cols, o.rows
	if cols <= 0 || rows <= 0 {
		w, h := 80, 24
		for _, f := range []*os.File{os.Stdout, a.stdin} {
			if isTerminal(f) {
				if tw, th, err := term.GetSize(int(f.Fd())); err == nil && tw > 0 && th > 0 {
					w, h = tw, th
					break
				}
			}
		}
		if cols <= 0 {
			cols = w
		}
		if rows <= 0 {
			rows = h
		}
	}
	var env map[string]string
	if len(o.env) > 0 {
		env = o.env
	}
	return client.OpenOptions{Cmd: cmd, Cwd: o.cwd, Env: env, Cols: cols, Rows: rows, Name: o.name}
}

func (a *app) cmdNew(args []string) (outcome, error) {
	fs := a.flagSet("new")
	o := &openFlags{env: envFlag{}}
	fs.StringVar(&o.name, "name", "", "")
	fs.StringVar(&o.cwd, "cwd", "", "")
	fs.Var(o.env, "env", "")
	fs.IntVar(&o.cols, "cols", 0, "")
	fs.IntVar(&o.rows, "rows", 0, "")
	attach := fs.Bool("attach", false, "")
	keysFlag := fs.String("detach-keys", "", "")
	cmd, err := a.parse(fs, args, false)
	if err != nil {
		return outcome{}, err
	}
	if err := o.check(fs); err != nil {
		return outcome{}, err
	}
	keys, err := a.detachKeys(*keysFlag)
	if err != nil {
		return outcome{}, err
	}
	var out outcome
	err = a.withClient(func(ctx context.Context, c *client.Client) error {
		if *attach {
			// Raw before the session prints: the terminal must not echo what it answers.
			restore, err := a.rawMode()
			if err != nil {
				return err
			}
			defer restore()
		}
		ch, err := c.Open(ctx, a.openOptions(o, cmd))
		if err != nil {
			return explainOpen(err, cmd)
		}
		if !*attach {
			fmt.Fprintln(a.stdout, visible(ch.Session()))
			if err := ch.Detach(ctx); err != nil {
				return fmt.Errorf("detach from the new session %s: %w", ch.Session(), err)
			}
			return nil
		}
		out = a.interactive(c, ch, label(ch.Session(), o.name), 0, false, keys)
		return nil
	})
	return out, err
}

func (a *app) cmdAttach(args []string) (outcome, error) {
	fs := a.flagSet("attach")
	keysFlag := fs.String("detach-keys", "", "")
	pos, err := a.parse(fs, args, true)
	if err != nil {
		return outcome{}, err
	}
	if len(pos) != 1 {
		return outcome{}, usageError{"attach needs one session id or name"}
	}
	keys, err := a.detachKeys(*keysFlag)
	if err != nil {
		return outcome{}, err
	}
	var out outcome
	err = a.withClient(func(ctx context.Context, c *client.Client) error {
		s, err := resolveSession(ctx, c, pos[0])
		if err != nil {
			return err
		}
		// Raw before the replay: the terminal must not echo what it answers.
		restore, err := a.rawMode()
		if err != nil {
			return err
		}
		defer restore()
		// The whole output while the ring holds it from the first byte, else a paint of the
		// screen rather than a tail of bytes (the terminal is cleared for it first).
		ch, res, err := c.AttachWith(ctx, s.Session, client.AttachOptions{Screen: proto.ScreenAuto})
		if err != nil {
			return fmt.Errorf("attach %s: %w", s.Session, err)
		}
		out = a.interactive(c, ch, label(s.Session, s.Name), res.Live, res.Screen > 0, keys)
		return nil
	})
	return out, err
}

func label(id, name string) string {
	if name != "" {
		return fmt.Sprintf("session %s (%s)", id, name)
	}
	return "session " + id
}

// detachKeys parses --detach-keys, else MUXTERM_DETACH_KEYS, else the default.
func (a *app) detachKeys(flagValue string) (detachKeys, error) {
	s := flagValue
	if s == "" {
		s = a.getenv("MUXTERM_DETACH_KEYS")
	}
	if s == "" {
		s = defaultDetachKeys
	}
	k, err := parseDetachKeys(s)
	if err != nil {
		return k, usageError{err.Error()}
	}
	return k, nil
}

// rawMode puts the terminal on stdin in raw mode, if it is one; restore undoes it (and the
// console mode of stdout on Windows).
func (a *app) rawMode() (restore func(), err error) {
	out := prepareOutput(os.Stdout)
	if !isTerminal(a.stdin) {
		return out, nil
	}
	fd := int(a.stdin.Fd())
	st, err := term.MakeRaw(fd)
	if err != nil {
		out()
		return nil, fmt.Errorf("raw mode: %w", err)
	}
	return func() {
		_ = term.Restore(fd, st)
		out()
	}, nil
}

// interactive runs attach's loop on a bound channel whose replay ends at replayEnd.
// On a terminal it keeps a model of what the terminal shows of the session (a paint clears the
// terminal first) and, whatever ends the loop, undoes the session's modes on the terminal.
func (a *app) interactive(c *client.Client, ch *client.Channel, label string, replayEnd int64, paint bool, keys detachKeys) outcome {
	inTerm := isTerminal(a.stdin)
	o := loopOpts{label: label, keys: keys, stdin: a.stdin, sizeFd: -1, replayEnd: replayEnd,
		sentinel: inTerm && isTerminal(os.Stdout)}
	if inTerm {
		o.sizeFd = int(a.stdin.Fd())
	}
	if isTerminal(os.Stdout) {
		o.scr = newLocalScreen(ch.Size())
		if paint {
			_, _ = io.WriteString(a.stdout, clearSeq)
		}
		defer o.scr.restore(a.stdout)
	}
	return a.loop(c, ch, ch.Session(), o)
}

func (a *app) cmdExec(args []string) (outcome, error) {
	fs := a.flagSet("exec")
	o := &openFlags{env: envFlag{}}
	fs.StringVar(&o.name, "name", "", "")
	fs.StringVar(&o.cwd, "cwd", "", "")
	fs.Var(o.env, "env", "")
	fs.IntVar(&o.cols, "cols", 0, "")
	fs.IntVar(&o.rows, "rows", 0, "")
	var stdin, tty bool
	fs.BoolVar(&stdin, "stdin", false, "")
	fs.BoolVar(&stdin, "i", false, "")
	fs.BoolVar(&tty, "tty", false, "")
	fs.BoolVar(&tty, "t", false, "")
	lf := fs.Bool("lf", false, "")
	cmd, err := a.parse(fs, splitShortFlags(args), false)
	if err != nil {
		return outcome{}, err
	}
	if len(cmd) == 0 && !stdin {
		return outcome{}, usageError{"exec needs a command (muxterm exec -- CMD...), or --stdin to feed the gateway's shell"}
	}
	if err := a.setup(); err != nil {
		return outcome{}, err
	}
	// Catch stop signals before the session exists: one that came between the open and the
	// loop would otherwise end muxterm by default and leave the session running for good.
	sigs := catchStopSignals()
	defer signal.Stop(sigs)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	// A stop signal while connecting ends the connect at once; DialOpen then leaves no session
	// running (it kills one its open started), so nothing is left to the loop. It waits up to
	// stopWait for that: a gateway that does not answer the kill leaves the session to its
	// reaper.
	type opened struct {
		c   *client.Client
		ch  *client.Channel
		err error
	}
	done := make(chan opened, 1)
	oo := a.openOptions(o, cmd)
	oo.Pipes = !tty // as kubectl exec and docker exec: a terminal only when asked for
	go func() {
		c, ch, err := client.DialOpen(ctx, a.cfg.url, a.cfg.dialOptions(), oo)
		done <- opened{c, ch, err}
	}()
	var stopped os.Signal
	var r opened
	select {
	case r = <-done:
	case stopped = <-sigs:
		cancel()
		select {
		case r = <-done:
		case <-time.After(stopWait):
			return outcome{code: 128 + signalNumber(stopped), line: fmt.Sprintf("%s while opening the session; no answer within %v: a session it opened is left to the gateway's reaper", stopped, stopWait)}, nil
		}
	}
	c, ch, err := r.c, r.ch, r.err
	if stopped != nil {
		if err == nil {
			// The signal came as DialOpen returned: the loop kills the session, as after it.
			select {
			case sigs <- stopped:
			default: // another stop signal is already waiting there
			}
		} else {
			return outcome{code: 128 + signalNumber(stopped), line: fmt.Sprintf("%s: %v", stopped, err)}, nil
		}
	}
	if err != nil {
		if rpcKind(err) != "" {
			return outcome{}, explainOpen(err, cmd)
		}
		return outcome{}, a.cfg.explainDial(err)
	}
	lo := loopOpts{label: label(ch.Session(), o.name), sizeFd: -1, exec: true, lf: *lf, sigs: sigs, pipes: !tty}
	if stdin {
		lo.stdin = a.stdin
		if tty {
			lo.eof = []byte{4} // the terminal's end of file
		}
	}
	return a.loop(c, ch, ch.Session(), lo), nil
}

// splitShortFlags spells exec's combined short flags out: -it and -ti become -i -t, as docker
// and kubectl take them. Arguments after the command's -- are left alone.
func splitShortFlags(args []string) []string {
	out := make([]string, 0, len(args)+1)
	for i, arg := range args {
		if arg == "--" {
			return append(out, args[i:]...)
		}
		if arg == "-it" || arg == "-ti" {
			out = append(out, "-i", "-t")
			continue
		}
		out = append(out, arg)
	}
	return out
}
