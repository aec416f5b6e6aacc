package main

import (
	"context"
	"fmt"
	"time"

	"github.com/gorilla/websocket"
)

// catScript turns the terminal raw, says R, and echoes every byte it reads.
const catScript = "stty raw -echo; printf R; exec cat"

const echoWarmup = 20

// echoRun times n keystrokes: write one byte, wait until it has come back. With pause > 0 the
// terminal is left idle that long before each keystroke.
func echoRun(ctx context.Context, n int, pause time.Duration, write func(byte) error, read func() (int, error)) (latencies, error) {
	return echoRunSettled(ctx, n, pause, write, read, nil)
}

// echoRunSettled is echoRun with settle (if not nil) called after each echo, off the clock and
// before the next pause and keystroke: the lean client acknowledges there what it consumed.
func echoRunSettled(ctx context.Context, n int, pause time.Duration, write func(byte) error, read func() (int, error), settle func() error) (latencies, error) {
	lat := make(latencies, 0, n)
	for i := range n + echoWarmup {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if pause > 0 {
			time.Sleep(pause) // the deliberate idle pause, not synchronisation
		}
		t := time.Now()
		if err := write(byte('a' + i%26)); err != nil {
			return nil, fmt.Errorf("keystroke %d: %w", i, err)
		}
		for got := 0; got < 1; {
			m, err := read()
			if err != nil {
				return nil, fmt.Errorf("echo of keystroke %d: %w", i, err)
			}
			got += m
		}
		if i >= echoWarmup {
			lat = append(lat, time.Since(t))
		}
		if settle != nil {
			if err := settle(); err != nil {
				return nil, fmt.Errorf("after keystroke %d: %w", i, err)
			}
		}
	}
	return lat, nil
}

// neighbourRate starts timing a streaming neighbour's output (count, nil without one) during
// the keystrokes; the returned func records its MiB/s under client in b.neighbour, when runEcho
// collects them.
func (b *bench) neighbourRate(client string, count func() int64) func() {
	if count == nil || b.neighbour == nil {
		return func() {}
	}
	n0, t0 := count(), time.Now()
	return func() {
		b.neighbour[client] = append(b.neighbour[client], float64(count()-n0)/(1<<20)/time.Since(t0).Seconds())
	}
}

type echoMode struct {
	name  string
	pause time.Duration
	load  bool
	n     int
}

func (b *bench) rawEcho(ctx context.Context, m echoMode) (latencies, error) {
	var count func() int64
	if m.load {
		r, err := b.startRaw(floodScript)
		if err != nil {
			return nil, err
		}
		f := startRawFlood(r)
		defer f.stop()
		<-f.first
		count = f.count
	}
	r, err := b.startRaw(catScript)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if _, err := r.readUntil("R"); err != nil {
		return nil, err
	}
	buf := make([]byte, 64)
	defer b.neighbourRate("raw", count)()
	return echoRun(ctx, m.n, m.pause,
		func(c byte) error { _, err := r.f.Write([]byte{c}); return err },
		func() (int, error) { return r.f.Read(buf) })
}

func (b *bench) passEcho(ctx context.Context, pt *passthrough, m echoMode) (latencies, error) {
	var count func() int64
	if m.load {
		ws, err := pt.dial(ctx, floodScript)
		if err != nil {
			return nil, err
		}
		f := startPtFlood(ws)
		defer f.stop()
		<-f.first
		count = f.count
	}
	ws, err := pt.dialCat(ctx)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	defer b.neighbourRate("pass", count)()
	return echoRun(ctx, m.n, m.pause,
		func(c byte) error { return ws.WriteMessage(websocket.BinaryMessage, []byte{c}) },
		func() (int, error) {
			_, p, err := ws.ReadMessage()
			return len(p), err
		})
}

func (b *bench) muxEcho(ctx context.Context, gw *gatewayProc, m echoMode) (latencies, error) {
	c, err := gw.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var count func() int64
	if m.load {
		ch, err := b.openSh(ctx, c, floodScript)
		if err != nil {
			return nil, err
		}
		f := startFlood(ch)
		defer func() {
			killQuiet(c, ch.Session())
			<-f.done
		}()
		<-f.first
		count = f.count
	}
	ch, err := b.openSh(ctx, c, catScript)
	if err != nil {
		return nil, err
	}
	defer killQuiet(c, ch.Session())
	if _, err := readUntil(ctx, c, ch, "R"); err != nil {
		return nil, err
	}
	stop := guard(ctx, c, ch)
	defer stop()
	buf := make([]byte, 64)
	defer b.neighbourRate("mux", count)()
	return echoRun(ctx, m.n, m.pause,
		func(c byte) error { _, err := ch.Write([]byte{c}); return err },
		func() (int, error) { return ch.Read(buf) })
}

