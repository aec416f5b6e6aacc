package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/record"
	"github.com/muxterm/muxterm/proto"
)

// cmdRecordings lists the recordings the caller may see (recording.list), or, as
// `recordings export ID [FILE]`, writes one's .cast file.
func (a *app) cmdRecordings(args []string) error {
	if len(args) > 0 && args[0] == "export" {
		return a.cmdExport(args[1:])
	}
	fs := a.flagSet("recordings")
	asJSON := fs.Bool("json", false, "")
	pos, err := a.parse(fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageError{"recordings takes at most one session id or name"}
	}
	var list []proto.RecordingInfo
	err = a.withClient(func(ctx context.Context, c *client.Client) error {
		if list, err = c.Recordings(ctx, ""); err != nil {
			return fmt.Errorf("list recordings: %w", err)
		}
		if len(pos) == 1 {
			r, err := pickRecording(list, pos[0])
			if err != nil {
				return err
			}
			list = []proto.RecordingInfo{r}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if *asJSON {
		if list == nil {
			list = []proto.RecordingInfo{}
		}
		b, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return err
		}
		_, err = a.stdout.Write(append(jsonVisible(b), '\n'))
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTARTED\tSIZE\tBYTES\tSTATE\tNAME")
	for _, r := range list {
		state := "ended"
		if r.Active {
			state = "recording"
		}
		fmt.Fprintf(tw, "%s\t%s\t%dx%d\t%d\t%s\t%s\n", visible(r.Recording),
			time.UnixMilli(r.Started).Format("2006-01-02 15:04:05"), r.Cols, r.Rows, r.Bytes, state,
			visible(cmp.Or(r.Name, r.Command)))
	}
	return tw.Flush()
}

// pickRecording finds the recording named by arg: its id, or the name of exactly one.
func pickRecording(list []proto.RecordingInfo, arg string) (proto.RecordingInfo, error) {
	var byName []proto.RecordingInfo
	for _, r := range list {
		if r.Recording == arg {
			return r, nil
		}
		if r.Name == arg {
			byName = append(byName, r)
		}
	}
	switch len(byName) {
	case 1:
		return byName[0], nil
	case 0:
		return proto.RecordingInfo{}, fmt.Errorf("no recording %q (muxterm recordings lists them)", visible(arg))
	}
	return proto.RecordingInfo{}, fmt.Errorf("%d recordings are named %q: give the id", len(byName), visible(arg))
}

// cmdExport writes a recording's file to FILE (created mode 0600) or stdout.
func (a *app) cmdExport(args []string) error {
	fs := a.flagSet("recordings export")
	pos, err := a.parse(fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageError{"recordings export needs a recording id or name, and optionally a file"}
	}
	out := a.stdout
	if len(pos) == 2 {
		f, err := os.OpenFile(pos[1], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		defer f.Close()
		out = f
	}
	return a.withRecording(pos[0], func(ctx context.Context, c *client.Client, id string) error {
		n, err := c.ExportRecording(ctx, id, out)
		if err == nil && len(pos) == 2 {
			fmt.Fprintf(a.stderr, "muxterm: %d bytes written to %s\n", n, visible(pos[1]))
		}
		return err
	})
}

// withRecording dials, resolves arg among the caller's recordings and runs f with a context
// that ends only on the calls' own timeouts (a playback takes as long as it takes).
func (a *app) withRecording(arg string, f func(ctx context.Context, c *client.Client, id string) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	list, err := c.Recordings(ctx, "")
	if err != nil {
		return fmt.Errorf("list recordings: %w", err)
	}
	r, err := pickRecording(list, arg)
	if err != nil {
		return err
	}
	return f(context.Background(), c, r.Recording)
}

// remoteRecording reads a recording's file through recording.read, a chunk at a time.
type remoteRecording struct {
	c   *client.Client
	id  string
	off int64
	buf []byte
	eof bool
}

func (r *remoteRecording) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		res, err := r.c.ReadRecording(ctx, r.id, r.off, proto.MaxRecordingRead)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("read recording %s at %d: %w", r.id, r.off, err)
		}
		r.off += int64(len(res.Data))
		r.buf, r.eof = res.Data, res.EOF || len(res.Data) == 0
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// cmdPlay plays a recording (a gateway's, by id or name, or a local .cast file) in this
// terminal with its timing.
func (a *app) cmdPlay(args []string) error {
	fs := a.flagSet("play")
	speed := fs.Float64("speed", 1, "")
	idle := fs.Duration("idle-limit", 5*time.Second, "")
	pos, err := a.parse(fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"play needs one recording id or name, or a .cast file"}
	}
	if *speed <= 0 || *speed > 1000 {
		return usageError{"--speed must be above 0 and at most 1000"}
	}
	if *idle < 0 {
		return usageError{"--idle-limit must not be negative"}
	}
	// Ctrl-C or SIGTERM stops the playback; the terminal is set back either way.
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	defer stop()
	defer a.afterPlay()
	if strings.HasSuffix(pos[0], record.Ext) {
		f, err := os.Open(pos[0])
		if err != nil {
			return fmt.Errorf("play: %w", err)
		}
		defer f.Close()
		return a.play(ctx, f, *speed, *idle)
	}
	return a.withRecording(pos[0], func(_ context.Context, c *client.Client, id string) error {
		return a.play(ctx, &remoteRecording{c: c, id: id}, *speed, *idle)
	})
}

// playReset undoes what a recording's output may have left on: the alternate screen, mouse
// tracking and its encodings, bracketed paste, application keys, a hidden cursor, attributes.
const playReset = "\x1b[0m\x1b[?1049l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l" +
	"\x1b[?2004l\x1b[?1l\x1b>\x1b[?25h"

// afterPlay sets a terminal back after a playback: its modes reset, and the input it received
// meanwhile (answers to the recording's queries, keys typed) discarded rather than left for
// the shell to run.
func (a *app) afterPlay() {
	if f, ok := a.stdout.(*os.File); ok && isTerminal(f) {
		_, _ = io.WriteString(f, playReset)
	}
	if isTerminal(a.stdin) {
		flushInput(int(a.stdin.Fd()))
	}
}

// play writes r's output events to stdout at their times (divided by speed, each pause at most
// idle; 0: as recorded), and says where the recording is broken. It ends early when ctx does.
func (a *app) play(ctx context.Context, r io.Reader, speed float64, idle time.Duration) error {
	p, err := record.NewParser(r)
	if err != nil {
		return fmt.Errorf("play: %w", err)
	}
	if f, ok := a.stdout.(*os.File); ok && isTerminal(f) {
		if w, h, err := termSize(int(f.Fd())); err == nil && (w < p.Header.Width || h < p.Header.Height) {
			fmt.Fprintf(a.stderr, "muxterm: the recording is %dx%d, this terminal %dx%d: lines may wrap\n",
				p.Header.Width, p.Header.Height, w, h)
		}
	}
	start := time.Now()
	var at, played time.Duration // the recording's time of the last event, and on our clock
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("play: %w", err)
		}
		if e.Code != "o" {
			continue
		}
		gap := time.Duration(float64(time.Duration(e.At*float64(time.Second))-at) / speed)
		at = time.Duration(e.At * float64(time.Second))
		if idle > 0 && gap > idle {
			gap = idle
		}
		played += gap
		if wait := time.Until(start.Add(played)); wait > 0 {
			t := time.NewTimer(wait) // playback: the recording's own timing
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return errors.New("play: stopped")
			}
		}
		if _, err := io.WriteString(a.stdout, e.Data); err != nil {
			return err
		}
	}
}
