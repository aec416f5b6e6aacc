package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/profiler"
	"github.com/chromedp/chromedp"
)

// measurement is one page (muxterm's or ttyd's) with one renderer in one repetition.
type measurement struct {
	Server, Renderer string
	Rep              int
	Idle, Back, Load []float64 // key to glyph, ms
	LoadDelivery     []float64 // keydown delivery delay under load, ms
	LoadMiBps        float64   // what the streaming terminal's yes wrote meanwhile, MiB/s
	FloodMiBps       float64   // what yes wrote while it flooded the measured terminal, MiB/s
	InterruptMS      float64   // Ctrl-C after that flood, from the key-down to the prompt's frame
	Bulk             keyResult
	LongTasks        []float64 // ms, during the bulk output
	HeapMiB          float64   // used JavaScript heap
	BackingMiB       float64   // array buffers' and external strings' backing storage (the terminal's buffer lines)
	Discards         int
}

var renderers = []string{"dom", "webgl"}

// pages lists the pages a run measures: muxterm, the -variant names, ttyd.
func pages(cfg config) []string {
	out := []string{"muxterm"}
	for _, v := range cfg.Variants {
		name, _, _ := strings.Cut(v, "=")
		out = append(out, name)
	}
	return append(out, "ttyd")
}

func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	started := time.Now()
	hook, err := os.ReadFile(cfg.TestHook)
	if err != nil {
		return fmt.Errorf("the UI's test hook (make frontend builds it): %w", err)
	}
	cfg.pageJS = string(hook) + ";\n" + probeJS
	dir, err := os.MkdirTemp("", "pagebench-")
	if err != nil {
		return fmt.Errorf("scratch dir: %w", err)
	}
	defer os.RemoveAll(dir)
	shell, err := writeShell(dir)
	if err != nil {
		return err
	}
	// Each muxterm page (the UI of -gateway, and of each -variant) has its gateway.
	gateways := map[string]*server{}
	tokens := map[string]string{}
	defer func() {
		for _, g := range gateways {
			g.stop()
		}
	}()
	bins := map[string]string{"muxterm": cfg.Gateway}
	for _, v := range cfg.Variants {
		name, bin, _ := strings.Cut(v, "=")
		bins[name] = bin
	}
	for name, bin := range bins {
		g, token, err := startGateway(ctx, bin, shell)
		if err != nil {
			return err
		}
		gateways[name], tokens[name] = g, token
	}
	td, err := startTTYD(ctx, cfg.TTYD, shell, cfg.TTYDArgs)
	if err != nil {
		return err
	}
	defer td.stop()
	bctx, stopBrowser, err := startBrowser(cfg, filepath.Join(dir, "chromium"))
	if err != nil {
		return err
	}
	defer stopBrowser()
	for name, g := range gateways {
		logf(stderr, "%s: gateway %s on %s", name, bins[name], g.base)
	}
	logf(stderr, "ttyd on %s", td.base)

	var all []measurement
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, r := range rotate(renderers, rep) {
			for _, s := range rotate(pages(cfg), rep) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				url := td.base + "/?rendererType=" + r
				if g := gateways[s]; g != nil {
					url = g.base + "/?renderer=" + r + "&token=" + tokens[s]
				}
				t := time.Now()
				m, err := measure(ctx, bctx, cfg, s, r, url, rep+1)
				if err != nil {
					return fmt.Errorf("repetition %d, %s, %s: %w", rep+1, s, r, err)
				}
				m.Rep = rep + 1
				all = append(all, m)
				logf(stderr, "rep %d %s %s: idle p50 %.1f ms, back to back p50 %.1f ms, under load p50 %.1f p90 %.1f ms (the stream %.1f MiB/s), bulk %.2f s (%d frames, longest long task %.0f ms), heap %.1f MiB, Ctrl-C after the flood %.2f s (%.1f MiB/s), discards %d (%.0f s)",
					rep+1, s, r, q(m.Idle, .5), q(m.Back, .5), q(m.Load, .5), q(m.Load, .9), m.LoadMiBps, m.Bulk.KeyMS/1e3, m.Bulk.Renders, maxOf(m.LongTasks), m.HeapMiB,
					m.InterruptMS/1e3, m.FloodMiBps, m.Discards, time.Since(t).Seconds())
			}
		}
	}
	rep := buildReport(cfg, all, started)
	rep.TTYDVersion = ttydVersion(cfg.TTYD)
	if v, err := chromedp.CallBrowser(bctx, cdpbrowser.GetVersion, cdp.Empty{}); err == nil {
		rep.Chromium = v.Product
	}
	rep.Seconds = time.Since(started).Seconds()
	writeMarkdown(stdout, rep)
	if cfg.MD != "" {
		var b strings.Builder
		writeMarkdown(&b, rep)
		if err := writeFile(cfg.MD, []byte(b.String())); err != nil {
			return err
		}
	}
	if cfg.JSON != "" {
		j, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return fmt.Errorf("encode the report: %w", err)
		}
		if err := writeFile(cfg.JSON, append(j, '\n')); err != nil {
			return err
		}
		logf(stderr, "wrote %s", cfg.JSON)
	}
	return nil
}

