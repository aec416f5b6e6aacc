package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// variant is one gateway build compared by -variant: a name, the binary, and extra flags.
type variant struct {
	Name string   `json:"name"`
	Bin  string   `json:"bin"`
	Args []string `json:"args,omitempty"`
	SHA  string   `json:"sha256"`

	gw *gatewayProc
}

// parseVariant reads -variant's "name=BIN [--flag=value ...]".
func parseVariant(s string) (variant, error) {
	name, rest, ok := strings.Cut(s, "=")
	f := strings.Fields(rest)
	if !ok || name == "" || len(f) == 0 || slices.Contains([]string{"raw", "pass"}, name) {
		return variant{}, fmt.Errorf("-variant %q: want name=BIN [--flag=value ...], name not raw or pass", s)
	}
	return variant{Name: name, Bin: f[0], Args: f[1:]}, nil
}

// leanCol prefixes a variant's name for its echo through the lean client (lean.go).
const leanCol = "lean client of "

// compareSections are the sections a comparison runs (-only picks among them).
var compareSections = []string{"echo", "throughput", "aggregate"}

// comparison holds one value per repetition for each row and column (raw, pass, a variant).
type comparison struct {
	rows []string                        // in report order
	vals map[string]map[string][]float64 // row → column → one value per repetition
	unit map[string]string
}

func (c *comparison) add(row, unit, col string, v float64) {
	if c.vals[row] == nil {
		c.rows = append(c.rows, row)
		c.vals[row] = map[string][]float64{}
		c.unit[row] = unit
	}
	c.vals[row][col] = append(c.vals[row][col], v)
}

// CompareRow is one row of a comparison's JSON report.
type CompareRow struct {
	Name   string           `json:"name"`
	Unit   string           `json:"unit"`
	Values map[string]*Stat `json:"values"`           // by column: raw, pass, each variant
	Ratios map[string]*Stat `json:"ratios,omitempty"` // "v/raw", "v/pass", "v/first": per-repetition ratios
}

