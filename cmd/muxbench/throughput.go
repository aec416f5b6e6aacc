package main

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/muxterm/muxterm/client"
)

const mib = 1 << 20

// base64Len is the size of GNU base64's output for n input bytes: 4 characters per 3 bytes
// (padded), a newline after every 76 and at the end. In raw mode (-opost) the PTY passes the
// newlines through unchanged.
func base64Len(n int64) int64 {
	l := 4 * ((n + 2) / 3)
	return l + (l+75)/76
}

// streamScript prints base64 of n zero bytes on a raw terminal.
func streamScript(n int64) string {
	return fmt.Sprintf("stty raw -echo; head -c %d /dev/zero | base64", n)
}

// selfCPU is this process's user+system CPU time.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// runThroughput: one session streaming -bytes of base64, raw vs pass-through vs muxterm.
func (b *bench) runThroughput(ctx context.Context) error {
	gw, pt, err := b.mainAndPassthrough(ctx)
	if err != nil {
		return err
	}
	c, err := gw.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	script := streamScript(b.cfg.Bytes)
	want := base64Len(b.cfg.Bytes)
	buf := make([]byte, 64<<10)
	var raw, pass, muxv, rawCPU, gwCPU, clientCPU []float64
	for rep := range b.cfg.Reps {
		for _, v := range order([]string{"raw", "pass", "mux"}, rep) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			switch v {
			case "raw":
				rate, cpu, err := b.rawStream(script, want, buf)
				if err != nil {
					return err
				}
				raw = append(raw, rate)
				rawCPU = append(rawCPU, cpu)
			case "pass":
				rate, err := passStream(ctx, pt, script, want)
				if err != nil {
					return err
				}
				pass = append(pass, rate)
			case "mux":
				rate, gcpu, ccpu, err := b.muxStream(ctx, gw, c, script, want, buf)
				if err != nil {
					return err
				}
				muxv = append(muxv, rate)
				gwCPU = append(gwCPU, gcpu)
				clientCPU = append(clientCPU, ccpu)
			}
		}
		b.logf("   rep %d: raw %.0f, pass %.0f, muxterm %.0f MiB/s", rep+1, last(raw), last(pass), last(muxv))
	}
	b.addRow(newRow("throughput", "1 session, MiB/s at the client", "MiB/s", muxv, raw, pass,
		&Target{Desc: "≥ 90% of raw", Of: "ratio_raw", Op: ">=", Value: 0.90},
		fmt.Sprintf("`%s`: %d bytes per run, timed from spawn/open to the last byte", script, want)))
	b.addRow(newRow("throughput", "1 session, gateway CPU s/GiB", "s/GiB", gwCPU, rawCPU, nil,
		&Target{Desc: "≤ 1.1× raw's", Of: "ratio_raw", Op: "<=", Value: 1.1},
		"utime+stime of the gateway from /proc/PID/stat (10 ms ticks) per GiB delivered; raw: muxbench's own CPU (getrusage of the whole process) while one thread reads the PTY, spawn included"))
	b.addRow(newRow("throughput", "1 session, client CPU s/GiB", "s/GiB", clientCPU, nil, nil, nil,
		"muxbench's own CPU (the muxterm/mux Go client) per GiB, for context"))
	return nil
}

// rawStream runs script on a PTY read in this process until its end and returns MiB/s from
// spawn to the last byte and this process's CPU seconds per GiB.
func (b *bench) rawStream(script string, want int64, buf []byte) (rate, cpuGiB float64, err error) {
	gib := float64(want) / (1 << 30)
	self0 := selfCPU()
	t0 := time.Now()
	r, err := b.startRaw(script)
	if err != nil {
		return 0, 0, err
	}
	n, err := r.readAll(buf[:32<<10])
	d := time.Since(t0)
	if err != nil {
		r.close()
		return 0, 0, fmt.Errorf("raw stream: %w", err)
	}
	if err := r.wait(); err != nil {
		return 0, 0, fmt.Errorf("raw stream: %w", err)
	}
	if n != want {
		return 0, 0, fmt.Errorf("raw stream: got %d bytes, want %d", n, want)
	}
	return float64(n) / mib / d.Seconds(), (selfCPU() - self0) / gib, nil
}

