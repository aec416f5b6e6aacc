package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Stat is one figure over the repetitions: the median (or the sum, for counts of failures)
// and the values in run order.
type Stat struct {
	Value  float64   `json:"value"`
	Values []float64 `json:"values"`
}

// Row is one figure for each page and renderer, with each muxterm page's ratio to ttyd per
// renderer (the median of the per-repetition ratios: the repetitions are interleaved, so pairs
// share the machine's noise).
type Row struct {
	Name  string           `json:"name"`
	Unit  string           `json:"unit"`
	Agg   string           `json:"agg"`   // "median" or "sum"
	Cells map[string]*Stat `json:"cells"` // PAGE/RENDERER: "muxterm/dom", "ttyd/dom", "muxterm/webgl", …
	Ratio map[string]*Stat `json:"ratio"` // PAGE/RENDERER, PAGE/ttyd: "muxterm/dom", …
}

// Report is the whole result, written as JSON.
type Report struct {
	Tool         string        `json:"tool"`
	Pages        []string      `json:"pages"`
	Date         string        `json:"date"`
	Seconds      float64       `json:"seconds"`
	Go           string        `json:"go"`
	TTYDVersion  string        `json:"ttyd_version"`
	Chromium     string        `json:"chromium"`
	Config       config        `json:"config"`
	Rows         []Row         `json:"rows"`
	Measurements []measurement `json:"measurements"`
}

type figure struct {
	name, unit, agg string
	of              func(m measurement) float64
}

var figures = []figure{
	{"key to glyph, from idle, p50", "ms", "median", func(m measurement) float64 { return q(m.Idle, .5) }},
	{"key to glyph, from idle, p99", "ms", "median", func(m measurement) float64 { return q(m.Idle, .99) }},
	{"key to glyph, back to back, p50", "ms", "median", func(m measurement) float64 { return q(m.Back, .5) }},
	{"key to glyph, back to back, p90", "ms", "median", func(m measurement) float64 { return q(m.Back, .9) }},
	{"key to glyph, back to back, p99", "ms", "median", func(m measurement) float64 { return q(m.Back, .99) }},
	{"key to glyph, another terminal streaming `yes`, p50", "ms", "median", func(m measurement) float64 { return q(m.Load, .5) }},
	{"key to glyph, another terminal streaming `yes`, p90", "ms", "median", func(m measurement) float64 { return q(m.Load, .9) }},
	{"key to glyph, another terminal streaming `yes`, p99", "ms", "median", func(m measurement) float64 { return q(m.Load, .99) }},
	{"  the streaming terminal's output meanwhile (what `yes` wrote)", "MiB/s", "median", func(m measurement) float64 { return m.LoadMiBps }},
	{"keydown delivery delay under that load, max", "ms", "median", func(m measurement) float64 { return maxOf(m.LoadDelivery) }},
	{"`seq 1 N` from Enter to the last line on screen", "s", "median", func(m measurement) float64 { return m.Bulk.KeyMS / 1e3 }},
	{"  frames that rendered in between", "", "median", func(m measurement) float64 { return float64(m.Bulk.Renders) }},
	{"  longest frame gap", "ms", "median", func(m measurement) float64 { return maxOf(m.Bulk.Gaps) }},
	{"  longest long task", "ms", "median", func(m measurement) float64 { return maxOf(m.LongTasks) }},
	{"  long tasks over 50 ms", "", "sum", func(m measurement) float64 {
		return float64(len(slices.DeleteFunc(slices.Clone(m.LongTasks), func(d float64) bool { return d <= 50 })))
	}},
	{"JS heap after a forced GC (after the bulk output)", "MiB", "median", func(m measurement) float64 { return m.HeapMiB }},
	{"  backing storage (array buffers, external strings)", "MiB", "median", func(m measurement) float64 { return m.BackingMiB }},
	{"Ctrl-C after a `yes` flood, from the key to the prompt on screen", "s", "median", func(m measurement) float64 { return m.InterruptMS / 1e3 }},
	{"  what `yes` wrote during the flood", "MiB/s", "median", func(m measurement) float64 { return m.FloodMiBps }},
	{"output discarded by xterm.js (\"write data discarded\")", "warnings", "sum", func(m measurement) float64 { return float64(m.Discards) }},
}

