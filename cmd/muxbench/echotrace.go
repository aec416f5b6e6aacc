package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// The echotrace section: a kernel-level timeline of a keystroke's echo. It traces
// the whole machine with ftrace (syscalls and scheduler events, in the kernel's ring buffer,
// which perturbs far less than perf record) while muxbench types keystrokes from idle through
// the pass-through and the gateway, and back to back through the Go client and the lean client,
// each keystroke between two marker writes (echotrace_parse.go); then it finds in each window
// the syscalls the echo goes through and reports where the time went. It runs only when named
// in -only and needs root and tracefs. It traces in a tracefs instance of its own
// (instances/muxbench-<pid>-<start time>, removed when the section ends; echotrace_tracefs.go),
// never in the global buffer.

// echotraceEvents are the events traced.
var echotraceEvents = []string{"sched:sched_switch", "sched:sched_waking", "raw_syscalls:sys_enter", "raw_syscalls:sys_exit"}

// echotraceKeyTimeout is how long a traced keystroke waits for its echo: a lost echo ends the
// run then, not at the section's timeout with tracing still on.
const echotraceKeyTimeout = 5 * time.Second

// echotraceBlock is the back-to-back mode's block: that many keystrokes through one client,
// then as many through the other; the first echotraceBlockWarm of each block are not counted.
const (
	echotraceBlock     = 100
	echotraceBlockWarm = 10
)

// marker writes markerBase+kind*1000+i%1000 bytes to /dev/null, which the trace shows as
// muxbench's write syscall of that count.
type marker struct {
	f   *os.File
	buf []byte
}

func openMarker() (*marker, error) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("marker: %w", err)
	}
	return &marker{f: f, buf: make([]byte, markerMax)}, nil
}

