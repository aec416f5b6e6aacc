// Command pagebench measures muxterm's page against ttyd's in headless Chromium: key to glyph
// (from idle, back to back, and while another terminal of the same origin streams `yes`), bulk
// output (`seq 1 3000000` from Enter to its last line on screen, with long tasks and frame
// gaps), the JavaScript heap after a forced GC, Ctrl-C after a `yes` flood (from the key to the
// prompt on screen), and output xterm.js discarded. Both renderers (DOM and WebGL), interleaved
// repetitions, one run; the two pages at the same window size, font, line height and
// scrollback, both running the same shell (bash without rc files, PS1 "$ ").
//
// ttyd is not part of the repository: scripts/build-ttyd.sh builds it in a scratch folder.
//
//	go run ./cmd/pagebench -ttyd /tmp/ttyd-build/ttyd -reps 5 -json bench-results/page.json -md bench-results/page.md
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// config is every knob; it is recorded in the report.
type config struct {
	Gateway  string `json:"gateway"`
	TTYD     string `json:"ttyd"`
	Chromium string `json:"chromium"`
	TestHook string `json:"testhook"` // the UI's test hook, which the probe drives muxterm's page through
	// pageJS is what every page evaluates before its own scripts: the UI's test hook (muxterm's
	// page hands the hook its app, and the hook sets window.muxterm; ttyd's page never calls
	// it), then the probe. Set by run.
	pageJS    string
	Reps      int           `json:"reps"`
	IdleN     int           `json:"idle_n"`        // keystrokes from idle per repetition
	IdlePause time.Duration `json:"idle_pause_ns"` // the pause before each of them
	KeysN     int           `json:"keys_n"`        // keystrokes back to back, and under load, per repetition
	SeqN      int           `json:"seq_n"`         // seq 1 N
	Flood     time.Duration `json:"flood_ns"`      // how long `yes` floods the terminal before its Ctrl-C
	Width     int           `json:"width"`
	Height    int           `json:"height"`
	TTYDArgs  []string      `json:"ttyd_args,omitempty"` // extra flags for ttyd
	// LoadPage: muxterm's streaming terminal is in a second page, as ttyd's always is, instead
	// of a hidden tab of the measured page.
	LoadPage bool     `json:"load_page,omitempty"`
	Variants []string `json:"variants,omitempty"` // NAME=BIN: more gateways (other builds of the UI) measured beside muxterm
	JSON     string   `json:"json,omitempty"`
	MD       string   `json:"md,omitempty"`
	// CPUProfile: a directory for a CPU profile of each page's bulk output (empty: none).
	CPUProfile string `json:"cpuprofile,omitempty"`
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("pagebench", flag.ContinueOnError)
	fs.StringVar(&c.Gateway, "gateway", "bin/gateway", "muxterm's gateway binary (it serves the embedded UI)")
	fs.StringVar(&c.TTYD, "ttyd", "", "ttyd binary (scripts/build-ttyd.sh builds one); required")
	fs.StringVar(&c.Chromium, "chromium", "/usr/bin/chromium", "Chromium binary")
	fs.StringVar(&c.TestHook, "testhook", "frontend/dist-test/testhook.js", "the UI's test hook (built beside the UI, never embedded in the gateway); the probe drives muxterm's page through it")
	fs.IntVar(&c.Reps, "reps", 5, "interleaved repetitions")
	fs.IntVar(&c.IdleN, "idle-n", 30, "keystrokes from idle per repetition")
	fs.DurationVar(&c.IdlePause, "idle-pause", 300*time.Millisecond, "pause before each keystroke from idle")
	fs.IntVar(&c.KeysN, "keys-n", 60, "keystrokes back to back, and while another terminal streams, per repetition")
	fs.IntVar(&c.SeqN, "seq", 3000000, "bulk output: seq 1 N")
	fs.DurationVar(&c.Flood, "flood", 3*time.Second, "how long `yes` floods the measured terminal before the Ctrl-C that is timed")
	fs.BoolVar(&c.LoadPage, "load-page", false, "while another terminal streams: muxterm's streaming terminal in a second page of the browser, as ttyd's always is, instead of a hidden tab of the measured page")
	fs.IntVar(&c.Width, "width", 1280, "window width")
	fs.IntVar(&c.Height, "height", 800, "window height")
	fs.Func("ttyd-arg", "an extra flag for ttyd, e.g. -ttyd-arg=-t -ttyd-arg=cursorBlink=true (repeatable)", func(v string) error {
		c.TTYDArgs = append(c.TTYDArgs, v)
		return nil
	})
	fs.Func("variant", "another gateway binary (another build of the UI) to measure beside -gateway and ttyd, interleaved: NAME=BIN (repeatable)", func(v string) error {
		name, bin, ok := strings.Cut(v, "=")
		if !ok || name == "" || bin == "" || name == "ttyd" || name == "muxterm" || strings.ContainsAny(name, "/ |") {
			return fmt.Errorf("want NAME=BIN with a NAME other than muxterm and ttyd, without / | or spaces: %q", v)
		}
		if _, err := os.Stat(bin); err != nil {
			return err
		}
		c.Variants = append(c.Variants, v)
		return nil
	})
	fs.StringVar(&c.JSON, "json", "bench-results/page.json", "write the report as JSON here (empty: don't)")
	fs.StringVar(&c.MD, "md", "", "also write the Markdown table here")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "profile each page's JavaScript during the bulk output into DIR/SERVER-RENDERER-REP.cpuprofile (Chrome DevTools' Performance panel opens it); a profiled run's timings are not comparable with an unprofiled one's")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if c.TTYD == "" {
		return c, errors.New("-ttyd is required (scripts/build-ttyd.sh builds ttyd in a scratch folder)")
	}
	for name, p := range map[string]string{"-gateway": c.Gateway, "-ttyd": c.TTYD, "-chromium": c.Chromium, "-testhook": c.TestHook} {
		if _, err := os.Stat(p); err != nil {
			return c, fmt.Errorf("%s: %w", name, err)
		}
	}
	if c.Reps < 1 || c.IdleN < 1 || c.KeysN < 1 || c.SeqN < 1 {
		return c, errors.New("-reps, -idle-n, -keys-n and -seq must be at least 1")
	}
	if c.Flood <= 0 {
		return c, errors.New("-flood must be positive")
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pagebench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pagebench:", err)
		os.Exit(1)
	}
}

func logf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "pagebench: "+format+"\n", args...)
}
