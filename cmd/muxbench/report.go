package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Target is a goal a figure is compared against. It is reported as met or missed, never
// enforced.
type Target struct {
	Desc  string  `json:"desc"`  // the target in words, e.g. "≥ 85% of raw"
	Of    string  `json:"of"`    // "ratio_raw", "ratio_pass" or "value": which median is compared
	Op    string  `json:"op"`    // "<=" or ">="
	Value float64 `json:"value"` // the bound
}

func (t *Target) met(r *Row) *bool {
	if t == nil {
		return nil
	}
	var s *Stat
	switch t.Of {
	case "ratio_raw":
		s = r.RatioRaw
	case "ratio_pass":
		s = r.RatioPass
	case "value":
		s = r.Mux
	}
	if s == nil || math.IsNaN(s.Median) {
		return nil
	}
	ok := s.Median <= t.Value
	if t.Op == ">=" {
		ok = s.Median >= t.Value
	}
	return &ok
}

// Row is one figure of the report: muxterm's value with the baselines measured in the same run.
type Row struct {
	Section   string  `json:"section"`
	Name      string  `json:"name"`
	Unit      string  `json:"unit"`
	Mux       *Stat   `json:"muxterm"`
	Raw       *Stat   `json:"raw,omitempty"`
	Pass      *Stat   `json:"passthrough,omitempty"`
	RatioRaw  *Stat   `json:"ratio_raw,omitempty"`   // per-repetition muxterm/raw
	RatioPass *Stat   `json:"ratio_pass,omitempty"`  // per-repetition muxterm/pass-through
	Lean      *Stat   `json:"lean_client,omitempty"` // the gateway through the lean client (echotrace)
	Target    *Target `json:"target,omitempty"`
	Met       *bool   `json:"met,omitempty"`
	Note      string  `json:"note,omitempty"`
}

// newRow builds a row from per-repetition values and fills in the ratios and the verdict.
func newRow(section, name, unit string, muxv, raw, pass []float64, t *Target, note string) Row {
	r := Row{Section: section, Name: name, Unit: unit, Mux: newStat(muxv), Raw: newStat(raw),
		Pass: newStat(pass), Target: t, Note: note}
	if len(raw) > 0 {
		r.RatioRaw = newStat(ratios(muxv, raw))
	}
	if len(pass) > 0 {
		r.RatioPass = newStat(ratios(muxv, pass))
	}
	r.Met = t.met(&r)
	return r
}

// Report is the whole result, written as JSON.
type Report struct {
	Tool    string      `json:"tool"`
	Date    string      `json:"date"`
	Machine machineInfo `json:"machine"`
	Command string      `json:"command"`
	Config  config      `json:"config"`
	Gateway string      `json:"gateway"`
	// GatewaySHA256 identifies the binary measured; GatewayArgs are the limits lifted for it
	// (besides --listen 127.0.0.1:0 --allow-cmd '*' --max-sessions --max-channels).
	GatewaySHA256 string         `json:"gateway_sha256"`
	GatewayArgs   string         `json:"gateway_args"`
	Rows          []Row          `json:"rows"`
	Details       map[string]any `json:"details"`
	Notes         []string       `json:"notes,omitempty"`
	Errors        []string       `json:"errors,omitempty"`
	Seconds       float64        `json:"seconds"`
}

func writeJSON(path string, r *Report) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// writeMarkdown renders the report as Markdown tables.
func writeMarkdown(w io.Writer, r *Report) {
	reps := fmt.Sprintf("%d interleaved repetitions", r.Config.Reps)
	traceOnly := len(r.Config.Only) > 0 && !slices.ContainsFunc(r.Config.Only, func(s string) bool { return s != "echotrace" })
	if traceOnly {
		reps = "one traced run of each mode" // -reps does not apply to echotrace
	}
	fmt.Fprintf(w, "muxbench, %s — %d × %s, Linux %s, %s; %s%s; %.0f s\n\n",
		r.Date, r.Machine.CPUs, r.Machine.Model, r.Machine.Kernel, r.Machine.Go, reps,
		map[bool]string{true: " (-short)", false: ""}[r.Config.Short], r.Seconds)
	fmt.Fprintf(w, "Gateway %s (sha256 %.12s…), run with --listen 127.0.0.1:0 --allow-cmd '*' --max-sessions/--max-channels as needed %s.\n\n",
		r.Gateway, r.GatewaySHA256, r.GatewayArgs)
	if traceOnly {
		fmt.Fprintln(w, "Values come from one traced run: each is that run's quantile over its keystrokes, in µs from")
		fmt.Fprintln(w, "ftrace's text timestamps (1 µs resolution); there are no repetitions, ranges or ratios.")
	} else {
		fmt.Fprintln(w, "Values are the median over repetitions with the range (min–max) in brackets; ratios are")
		fmt.Fprintln(w, "per-repetition muxterm/baseline. Latency quantiles are per repetition, then summarised.")
	}
	fmt.Fprintln(w)
	// The lean client's column only when a row has one (the echotrace section's).
	lean := slices.ContainsFunc(r.Rows, func(row Row) bool { return row.Lean != nil })
	cols := []string{"measurement", "muxterm", "raw PTY", "pass-through", "muxterm/raw", "muxterm/pass", "target", "met"}
	if lean {
		cols = append(cols, "muxterm, lean client")
	}
	fmt.Fprintln(w, "| "+strings.Join(cols, " | ")+" |")
	fmt.Fprintln(w, strings.Repeat("| --- ", len(cols))+"|")
	section := ""
	for _, row := range r.Rows {
		name := row.Name
		if row.Section != section {
			section = row.Section
			name = "**" + section + "**: " + row.Name
		}
		target, met := "", ""
		if row.Target != nil {
			target = row.Target.Desc
			switch {
			case row.Met == nil:
				met = "n/a"
			case *row.Met:
				met = "met"
			default:
				met = "**missed**"
			}
		}
		line := fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s |", name,
			fmtStat(row.Mux, row.Unit), fmtStat(row.Raw, row.Unit), fmtStat(row.Pass, row.Unit),
			fmtStat(row.RatioRaw, "×"), fmtStat(row.RatioPass, "×"), target, met)
		if lean {
			line += " " + fmtStat(row.Lean, row.Unit) + " |"
		}
		fmt.Fprintln(w, line)
	}
	notes := false
	for _, row := range r.Rows {
		if row.Note == "" {
			continue
		}
		if !notes {
			fmt.Fprintln(w, "\nNotes:")
			notes = true
		}
		fmt.Fprintf(w, "- %s / %s: %s\n", row.Section, row.Name, row.Note)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	if len(r.Errors) > 0 {
		fmt.Fprintln(w, "\nErrors:")
		for _, e := range r.Errors {
			fmt.Fprintf(w, "- %s\n", e)
		}
	}
}

func fmtStat(s *Stat, unit string) string {
	if s == nil {
		return ""
	}
	u := unit
	switch unit {
	case "×":
		u = "×"
	case "", "count":
		u = ""
	default:
		u = " " + unit
	}
	if len(s.Values) == 1 || s.Min == s.Max {
		return fmtNum(s.Median) + u
	}
	return fmt.Sprintf("%s%s (%s–%s)", fmtNum(s.Median), u, fmtNum(s.Min), fmtNum(s.Max))
}

// fmtNum prints three significant digits, without exponent for ordinary magnitudes.
func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}