// runCompare measures every variant's gateway against the baselines, interleaved: each
// repetition runs raw, pass and every variant back to back for each measurement, in an order
// rotated every repetition, so that ratios between columns of one repetition share the
// machine's load of those seconds.
func (b *bench) runCompare(ctx context.Context, vs []variant, stdout io.Writer) error {
	for i := range vs {
		flags, err := gatewayFlags(vs[i].Bin)
		if err != nil {
			return err
		}
		args := []string{}
		for _, l := range liftedLimits {
			if flags[l[0]] {
				args = append(args, "--"+l[0], l[1])
			}
		}
		args = append(append(args, b.cfg.GatewayArgs...), vs[i].Args...)
		if b.cfg.TraceGateway != "" && flags["pprof-listen"] {
			args = append(args, "--pprof-listen", "127.0.0.1:0")
		}
		if vs[i].SHA, err = fileSHA256(vs[i].Bin); err != nil {
			return err
		}
		g, err := startGateway(ctx, vs[i].Bin, 4096, args...)
		if err != nil {
			return err
		}
		b.gateways = append(b.gateways, g)
		vs[i].gw = g
		b.logf("variant %s: %s %s (sha256 %.12s…), pid %d", vs[i].Name, vs[i].Bin, strings.Join(args, " "), vs[i].SHA, g.Pid)
	}
	pt, err := b.passthrough(ctx)
	if err != nil {
		return err
	}
	cols := []string{"raw", "pass"}
	for _, v := range vs {
		cols = append(cols, v.Name)
	}
	byName := map[string]*variant{}
	for i := range vs {
		byName[vs[i].Name] = &vs[i]
	}
	echoCols := slices.Clone(cols)
	if b.cfg.EchoLean {
		for _, v := range vs {
			echoCols = append(echoCols, leanCol+v.Name)
		}
	}
	cmp := &comparison{vals: map[string]map[string][]float64{}, unit: map[string]string{}}
	want := func(s string) bool { return len(b.cfg.Only) == 0 || slices.Contains(b.cfg.Only, s) }
	modes := []echoMode{
		{name: "echo back to back", n: b.cfg.EchoN},
		{name: "echo from idle", pause: b.cfg.IdlePause, n: b.cfg.EchoIdleN},
		{name: "echo while another session streams", load: true, n: b.cfg.EchoN},
	}
	script := streamScript(b.cfg.Bytes)
	wantBytes := base64Len(b.cfg.Bytes)
	buf := make([]byte, 64<<10)
	for rep := range b.cfg.Reps {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t0 := time.Now()
		if want("echo") {
			for _, m := range modes {
				for _, col := range order(echoCols, rep) {
					var lat latencies
					var err error
					lean, isLean := strings.CutPrefix(col, leanCol)
					switch {
					case col == "raw":
						lat, err = b.rawEcho(ctx, m)
					case col == "pass":
						lat, err = b.passEcho(ctx, pt, m)
					case isLean:
						lat, err = b.leanEcho(ctx, byName[lean].gw, m)
					default:
						lat, err = b.muxEcho(ctx, byName[col].gw, m)
					}
					if err != nil {
						return fmt.Errorf("%s, %s: %w", m.name, col, err)
					}
					p := lat.pct()
					// The lean client's rows (lean.go) hold each variant's lean figures in
					// the variant's column, and the same raw and pass figures as the rows
					// above, so that their ratios are per repetition too.
					rows := []string{m.name}
					switch {
					case isLean:
						rows, col = []string{m.name + " (lean client)"}, lean
					case b.cfg.EchoLean && (col == "raw" || col == "pass"):
						rows = append(rows, m.name+" (lean client)")
					}
					for _, row := range rows {
						cmp.add(row+", p50", "µs", col, p.P50)
						cmp.add(row+", p99", "µs", col, p.P99)
					}
				}
			}
		}
		if want("throughput") {
			for _, col := range order(cols, rep) {
				var rate, cpu float64
				var err error
				switch col {
				case "raw":
					rate, cpu, err = b.rawStream(script, wantBytes, buf)
				case "pass":
					rate, err = passStream(ctx, pt, script, wantBytes)
				default:
					gw := byName[col].gw
					cl, derr := gw.dial(ctx)
					if derr != nil {
						return derr
					}
					rate, cpu, _, err = b.muxStream(ctx, gw, cl, script, wantBytes, buf)
					cl.Close()
				}
				if err != nil {
					return fmt.Errorf("throughput, %s: %w", col, err)
				}
				cmp.add("output, 1 session", "MiB/s", col, rate)
				if col != "pass" {
					cmp.add("CPU per GiB, 1 session (raw: the reader's)", "s/GiB", col, cpu)
				}
			}
		}
		if want("aggregate") {
			for _, run := range []struct {
				name, script string
				pass         bool
			}{{"8 sessions", floodScript, true}, {"8 `yes` sessions", yesScript, false}} {
				for _, col := range order(cols, rep) {
					var r floodResult
					var err error
					switch col {
					case "raw":
						r, err = b.rawFlood(ctx, run.script, 8)
					case "pass":
						if !run.pass {
							continue
						}
						r, err = b.passFlood(ctx, pt, run.script, 8)
					default:
						r, err = b.muxFlood(ctx, byName[col].gw, run.script, 8)
					}
					if err != nil {
						return fmt.Errorf("%s, %s: %w", run.name, col, err)
					}
					if run.pass {
						cmp.add("output, "+run.name+" (one socket)", "MiB/s", col, r.rate)
						cmp.add("fairness, "+run.name+" (one socket, min/max bytes)", "", col, r.fairness())
						if col != "raw" && col != "pass" {
							cmp.add("gateway CPU per GiB, "+run.name, "s/GiB", col, r.cpuGiB)
						}
					} else {
						cmp.add("fairness, "+run.name+" (min/max)", "", col, r.fairness())
						if col != "raw" {
							// Where the split was made: the gateway's reads from the PTYs, and
							// how much output the least backlogged session still had waiting.
							cmp.add("fairness of the gateway's PTY reads, "+run.name, "", col, minOverMax(r.readBytes))
							cmp.add("least output waiting at the gateway at the end, "+run.name, "KiB", col, float64(slices.Min(r.lags))/1024)
						}
					}
				}
			}
		}
		line := fmt.Sprintf("rep %d (%.0f s):", rep+1, time.Since(t0).Seconds())
		for _, row := range cmp.rows {
			line += "\n     " + row + ":"
			for _, col := range cols {
				if v := cmp.vals[row][col]; len(v) > rep {
					line += fmt.Sprintf(" %s %s", col, fmtNum(v[rep]))
				}
			}
		}
		b.logf("%s", line)
	}
	if b.cfg.TraceGateway != "" && want("echo") {
		for _, v := range vs {
			if err := b.traceEcho(ctx, v, modes); err != nil {
				b.report.Errors = append(b.report.Errors, err.Error())
			}
		}
	}
	out := cmp.report(cols, vs)
	b.report.Details["compare_variants"] = vs
	b.report.Details["compare_rows"] = out
	writeCompareMarkdown(stdout, b.report, cols, vs, out)
	if b.cfg.MD != "" {
		if err := os.MkdirAll(filepath.Dir(b.cfg.MD), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", b.cfg.MD, err)
		}
		f, err := os.Create(b.cfg.MD)
		if err != nil {
			return fmt.Errorf("create %s: %w", b.cfg.MD, err)
		}
		writeCompareMarkdown(f, b.report, cols, vs, out)
		if err := f.Close(); err != nil {
			return fmt.Errorf("write %s: %w", b.cfg.MD, err)
		}
	}
	return nil
}