func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// rotate returns vs rotated by rep, so that no variant always runs first.
func rotate(vs []string, rep int) []string {
	k := rep % len(vs)
	return append(slices.Clone(vs[k:]), vs[:k]...)
}

// measure runs every measurement on a fresh page (a fresh browser context, so muxterm's UI
// starts with one new session) and closes it.
func measure(ctx context.Context, bctx context.Context, cfg config, server, renderer, url string, rep int) (m measurement, err error) {
	m = measurement{Server: server, Renderer: renderer}
	p, err := openPage(bctx, cfg, url, true)
	if err != nil {
		return m, err
	}
	defer p.close()
	// ttyd applies its renderer once the server's preferences arrive, after the prompt can.
	if err := p.waitJS(fmt.Sprintf("window.__pb.focus() === %q", renderer), 10*time.Second); err != nil {
		return m, fmt.Errorf("the page does not render with %s: %w", renderer, err)
	}
	if m.Idle, _, err = p.typeTimed(ctx, cfg.IdleN, cfg.IdlePause); err != nil {
		return m, fmt.Errorf("from idle: %w", err)
	}
	if m.Back, _, err = p.typeTimed(ctx, cfg.KeysN, 0); err != nil {
		return m, fmt.Errorf("back to back: %w", err)
	}
	if m.Load, m.LoadDelivery, m.LoadMiBps, m.Discards, err = underLoad(ctx, p, cfg, server, url); err != nil {
		return m, fmt.Errorf("under load: %w", err)
	}
	prof := ""
	if cfg.CPUProfile != "" {
		prof = filepath.Join(cfg.CPUProfile, fmt.Sprintf("%s-%s-%d.cpuprofile", server, renderer, rep))
	}
	if m.Bulk, m.LongTasks, err = bulk(p, cfg.SeqN, prof); err != nil {
		return m, fmt.Errorf("bulk output: %w", err)
	}
	if m.HeapMiB, m.BackingMiB, err = p.heapMiB(); err != nil {
		return m, err
	}
	if m.FloodMiBps, m.InterruptMS, err = interrupt(ctx, p, cfg.Flood); err != nil {
		return m, fmt.Errorf("Ctrl-C after a flood: %w", err)
	}
	d, err := evalT[int](p, "window.__pb.discards", 5*time.Second)
	if err != nil {
		return m, err
	}
	m.Discards += d
	if server != "ttyd" {
		// Close the tab so that its session ends with the page.
		_, err = evalT[any](p, "window.muxterm.closeTab(0)", 10*time.Second)
	}
	return m, err
}

// streamingRow is true in a page whose terminal shows `yes` streaming.
const streamingRow = "window.__pb.hasRow('y')"

// underLoad starts `yes` in another terminal of the same origin (muxterm: a second tab of the
// page, hidden behind the first, or with -load-page a new tab of a second page, which also
// shows the first's session; ttyd: a second page) and times keys in the first meanwhile. It
// returns what the streaming `yes` wrote meanwhile (MiB/s), and the discards of the streaming
// terminal when it is ttyd's second page.
func underLoad(ctx context.Context, p *tab, cfg config, server, url string) (ms, delivery []float64, rate float64, discards int, err error) {
	var s *tab // the second page: ttyd's, or muxterm's with -load-page
	defer func() {
		if s != nil {
			s.close()
		}
	}()
	openSecond := func() (err error) {
		// A second page in the first's browser context.
		if s, err = openPage(p.ctx, cfg, url, false); err != nil {
			return fmt.Errorf("second page: %w", err)
		}
		return nil
	}
	var start, stop []func() error
	if server == "ttyd" {
		start = []func() error{
			openSecond,
			func() error { return s.typeText("yes\r") },
			func() error { return s.waitJS(streamingRow, 10*time.Second) },
		}
		stop = []func() error{func() (err error) {
			discards, err = evalT[int](s, "window.__pb.discards", 5*time.Second)
			return err
		}}
	} else {
		load := p // the page whose new tab streams
		eval := func(expr string) func() error {
			return func() error { _, err := evalT[any](load, expr, 10*time.Second); return err }
		}
		if cfg.LoadPage {
			start = append(start, openSecond, func() error { load = s; return nil })
		}
		start = append(start,
			eval("window.muxterm.newTab()"),
			func() error {
				return load.waitJS("window.muxterm.tabs().length === 2 && window.muxterm.activeIndex() === 1", 10*time.Second)
			},
			func() error { return load.prompt() },
			func() error { return load.typeText("yes\r") },
			func() error { return load.waitJS(streamingRow, 10*time.Second) },
		)
		if !cfg.LoadPage {
			start = append(start, eval("window.muxterm.activate(0)")) // the measured tab in front
		}
		stop = []func() error{
			eval("window.muxterm.closeTab(1)"),
			func() error { return load.waitJS("window.muxterm.tabs().length === 1", 10*time.Second) },
		}
	}
	measure := func() (err error) {
		if err := p.prompt(); err != nil {
			return err
		}
		meter, err := startStreamMeter()
		if err != nil {
			return err
		}
		if ms, delivery, err = p.typeTimed(ctx, cfg.KeysN, 0); err != nil {
			return err
		}
		rate, err = meter.rate()
		return err
	}
	for _, step := range append(append(start, measure), stop...) {
		if err := step(); err != nil {
			return nil, nil, 0, 0, err
		}
	}
	return ms, delivery, rate, discards, nil
}