func buildReport(cfg config, all []measurement, started time.Time) *Report {
	r := &Report{Tool: "pagebench", Pages: pages(cfg), Date: started.UTC().Format(time.RFC3339), Go: runtime.Version(), Config: cfg, Measurements: all}
	for _, f := range figures {
		row := Row{Name: f.name, Unit: f.unit, Agg: f.agg, Cells: map[string]*Stat{}, Ratio: map[string]*Stat{}}
		if strings.HasPrefix(f.name, "`seq 1 N`") {
			row.Name = strings.Replace(f.name, "N", fmt.Sprint(cfg.SeqN), 1)
		}
		vals := map[string][]float64{}
		for _, m := range all {
			k := m.Server + "/" + m.Renderer
			vals[k] = append(vals[k], f.of(m))
		}
		for k, vs := range vals {
			row.Cells[k] = summarise(vs, f.agg)
		}
		if f.agg == "median" {
			for _, pg := range r.Pages[:len(r.Pages)-1] {
				for _, rd := range renderers {
					a, b := vals[pg+"/"+rd], vals["ttyd/"+rd]
					var rs []float64
					for i := 0; i < min(len(a), len(b)); i++ {
						if b[i] != 0 {
							rs = append(rs, a[i]/b[i])
						}
					}
					if len(rs) > 0 {
						row.Ratio[pg+"/"+rd] = summarise(rs, "median")
					}
				}
			}
		}
		r.Rows = append(r.Rows, row)
	}
	return r
}

func summarise(vs []float64, agg string) *Stat {
	s := &Stat{Values: vs}
	if agg == "sum" {
		for _, v := range vs {
			s.Value += v
		}
		return s
	}
	s.Value = q(vs, .5)
	if len(vs)%2 == 0 && len(vs) > 0 {
		c := slices.Clone(vs)
		slices.Sort(c)
		s.Value = (c[len(c)/2-1] + c[len(c)/2]) / 2
	}
	return s
}

func fmtNum(v float64, unit string) string {
	if math.IsNaN(v) {
		return "–"
	}
	var s string
	switch {
	case unit == "s":
		s = fmt.Sprintf("%.2f", v)
	case v >= 100 || v == math.Trunc(v):
		s = fmt.Sprintf("%.0f", v)
	default:
		s = fmt.Sprintf("%.1f", v)
	}
	if unit != "" {
		s += " " + unit
	}
	return s
}

func writeMarkdown(w io.Writer, r *Report) {
	fmt.Fprintf(w, "pagebench %s, %d interleaved repetitions, %.0f s; %s; %s; %d×%d; a %s flood before the Ctrl-C", r.Date, r.Config.Reps, r.Seconds, r.TTYDVersion, r.Chromium, r.Config.Width, r.Config.Height, r.Config.Flood)
	if r.Config.LoadPage {
		fmt.Fprint(w, "; muxterm's streaming terminal in a second page (-load-page)")
	}
	fmt.Fprint(w, "\n\n")
	head := []string{""}
	for _, rd := range renderers {
		name := map[string]string{"dom": "DOM", "webgl": "WebGL"}[rd]
		for _, pg := range r.Pages {
			head = append(head, pg+", "+name)
		}
		for _, pg := range r.Pages[:len(r.Pages)-1] {
			head = append(head, pg+"/ttyd")
		}
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(head, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat(" --- |", len(head)))
	for _, row := range r.Rows {
		cells := []string{strings.TrimSpace(row.Name)}
		if strings.HasPrefix(row.Name, "  ") {
			cells[0] = "↳ " + cells[0]
		}
		if row.Agg == "sum" {
			cells[0] += fmt.Sprintf(" (sum of %d runs)", r.Config.Reps)
		}
		for _, rd := range renderers {
			for _, pg := range r.Pages {
				if st := row.Cells[pg+"/"+rd]; st != nil {
					cells = append(cells, fmtNum(st.Value, row.Unit))
				} else {
					cells = append(cells, "–")
				}
			}
			for _, pg := range r.Pages[:len(r.Pages)-1] {
				if rt := row.Ratio[pg+"/"+rd]; rt != nil {
					cells = append(cells, fmt.Sprintf("%.2f×", rt.Value))
				} else {
					cells = append(cells, "")
				}
			}
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
}