func (m *marker) mark(kind, i int) error {
	if _, err := m.f.Write(m.buf[:markerBase+kind*1000+i%1000]); err != nil {
		return fmt.Errorf("marker: %w", err)
	}
	return nil
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C: // the deliberate idle pause, not synchronisation
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runEchotrace is the echotrace section.
func (b *bench) runEchotrace(parent context.Context) (err error) {
	if runtime.GOARCH != "amd64" {
		// The trace names system calls by number: read is 0 and write 1 on x86-64 only.
		return fmt.Errorf("echotrace reads x86-64 system call numbers; this is %s", runtime.GOARCH)
	}
	roots := b.tracefsRoots
	if roots == nil {
		roots = defaultTracefsRoots
	}
	tfs, err := openTracefs(roots, b.tracefsOps)
	if err != nil {
		return err
	}
	// The instance goes however the section ends (an error, a cancel, a panic).
	defer func() {
		if cerr := tfs.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("echotrace: %w", cerr))
		}
	}()
	// A keystroke whose echo does not come in time cancels ctx with its cause (keystroke).
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	defer func() {
		if err != nil && parent.Err() == nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", context.Cause(ctx), err)
		}
	}()
	gw, pt, err := b.mainAndPassthrough(parent) // they outlive the section: not on ctx
	if err != nil {
		return err
	}
	// The pass-through's cat.
	ws, err := pt.dialCat(ctx)
	if err != nil {
		return err
	}
	defer ws.Close()
	defer context.AfterFunc(ctx, func() { _ = ws.Close() })()
	// The lean client's cat.
	l, err := dialLean(ctx, gw.URL(), gw.token)
	if err != nil {
		return err
	}
	defer l.close()
	defer func() {
		if kerr := l.kill(); kerr != nil && err == nil {
			err = fmt.Errorf("lean client: %w", kerr)
		}
	}()
	lch, err := l.open([]string{"sh", "-c", catScript}, map[string]string{b.tagKey: b.tagVal})
	if err != nil {
		return err
	}
	l.hold = lch
	if err := l.readUntil(lch, "R"); err != nil {
		return err
	}
	if err := l.idle(); err != nil {
		return err
	}
	// The Go client's cat.
	c, err := gw.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ch, err := b.openSh(ctx, c, catScript)
	if err != nil {
		return err
	}
	defer killQuiet(c, ch.Session())
	if _, err := readUntil(ctx, c, ch, "R"); err != nil {
		return err
	}
	defer guard(ctx, c, ch)()

	key := []byte{'a'}
	buf := make([]byte, 64)
	passKey := func() error {
		if err := ws.WriteMessage(websocket.BinaryMessage, key); err != nil {
			return fmt.Errorf("pass-through keystroke: %w", err)
		}
		for {
			_, p, err := ws.ReadMessage()
			if err != nil {
				return fmt.Errorf("pass-through echo: %w", err)
			}
			if len(p) > 0 {
				return nil
			}
		}
	}
	leanKey := func() error {
		if err := l.input(lch, key); err != nil {
			return err
		}
		if _, err := l.read(lch); err != nil {
			return fmt.Errorf("lean client echo: %w", err)
		}
		return nil
	}
	goKey := func() error {
		if _, err := ch.Write(key); err != nil {
			return fmt.Errorf("keystroke through the Go client: %w", err)
		}
		if _, err := ch.Read(buf); err != nil {
			return fmt.Errorf("echo through the Go client: %w", err)
		}
		return nil
	}
	// One keystroke through each client before tracing: its echo means that the shell has become
	// cat (it prints R before the exec), so that the cats can be found by name.
	for _, first := range []func() error{passKey, leanKey, goKey} {
		if err := first(); err != nil {
			return fmt.Errorf("echotrace: the keystroke before tracing: %w", err)
		}
	}
	if err := l.idle(); err != nil {
		return err
	}
	who := traceWho{me: os.Getpid(), pass: pt.cmd.Process.Pid, gw: gw.Pid, cats: map[int]bool{}}
	for _, pid := range taggedProcs(b.tag()) {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(comm)) == "cat" {
			who.cats[pid] = true
		}
	}
	if len(who.cats) != 3 {
		return fmt.Errorf("echotrace: found %d cat processes of this run, want 3 (pass-through, lean client, Go client)", len(who.cats))
	}
	mk, err := openMarker()
	if err != nil {
		return err
	}
	defer mk.f.Close()

	bufKB := echotraceBufferKB(runtime.NumCPU())
	if err := tfs.setup(echotraceEvents, bufKB); err != nil {
		return err
	}
	b.logf("   tracing in %s (%d KiB per CPU): muxbench %d, pass-through %d, gateway %d, cats %v", tfs.dir, bufKB, who.me, who.pass, who.gw, slices.Sorted(maps.Keys(who.cats)))
	if err := tfs.write("tracing_on", "1", false); err != nil {
		return err
	}
	if b.tracingOn != nil {
		b.tracingOn()
	}
	keyTimeout := b.echoKeyTimeout
	if keyTimeout == 0 {
		keyTimeout = echotraceKeyTimeout
	}
	// keystroke: the markers around one keystroke of kind, which must echo within keyTimeout.
	keystroke := func(kind, i int, key func() error) error {
		late := time.AfterFunc(keyTimeout, func() {
			cancel(fmt.Errorf("echotrace: keystroke %d through the %s: no echo within %v", i, echotraceKindName(kind), keyTimeout))
		})
		defer late.Stop()
		if err := mk.mark(kind, i); err != nil {
			return err
		}
		if err := key(); err != nil {
			return fmt.Errorf("keystroke %d: %w", i, err)
		}
		return mk.mark(kind+1, i)
	}
	// (a) From idle: alternately through the pass-through and the lean client, each after
	// -idle-pause; the lean client acknowledges the echo off the clock, as leanEcho does.
	for i := range b.cfg.EchoIdleN {
		if err := pause(ctx, b.cfg.IdlePause); err != nil {
			return err
		}
		if err := keystroke(kindIdlePass, i, passKey); err != nil {
			return err
		}
		if err := pause(ctx, b.cfg.IdlePause); err != nil {
			return err
		}
		if err := keystroke(kindIdleLean, i, leanKey); err != nil {
			return err
		}
		if err := l.idle(); err != nil {
			return err
		}
	}
	// (b) Back to back: blocks of echotraceBlock keystrokes, alternately through the Go client
	// and the lean client.
	for start := 0; start < b.cfg.EchoN; start += echotraceBlock {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		end := min(start+echotraceBlock, b.cfg.EchoN)
		for i := start; i < end; i++ {
			if err := keystroke(kindB2BGo, i, goKey); err != nil {
				return err
			}
		}
		for i := start; i < end; i++ {
			if err := keystroke(kindB2BLean, i, leanKey); err != nil {
				return err
			}
			if err := l.idle(); err != nil {
				return err
			}
		}
	}
	if err := tfs.write("tracing_on", "0", false); err != nil {
		return err
	}
	overruns, err := tfs.overruns()
	if err != nil {
		return fmt.Errorf("echotrace: %w", err)
	}
	if overruns > 0 {
		// An overwritten buffer loses each CPU's oldest events without a lost-events line, so a
		// window could be whole on one CPU and cut on another and match a later event: no rows.
		return fmt.Errorf("echotrace: the ring buffer lost %d events (per_cpu/cpu*/stats); run fewer keystrokes (-echo-idle-n, -echo-n)", overruns)
	}
	res, err := b.readEchotrace(tfs, who)
	if err != nil {
		return err
	}
	return b.echotraceRows(res)
}