// passStream reads script's output through the pass-through to its end and returns MiB/s from
// the dial to the last byte.
func passStream(ctx context.Context, pt *passthrough, script string, want int64) (float64, error) {
	t0 := time.Now()
	ws, err := pt.dial(ctx, script)
	if err != nil {
		return 0, err
	}
	n, err := ptReadAtLeast(ws, want)
	d := time.Since(t0)
	ws.Close()
	if err != nil {
		return 0, err
	}
	if n != want {
		return 0, fmt.Errorf("pass-through stream: got %d bytes, want %d", n, want)
	}
	return float64(n) / mib / d.Seconds(), nil
}

// muxStream opens script as a session on c, reads it to the end and checks the count against
// the kill's final offset. It returns MiB/s from session.open to the last byte, and the
// gateway's and this process's CPU seconds per GiB.
func (b *bench) muxStream(ctx context.Context, gw *gatewayProc, c *client.Client, script string, want int64, buf []byte) (rate, gwCPU, clientCPU float64, err error) {
	gib := float64(want) / (1 << 30)
	cpu0, self0 := gw.cpu(), selfCPU()
	t0 := time.Now()
	ch, err := b.openSh(ctx, c, script)
	if err != nil {
		return 0, 0, 0, err
	}
	n, err := readAtLeast(ctx, c, ch, want, buf)
	d := time.Since(t0)
	cpu1, self1 := gw.cpu(), selfCPU()
	if err != nil {
		return 0, 0, 0, err
	}
	res, err := c.Kill(ctx, ch.Session())
	if err != nil {
		return 0, 0, 0, fmt.Errorf("kill stream session: %w", err)
	}
	if err := waitClosed(ch); err != nil {
		return 0, 0, 0, err
	}
	if n != want || res.Offset != want {
		return 0, 0, 0, fmt.Errorf("muxterm stream: read %d bytes, session printed %d, want %d", n, res.Offset, want)
	}
	return float64(n) / mib / d.Seconds(), (cpu1 - cpu0) / gib, (self1 - self0) / gib, nil
}

func last(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return v[len(v)-1]
}

// floodScript streams base64 of zeros for as long as anyone reads.
const floodScript = "stty raw -echo; head -c 1099511627776 /dev/zero | base64"

// yesScript floods with the cheapest producer there is, so the sessions stay backlogged and the
// gateway, not the CPU scheduler's choice among producers, decides who gets the socket.
const yesScript = "stty raw -echo; exec yes"

// floodResult is one windowed run: aggregate rate, per-stream bytes, gateway CPU per GiB.
type floodResult struct {
	rate     float64 // MiB/s, all streams together
	perBytes []int64
	cpuGiB   float64
	// lags (muxterm only): per session, output the gateway holds that the client has not read
	// (session.list's end minus bytes read) right after the window: a session with a large lag
	// is backlogged at the gateway, so what it got depended on the gateway, not its producer.
	lags []int64
	// readBytes (muxterm only): per session, what the gateway read from its PTY over the window
	// (session.list's end before and after), so the reading side's split can be told apart
	// from what reached the client.
	readBytes []int64
}

func (f floodResult) fairness() float64 { return minOverMax(f.perBytes) }

// minOverMax is the smallest count over the largest: 1 for an equal split, 0 for none.
func minOverMax(v []int64) float64 {
	if len(v) == 0 {
		return 0
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if hi == 0 {
		return 0
	}
	return float64(lo) / float64(hi)
}

// measureWindow waits for every stream's first byte, then counts bytes over the window.
func measureWindow(ctx context.Context, window time.Duration, firsts []<-chan struct{}, counts []func() int64, cpu func() float64) (floodResult, error) {
	for _, f := range firsts {
		select {
		case <-f:
		case <-ctx.Done():
			return floodResult{}, ctx.Err()
		}
	}
	snap := func() []int64 {
		out := make([]int64, len(counts))
		for i, c := range counts {
			out[i] = c()
		}
		return out
	}
	c0, t0 := cpu(), time.Now()
	s0 := snap()
	t := time.NewTimer(window)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return floodResult{}, ctx.Err()
	}
	s1 := snap()
	d, c1 := time.Since(t0), cpu()
	res := floodResult{perBytes: make([]int64, len(s0))}
	var total int64
	for i := range s0 {
		res.perBytes[i] = s1[i] - s0[i]
		total += res.perBytes[i]
	}
	res.rate = float64(total) / mib / d.Seconds()
	if total > 0 {
		res.cpuGiB = (c1 - c0) / (float64(total) / (1 << 30))
	}
	return res, nil
}