// interrupt floods the measured terminal with `yes` for d, then times Ctrl-C from its key-down
// to the first frame that shows the prompt again: the program's end, and what the page still had
// to show of the flood, which is what its flow control let run ahead of it. It returns what `yes`
// wrote during the flood, in MiB/s, beside that time.
func interrupt(ctx context.Context, p *tab, d time.Duration) (rate, ms float64, err error) {
	if err := p.typeText("yes\r"); err != nil {
		return 0, 0, err
	}
	if err := p.waitJS(streamingRow, 10*time.Second); err != nil {
		return 0, 0, err
	}
	meter, err := startStreamMeter()
	if err != nil {
		return 0, 0, err
	}
	select {
	case <-time.After(d): // the flood's length
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	if rate, err = meter.rate(); err != nil {
		return 0, 0, err
	}
	// ttyd's page took 6× the flood to show what piled up (docs/benchmarks.md).
	r, err := p.timed("$ ", false, charKey(0x03), time.Minute+20*d)
	if err != nil {
		return 0, 0, err
	}
	return rate, r.KeyMS, nil
}

// bulk types `seq 1 N`, then times Enter to the frame that shows N on its own row, with the
// frames between and the long tasks that started between.
func bulk(p *tab, n int, prof string) (keyResult, []float64, error) {
	cmd := fmt.Sprintf("seq 1 %d", n)
	if err := p.typeText(cmd); err != nil {
		return keyResult{}, nil, err
	}
	if err := p.waitJS(fmt.Sprintf("window.__pb.hasRow(%q)", "$ "+cmd), 10*time.Second); err != nil {
		return keyResult{}, nil, err
	}
	if prof != "" {
		if err := chromedp.Do(p.ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			if _, err := cdp.Call(ctx, tg, profiler.Enable, cdp.Empty{}); err != nil {
				return err
			}
			if _, err := cdp.Call(ctx, tg, profiler.SetSamplingInterval, profiler.SetSamplingIntervalParams{Interval: 200}); err != nil {
				return err
			}
			_, err := cdp.Call(ctx, tg, profiler.Start, cdp.Empty{})
			return err
		})); err != nil {
			return keyResult{}, nil, fmt.Errorf("start the profiler: %w", err)
		}
	}
	r, err := p.timed(fmt.Sprint(n), true, charKey('\r'), 10*time.Minute)
	if err != nil {
		return r, nil, err
	}
	if prof != "" {
		var pr *profiler.Profile
		if err := chromedp.Do(p.ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			res, err := cdp.Call(ctx, tg, profiler.Stop, cdp.Empty{})
			pr = res.Profile
			return err
		})); err != nil {
			return r, nil, fmt.Errorf("stop the profiler: %w", err)
		}
		b, err := json.Marshal(pr)
		if err != nil {
			return r, nil, fmt.Errorf("encode the profile %s: %w", prof, err)
		}
		if err := writeFile(prof, b); err != nil {
			return r, nil, err
		}
	}
	if err := p.waitJS("window.__pb.hasRow('$ ')", 30*time.Second); err != nil {
		return r, nil, err
	}
	// Long-task entries arrive after their task; the prompt's frame comes after the last one.
	lt, err := evalT[[]float64](p, fmt.Sprintf("new Promise(r => setTimeout(() => r(window.__pb.longtasksIn(%v, %v)), 200))", r.Start, r.End), 5*time.Second)
	return r, lt, err
}

// q is the nearest-rank quantile of vs.
func q(vs []float64, p float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	rank := int(math.Ceil(p * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

func maxOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	return slices.Max(vs)
}