// report summarises every row: each column's median and range, and per-repetition ratios of
// every variant to raw, to pass and to the first variant.
func (c *comparison) report(cols []string, vs []variant) []CompareRow {
	var out []CompareRow
	for _, row := range c.rows {
		r := CompareRow{Name: row, Unit: c.unit[row], Values: map[string]*Stat{}, Ratios: map[string]*Stat{}}
		for _, col := range cols {
			if v := c.vals[row][col]; len(v) > 0 {
				r.Values[col] = newStat(v)
			}
		}
		for i, v := range vs {
			mine := c.vals[row][v.Name]
			for _, base := range []string{"raw", "pass"} {
				if b := c.vals[row][base]; len(b) > 0 && len(mine) > 0 {
					r.Ratios[v.Name+"/"+base] = newStat(ratios(mine, b))
				}
			}
			if i > 0 && len(mine) > 0 {
				r.Ratios[v.Name+"/"+vs[0].Name] = newStat(ratios(mine, c.vals[row][vs[0].Name]))
			}
		}
		out = append(out, r)
	}
	return out
}

func writeCompareMarkdown(w io.Writer, r *Report, cols []string, vs []variant, rows []CompareRow) {
	fmt.Fprintf(w, "muxbench comparison, %s — %d × %s, Linux %s, %s; %d interleaved repetitions\n\n",
		r.Date, r.Machine.CPUs, r.Machine.Model, r.Machine.Kernel, r.Machine.Go, r.Config.Reps)
	for _, v := range vs {
		fmt.Fprintf(w, "- %s: %s %s (sha256 %.12s…)\n", v.Name, v.Bin, strings.Join(v.Args, " "), v.SHA)
	}
	fmt.Fprintln(w, "\nMedian over repetitions (min–max); ratios are per repetition, then the median (min–max).")
	fmt.Fprintln(w)
	head := "| measurement |"
	sep := "| --- |"
	for _, col := range cols {
		head += " " + col + " |"
		sep += " --- |"
	}
	for i, v := range vs {
		head += fmt.Sprintf(" %s/raw | %s/pass |", v.Name, v.Name)
		sep += " --- | --- |"
		if i > 0 {
			head += fmt.Sprintf(" %s/%s |", v.Name, vs[0].Name)
			sep += " --- |"
		}
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	for _, row := range rows {
		line := "| " + row.Name + " |"
		for _, col := range cols {
			line += " " + fmtStat(row.Values[col], row.Unit) + " |"
		}
		for i, v := range vs {
			line += " " + fmtStat(row.Ratios[v.Name+"/raw"], "×") + " | " + fmtStat(row.Ratios[v.Name+"/pass"], "×") + " |"
			if i > 0 {
				line += " " + fmtStat(row.Ratios[v.Name+"/"+vs[0].Name], "×") + " |"
			}
		}
		fmt.Fprintln(w, line)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "\nerror: %s\n", e)
	}
}

// traceEcho records a 2 s Go execution trace of v's gateway (its --pprof-listen) during
// keystrokes back to back and during keystrokes while another session streams, into
// PREFIX.<variant>.<mode>.trace.
func (b *bench) traceEcho(ctx context.Context, v variant, modes []echoMode) error {
	if v.gw.pprof == "" {
		return fmt.Errorf("trace %s: the gateway has no --pprof-listen", v.Name)
	}
	for _, m := range []echoMode{modes[0], modes[2]} {
		path := fmt.Sprintf("%s.%s.%s.trace", b.cfg.TraceGateway, v.Name, strings.ReplaceAll(strings.TrimPrefix(m.name, "echo "), " ", "-"))
		done := make(chan error, 1)
		go func() { done <- fetchProfile(ctx, v.gw.pprof+"trace?seconds=2", path) }()
		m.n = 200
		for {
			if _, err := b.muxEcho(ctx, v.gw, m); err != nil {
				<-done
				return fmt.Errorf("trace %s: %w", v.Name, err)
			}
			select {
			case err := <-done:
				if err != nil {
					return fmt.Errorf("trace %s: %w", v.Name, err)
				}
				b.logf("trace of %s, %s: %s", v.Name, m.name, path)
			default:
				continue
			}
			break
		}
	}
	return nil
}

// runVariants is run for -variant: the comparison instead of the sections.
func runVariants(ctx context.Context, cfg config, stdout, stderr io.Writer) (err error) {
	var vs []variant
	for _, s := range cfg.Variants {
		v, err := parseVariant(s)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(vs, func(x variant) bool { return x.Name == v.Name }) {
			return fmt.Errorf("-variant %s given twice", v.Name)
		}
		vs = append(vs, v)
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return fmt.Errorf("run id: %w", err)
	}
	start := time.Now()
	b := &bench{cfg: cfg, tagKey: "MUXBENCH_RUN", tagVal: hex.EncodeToString(id[:]), log: stderr,
		report: &Report{Tool: "muxbench", Date: start.UTC().Format(time.RFC3339), Machine: readMachine(),
			Command: strings.Join(os.Args, " "), Config: cfg, Details: map[string]any{}}}
	b.report.Machine.Go = runtime.Version()
	defer func() {
		if cerr := b.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	err = b.runCompare(ctx, vs, stdout)
	b.report.Seconds = time.Since(start).Seconds()
	if err != nil {
		b.report.Errors = append(b.report.Errors, err.Error())
	}
	if cfg.JSON != "" {
		if jerr := writeJSON(cfg.JSON, b.report); jerr != nil {
			return errors.Join(err, jerr)
		}
		b.logf("wrote %s", cfg.JSON)
	}
	return err
}