// leanEcho is muxEcho through the lean client: the same sessions, on one socket, measured by
// echoRun with the reads in the measuring goroutine. The stream's output is acknowledged frame
// by frame as it is consumed; the echo's when the echo has come, before the next keystroke and
// off the clock, as the Go client's goes out from its ack goroutine. A gap in the echo fails
// the run; the stream's gaps and the acks sent during the keystrokes are recorded in
// b.leanStats (when runEcho collects them).
func (b *bench) leanEcho(ctx context.Context, gw *gatewayProc, m echoMode) (lat latencies, err error) {
	l, err := dialLean(ctx, gw.URL(), gw.token)
	if err != nil {
		return nil, err
	}
	defer l.close()
	defer func() {
		if kerr := l.kill(); kerr != nil && err == nil {
			err = fmt.Errorf("lean client: %w", kerr)
		}
	}()
	env := map[string]string{b.tagKey: b.tagVal}
	var count func() int64
	var fl *leanChan
	if m.load {
		fl, err = l.open([]string{"sh", "-c", floodScript}, env)
		if err != nil {
			return nil, err
		}
		end, _ := l.within(readUntilTimeout)
		for fl.recv == 0 { // the stream has started
			if _, _, err := l.step(); err != nil {
				end()
				return nil, fmt.Errorf("wait for the stream: %w", err)
			}
		}
		end()
		count = func() int64 { return fl.recv }
	}
	ch, err := l.open([]string{"sh", "-c", catScript}, env)
	if err != nil {
		return nil, err
	}
	l.hold = ch
	if err := l.readUntil(ch, "R"); err != nil {
		return nil, err
	}
	if err := l.idle(); err != nil {
		return nil, err
	}
	key := make([]byte, 1)
	defer b.neighbourRate("lean", count)()
	acks0, lost0 := l.acks, int64(0)
	if fl != nil {
		lost0 = fl.lost
	}
	lat, err = echoRunSettled(ctx, m.n, m.pause,
		func(c byte) error { key[0] = c; return l.input(ch, key) },
		func() (int, error) { return l.read(ch) },
		l.idle)
	if err == nil && b.leanStats != nil {
		b.leanStats["acks: "+m.name] = append(b.leanStats["acks: "+m.name], l.acks-acks0)
		if fl != nil {
			b.leanStats["stream gap bytes: "+m.name] = append(b.leanStats["stream gap bytes: "+m.name], fl.lost-lost0)
		}
	}
	return lat, err
}