func (b *bench) rawFlood(ctx context.Context, script string, n int) (floodResult, error) {
	fl := make([]*rawFlood, 0, n)
	defer func() {
		for _, f := range fl {
			f.stop()
		}
	}()
	for range n {
		r, err := b.startRaw(script)
		if err != nil {
			return floodResult{}, err
		}
		fl = append(fl, startRawFlood(r))
	}
	firsts, counts := windowOf(fl)
	return measureWindow(ctx, b.cfg.Window, firsts, counts, func() float64 { return 0 })
}

func (b *bench) passFlood(ctx context.Context, pt *passthrough, script string, n int) (floodResult, error) {
	fl := make([]*ptFlood, 0, n)
	defer func() {
		for _, f := range fl {
			f.stop()
		}
	}()
	for range n {
		ws, err := pt.dial(ctx, script)
		if err != nil {
			return floodResult{}, err
		}
		fl = append(fl, startPtFlood(ws))
	}
	firsts, counts := windowOf(fl)
	return measureWindow(ctx, b.cfg.Window, firsts, counts, func() float64 { return 0 })
}

func (b *bench) muxFlood(ctx context.Context, gw *gatewayProc, script string, n int) (floodResult, error) {
	c, err := gw.dial(ctx)
	if err != nil {
		return floodResult{}, err
	}
	defer c.Close()
	fl := make([]*flood, n)
	defer func() {
		_ = parallel(context.Background(), n, 16, func(i int) error {
			if fl[i] != nil {
				killQuiet(c, fl[i].ch.Session())
				<-fl[i].done
			}
			return nil
		})
	}()
	err = parallel(ctx, n, 16, func(i int) error {
		ch, err := b.openSh(ctx, c, script)
		if err != nil {
			return err
		}
		fl[i] = startFlood(ch)
		return nil
	})
	if err != nil {
		return floodResult{}, err
	}
	firsts, counts := windowOf(fl)
	for _, f := range firsts {
		select {
		case <-f:
		case <-ctx.Done():
			return floodResult{}, ctx.Err()
		}
	}
	ends0, err := sessionEnds(ctx, c)
	if err != nil {
		return floodResult{}, err
	}
	res, err := measureWindow(ctx, b.cfg.Window, firsts, counts, gw.cpu)
	if err != nil {
		return res, err
	}
	ends, err := sessionEnds(ctx, c)
	if err != nil {
		return res, err
	}
	for _, f := range fl {
		id := f.ch.Session()
		res.lags = append(res.lags, ends[id]-f.count())
		res.readBytes = append(res.readBytes, ends[id]-ends0[id])
	}
	return res, nil
}

// sessionEnds is every session's end offset (bytes its reader has taken from the PTY), by id.
func sessionEnds(ctx context.Context, c *client.Client) (map[string]int64, error) {
	list, err := c.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	ends := map[string]int64{}
	for _, s := range list {
		ends[s.Session] = s.End
	}
	return ends, nil
}