// readEchotrace reads the trace (copying it to -echotrace-out if set) and analyzes it; the
// first echotraceBlockWarm keystrokes of each back-to-back block are not counted.
func (b *bench) readEchotrace(tfs *tracefs, who traceWho) (echoTraceResult, error) {
	var none echoTraceResult
	f, err := os.Open(filepath.Join(tfs.dir, "trace"))
	if err != nil {
		return none, fmt.Errorf("echotrace: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if b.cfg.EchotraceOut != "" {
		if err := os.MkdirAll(filepath.Dir(b.cfg.EchotraceOut), 0o755); err != nil {
			return none, fmt.Errorf("echotrace: create %s: %w", b.cfg.EchotraceOut, err)
		}
		out, err := os.Create(b.cfg.EchotraceOut)
		if err != nil {
			return none, fmt.Errorf("echotrace: %w", err)
		}
		defer out.Close()
		r = io.TeeReader(f, out)
		defer b.logf("   wrote the raw trace to %s", b.cfg.EchotraceOut)
	}
	skip := func(kind, i int) bool {
		return (kind == kindB2BGo || kind == kindB2BLean) && i%echotraceBlock < echotraceBlockWarm
	}
	res, err := analyzeEchoTrace(r, who, skip)
	if err != nil {
		return none, fmt.Errorf("echotrace: %w", err)
	}
	return res, nil
}

// echotraceRows adds the section's rows: per mode, segment and quantile (p50, p90), the
// pass-through's and the Go client's figures in the pass-through and muxterm columns, the lean
// client's in the lean client column.
func (b *bench) echotraceRows(res echoTraceResult) error {
	b.report.Details["echotrace"] = map[string]any{
		"idle: pass-through":         res.Kinds[kindIdlePass],
		"idle: lean client":          res.Kinds[kindIdleLean],
		"back to back: Go client":    res.Kinds[kindB2BGo],
		"back to back: lean client":  res.Kinds[kindB2BLean],
		"segments":                   echoSegments,
		"points":                     echoPoints,
		"back to back warm-up/block": fmt.Sprintf("%d of %d", echotraceBlockWarm, echotraceBlock),
		"lost events": map[string]any{
			"lost-events lines":                     res.LostLines,
			"events those lines counted":            res.LostEvents,
			"windows those lines cut (not counted)": res.CutWindows,
		},
	}
	b.report.Notes = append(b.report.Notes,
		"echotrace: one traced run of each mode (-reps does not apply); each row's figure is that run's quantile over its keystrokes",
		fmt.Sprintf("echotrace: the ring buffer lost no events (per_cpu/cpu*/stats: a run that loses any gives no rows); the trace had %d lost-events lines (%d events), which cut %d windows (not counted)",
			res.LostLines, res.LostEvents, res.CutWindows))
	type mode struct {
		section        string
		mux, pass, alt int // kinds; 0: none
		note           string
	}
	modes := []mode{
		{section: "echotrace idle", pass: kindIdlePass, alt: kindIdleLean,
			note: fmt.Sprintf("from idle (%v before each keystroke), alternately through the pass-through and the gateway with the lean client", b.cfg.IdlePause)},
		{section: "echotrace back to back", mux: kindB2BGo, alt: kindB2BLean,
			note: fmt.Sprintf("back to back in alternating blocks of %d keystrokes through the Go client and the lean client, the first %d of each block not counted", echotraceBlock, echotraceBlockWarm)},
	}
	var missing []string
	for _, m := range modes {
		used := []string{}
		for _, k := range []int{m.pass, m.mux, m.alt} {
			if k == 0 {
				continue
			}
			r := res.Kinds[k]
			if r == nil || r.Complete == 0 {
				missing = append(missing, fmt.Sprintf("%s: %s", m.section, echotraceKindName(k)))
				continue
			}
			used = append(used, fmt.Sprintf("%s %d of %d", echotraceKindName(k), r.Complete, r.Windows))
		}
		col := func(k int, seg int, q float64) []float64 {
			r := res.Kinds[k]
			if k == 0 || r == nil {
				return nil
			}
			vs := r.Total
			if seg >= 0 {
				vs = r.Segs[seg]
			}
			if len(vs) == 0 {
				return nil
			}
			s := slices.Clone(vs)
			slices.Sort(s)
			return []float64{quantile(s, q)}
		}
		for seg := -1; seg < len(echoSegments); seg++ {
			name := "whole window (marker to marker)"
			if seg >= 0 {
				name = echoSegments[seg]
			}
			for _, q := range []struct {
				name string
				v    float64
			}{{"p50", 0.5}, {"p90", 0.9}} {
				note := ""
				if seg == -1 && q.name == "p50" {
					note = m.note + "; windows with every point (the segments' samples): " + strings.Join(used, ", ") +
						"; the whole window counts every window. The points, each the first after the one before: " + strings.Join(echoPoints, " → ") +
						fmt.Sprintf(" (the client's socket write is the keystroke's frame: a %d-byte write to the pass-through, %d to the gateway)", keystrokeWriteLen(kindIdlePass), keystrokeWriteLen(kindB2BGo))
				}
				r := newRow(m.section, name+", "+q.name, "µs", col(m.mux, seg, q.v), nil, col(m.pass, seg, q.v), nil, note)
				r.Lean = newStat(col(m.alt, seg, q.v))
				b.addRow(r)
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("echotrace: no window with every point for %s (is the trace's ring buffer large enough?)", strings.Join(missing, ", "))
	}
	return nil
}

func echotraceKindName(kind int) string {
	switch kind {
	case kindIdlePass:
		return "pass-through"
	case kindIdleLean, kindB2BLean:
		return "lean client"
	case kindB2BGo:
		return "Go client"
	}
	return fmt.Sprint("kind ", kind)
}