// runEcho: keystroke round trips to a raw `cat`, back to back, from idle, and while another
// session (on the same socket, for muxterm) streams.
func (b *bench) runEcho(ctx context.Context) error {
	gw, pt, err := b.mainAndPassthrough(ctx)
	if err != nil {
		return err
	}
	modes := []echoMode{
		{name: "back to back", n: b.cfg.EchoN},
		{name: "from idle", pause: b.cfg.IdlePause, n: b.cfg.EchoIdleN},
		{name: "while another session streams", load: true, n: b.cfg.EchoN},
	}
	b.neighbour = map[string][]float64{}
	b.leanStats = map[string][]int64{}
	defer func() { b.neighbour, b.leanStats = nil, nil }()
	type series struct{ raw, pass, mux, lean []pct }
	res := make([]series, len(modes))
	clients := []string{"raw", "pass", "mux"}
	if b.cfg.EchoLean {
		clients = append(clients, "lean")
	}
	for rep := range b.cfg.Reps {
		for mi, m := range modes {
			for _, v := range order(clients, rep) {
				var lat latencies
				var err error
				switch v {
				case "raw":
					lat, err = b.rawEcho(ctx, m)
				case "pass":
					lat, err = b.passEcho(ctx, pt, m)
				case "mux":
					lat, err = b.muxEcho(ctx, gw, m)
				case "lean":
					lat, err = b.leanEcho(ctx, gw, m)
				}
				if err != nil {
					return fmt.Errorf("echo %s, %s: %w", m.name, v, err)
				}
				p := lat.pct()
				switch v {
				case "raw":
					res[mi].raw = append(res[mi].raw, p)
				case "pass":
					res[mi].pass = append(res[mi].pass, p)
				case "mux":
					res[mi].mux = append(res[mi].mux, p)
				case "lean":
					res[mi].lean = append(res[mi].lean, p)
				}
			}
			s := res[mi]
			line := fmt.Sprintf("   rep %d, %s: p50 raw %.0f, pass %.0f, muxterm %.0f µs; p99 raw %.0f, pass %.0f, muxterm %.0f µs",
				rep+1, m.name, s.raw[rep].P50, s.pass[rep].P50, s.mux[rep].P50, s.raw[rep].P99, s.pass[rep].P99, s.mux[rep].P99)
			if b.cfg.EchoLean {
				line += fmt.Sprintf("; lean client p50 %.0f, p99 %.0f µs", s.lean[rep].P50, s.lean[rep].P99)
				if v := b.leanStats["acks: "+m.name]; len(v) > rep {
					line += fmt.Sprintf(" (%d acks)", v[rep])
				}
			}
			if m.load {
				line += "; the neighbour streamed (MiB/s)"
				for _, c := range clients {
					if v := b.neighbour[c]; len(v) > rep {
						line += fmt.Sprintf(" %s %.1f", c, v[rep])
					}
				}
			}
			b.logf("%s", line)
		}
	}
	// How fast the neighbour streamed during the keystrokes, per client and repetition.
	b.report.Details["echo_neighbour_mib_s"] = b.neighbour
	if b.cfg.EchoLean {
		// The lean client's acks during each repetition's keystrokes, and its stream's gaps.
		b.report.Details["echo_lean"] = b.leanStats
	}
	col := func(ps []pct, q string) []float64 {
		out := make([]float64, len(ps))
		for i, p := range ps {
			out[i] = map[string]float64{"p50": p.P50, "p99": p.P99, "p999": p.P999}[q]
		}
		return out
	}
	// The echo targets: the pass-through and raw stand in for ttyd's position here.
	targets := map[string]*Target{
		"back to back/p50":                  {Desc: "≤ 1.05× pass-through", Of: "ratio_pass", Op: "<=", Value: 1.05},
		"back to back/p99":                  {Desc: "≤ 0.95× pass-through", Of: "ratio_pass", Op: "<=", Value: 0.95},
		"from idle/p50":                     {Desc: "≤ 0.95× pass-through", Of: "ratio_pass", Op: "<=", Value: 0.95},
		"while another session streams/p99": {Desc: "≤ 1.5× raw", Of: "ratio_raw", Op: "<=", Value: 1.5},
	}
	for mi, m := range modes {
		for _, q := range []string{"p50", "p99", "p999"} {
			note := ""
			if q == "p50" {
				note = fmt.Sprintf("%d keystrokes per repetition", m.n)
				if m.pause > 0 {
					note += fmt.Sprintf(", each after %v idle", m.pause)
				}
				if m.load {
					note += fmt.Sprintf("; meanwhile `%s` streams (muxterm: on the same socket, acked; raw: a PTY read in-process; pass-through: its own socket)", floodScript)
				}
				if m.n < 1000 {
					note += "; with fewer than 1000 samples p999 is the maximum"
				}
			}
			b.addRow(newRow("echo", fmt.Sprintf("%s, %s", m.name, q), "µs",
				col(res[mi].mux, q), col(res[mi].raw, q), col(res[mi].pass, q), targets[m.name+"/"+q], note))
		}
	}
	if !b.cfg.EchoLean {
		return nil
	}
	// The same keystrokes through the lean client (lean.go): the muxterm column is the lean
	// client's, and the rows carry no target (the targets are the Go client's rows above).
	for mi, m := range modes {
		for _, q := range []string{"p50", "p99", "p999"} {
			note := ""
			if mi == 0 && q == "p50" {
				note = "muxbench's lean muxterm.v1 client (cmd/muxbench/lean.go): the same sessions on one socket, " +
					"read in the measuring goroutine itself instead of through the Go client's readLoop and Channel.Read; " +
					"acks the stream's output frame by frame as it consumes it, the echo's when the echo has come (off the clock); " +
					"its ack frames and the stream's gap bytes per repetition are in the JSON's details.echo_lean"
			}
			b.addRow(newRow("echo (lean client)", fmt.Sprintf("%s, %s", m.name, q), "µs",
				col(res[mi].lean, q), col(res[mi].raw, q), col(res[mi].pass, q), nil, note))
		}
	}
	return nil
}