// runAggregate: 8 and 64 flooding sessions, muxterm on one socket vs as many raw PTYs read
// concurrently vs as many pass-through sockets; then fairness among 8 `yes` floods, read with
// Channel.Read and with the probe (every frame acked on arrival).
func (b *bench) runAggregate(ctx context.Context) error {
	gw, pt, err := b.mainAndPassthrough(ctx)
	if err != nil {
		return err
	}
	runs := []struct {
		key      string
		n        int
		script   string
		variants []string
	}{
		{"8", 8, floodScript, []string{"raw", "pass", "mux"}},
		{"64", 64, floodScript, []string{"raw", "pass", "mux"}},
		{"8 yes", 8, yesScript, []string{"raw", "mux", "probe"}},
	}
	res := map[string][]floodResult{} // "8/mux" → one result per repetition
	for rep := range b.cfg.Reps {
		for _, run := range runs {
			for _, v := range order(run.variants, rep) {
				var r floodResult
				var err error
				switch v {
				case "raw":
					r, err = b.rawFlood(ctx, run.script, run.n)
				case "pass":
					r, err = b.passFlood(ctx, pt, run.script, run.n)
				case "mux":
					r, err = b.muxFlood(ctx, gw, run.script, run.n)
				case "probe":
					r, err = b.probeFlood(ctx, gw, run.script, run.n)
				}
				if err != nil {
					return fmt.Errorf("%s with %d streams of %q: %w", v, run.n, run.script, err)
				}
				res[run.key+"/"+v] = append(res[run.key+"/"+v], r)
			}
			line := fmt.Sprintf("   rep %d, %s streams:", rep+1, run.key)
			for _, v := range run.variants {
				r := res[run.key+"/"+v][rep]
				line += fmt.Sprintf(" %s %.0f MiB/s (fairness %.3f)", v, r.rate, r.fairness())
			}
			b.logf("%s", line)
		}
	}
	col := func(key string, f func(floodResult) float64) []float64 {
		var out []float64
		for _, r := range res[key] {
			out = append(out, f(r))
		}
		return out
	}
	rate := func(r floodResult) float64 { return r.rate }
	fair := func(r floodResult) float64 { return r.fairness() }
	cpu := func(r floodResult) float64 { return r.cpuGiB }
	window := fmt.Sprintf("bytes counted over a %v window once every stream has printed", b.cfg.Window)
	for _, n := range []string{"8", "64"} {
		var t *Target
		if n == "8" {
			t = &Target{Desc: "≥ 80% of raw", Of: "ratio_raw", Op: ">=", Value: 0.80}
		}
		b.addRow(newRow("aggregate", n+" sessions on one socket, aggregate MiB/s", "MiB/s", col(n+"/mux", rate), col(n+"/raw", rate), col(n+"/pass", rate), t,
			fmt.Sprintf("`%s` per stream, read with Channel.Read; %s; raw: as many PTYs read concurrently in-process; pass-through: one socket each", floodScript, window)))
		b.addRow(newRow("aggregate", n+" sessions, gateway CPU s/GiB", "s/GiB", col(n+"/mux", cpu), nil, nil, nil, ""))
		b.addRow(newRow("aggregate", n+" base64 sessions, fairness (min/max bytes per session)", "", col(n+"/mux", fair), col(n+"/raw", fair), col(n+"/pass", fair), nil,
			"the producers are CPU-bound here, so the kernel's choice among them shows in every column"))
	}
	// Where every session still had output waiting at the gateway when the window closed, the
	// split was the gateway's to make; elsewhere a starved producer had nothing to send.
	backlogged, fairWhen := 0, []string{}
	for _, r := range res["8 yes/mux"] {
		if len(r.lags) > 0 && slices.Min(r.lags) >= 64<<10 {
			backlogged++
			fairWhen = append(fairWhen, fmt.Sprintf("%.3f", r.fairness()))
		}
	}
	b.addRow(newRow("aggregate", "8 `yes` sessions, fairness (min/max bytes per session)", "", col("8 yes/mux", fair), col("8 yes/raw", fair), nil,
		&Target{Desc: "≥ 0.98", Of: "value", Op: ">=", Value: 0.98},
		fmt.Sprintf("`%s` per stream, read with Channel.Read, %s; in %d of %d repetitions every session still had ≥ 64 KiB waiting at the gateway when the window closed, with fairness %v there",
			yesScript, window, backlogged, len(res["8 yes/mux"]), fairWhen)))
	b.addRow(newRow("aggregate", "8 `yes` sessions, fairness with the probe client", "", col("8 yes/probe", fair), col("8 yes/raw", fair), nil, nil,
		"the probe is a one-goroutine protocol client that acks every frame on arrival; the gateway then drains faster than some producers fill, and their scheduling shows"))
	b.addRow(newRow("aggregate", "8 `yes` sessions, aggregate MiB/s (probe)", "MiB/s", col("8 yes/probe", rate), col("8 yes/raw", rate), nil, nil, ""))
	b.addRow(newRow("aggregate", "8 `yes` sessions, aggregate MiB/s (Channel.Read)", "MiB/s", col("8 yes/mux", rate), col("8 yes/raw", rate), nil, nil, ""))
	b.addRow(newRow("aggregate", "8 `yes` sessions, gateway CPU s/GiB (probe)", "s/GiB", col("8 yes/probe", cpu), nil, nil, nil, ""))
	perSession, lags := map[string][][]int64{}, map[string][][]int64{}
	for k, rs := range res {
		for _, r := range rs {
			perSession[k] = append(perSession[k], r.perBytes)
			if r.lags != nil {
				lags[k] = append(lags[k], r.lags)
			}
		}
	}
	b.report.Details["aggregate_bytes_per_session"] = perSession
	b.report.Details["aggregate_lag_per_session"] = lags
	return nil
}
