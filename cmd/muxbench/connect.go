package main

import (
	"context"
	"fmt"
	"time"

	"github.com/muxterm/muxterm/client"
)

// readyScript prints one line and exits: its first output byte stands for the first prompt.
const readyScript = "echo ready"

// runConnect: time to the first output byte of `sh -c 'echo ready'`, from the socket dial and
// from session.open on an open socket, against spawning it on a PTY in-process.
func (b *bench) runConnect(ctx context.Context) error {
	gw, pt, err := b.mainAndPassthrough(ctx)
	if err != nil {
		return err
	}
	n := b.cfg.ConnectN
	buf := make([]byte, 4096)
	var rawP, passP, dialP, openP []pct
	for rep := range b.cfg.Reps {
		for _, v := range order([]string{"raw", "pass", "dial", "open"}, rep) {
			lat := make(latencies, 0, n)
			switch v {
			case "raw":
				for range n {
					t := time.Now()
					r, err := b.startRaw(readyScript)
					if err != nil {
						return err
					}
					_, rerr := r.f.Read(buf)
					d := time.Since(t)
					if rerr == nil {
						_, rerr = r.readAll(buf)
					}
					if rerr != nil {
						r.close()
						return fmt.Errorf("raw spawn: %w", rerr)
					}
					if err := r.wait(); err != nil {
						return fmt.Errorf("raw spawn: %w", err)
					}
					lat = append(lat, d)
				}
				rawP = append(rawP, lat.pct())
			case "pass":
				for range n {
					t := time.Now()
					ws, err := pt.dial(ctx, readyScript)
					if err != nil {
						return err
					}
					_, _, rerr := ws.ReadMessage()
					d := time.Since(t)
					ws.Close()
					if rerr != nil {
						return fmt.Errorf("pass-through first byte: %w", rerr)
					}
					lat = append(lat, d)
				}
				passP = append(passP, lat.pct())
			case "dial":
				for range n {
					// DialOpen: session.open goes right behind initialize, in one round trip.
					t := time.Now()
					c, ch, err := gw.dialOpen(ctx, b.shOptions(readyScript))
					if err != nil {
						return err
					}
					d, err := firstRead(ctx, c, ch, t)
					c.Close()
					if err != nil {
						return err
					}
					lat = append(lat, d)
				}
				dialP = append(dialP, lat.pct())
			case "open":
				c, err := gw.dial(ctx)
				if err != nil {
					return err
				}
				for range n {
					d, err := b.firstByte(ctx, c, time.Now())
					if err != nil {
						c.Close()
						return err
					}
					lat = append(lat, d)
				}
				c.Close()
				openP = append(openP, lat.pct())
			}
		}
		b.logf("   rep %d: p50 raw spawn %.0f, pass-through %.0f, muxterm from dial %.0f, from open %.0f µs",
			rep+1, rawP[rep].P50, passP[rep].P50, dialP[rep].P50, openP[rep].P50)
	}
	col := func(ps []pct, p99 bool) []float64 {
		out := make([]float64, len(ps))
		for i, p := range ps {
			out[i] = p.P50
			if p99 {
				out[i] = p.P99
			}
		}
		return out
	}
	note := fmt.Sprintf("`sh -c '%s'`, %d samples per repetition; muxterm from dial: mux.DialOpen (session.open right behind initialize); raw: creack/pty spawn in-process; pass-through: dial (which spawns)", readyScript, n)
	for _, p99 := range []bool{false, true} {
		q := map[bool]string{false: "p50", true: "p99"}[p99]
		var t *Target
		if !p99 {
			t = &Target{Desc: "≤ 1.1× raw spawn", Of: "ratio_raw", Op: "<=", Value: 1.1}
		}
		b.addRow(newRow("connect", "from socket dial to first byte, "+q, "µs", col(dialP, p99), col(rawP, p99), col(passP, p99), t, map[bool]string{false: note}[p99]))
		b.addRow(newRow("connect", "from session.open to first byte, "+q, "µs", col(openP, p99), col(rawP, p99), col(passP, p99), nil, ""))
	}
	return nil
}

// firstByte opens `sh -c 'echo ready'` on c, returns the time from t to its first output byte,
// then removes the session.
func (b *bench) firstByte(ctx context.Context, c *client.Client, t time.Time) (time.Duration, error) {
	ch, err := b.openSh(ctx, c, readyScript)
	if err != nil {
		return 0, err
	}
	return firstRead(ctx, c, ch, t)
}

// firstRead returns the time from t to ch's first output byte, then removes the session.
func firstRead(ctx context.Context, c *client.Client, ch *client.Channel, t time.Time) (time.Duration, error) {
	buf := make([]byte, 4096)
	stop := guard(ctx, c, ch)
	_, rerr := ch.Read(buf)
	d := time.Since(t)
	stop()
	if _, err := c.Kill(ctx, ch.Session()); err != nil && rerr == nil {
		rerr = fmt.Errorf("kill: %w", err)
	}
	if err := waitClosed(ch); err != nil && rerr == nil {
		rerr = err
	}
	if rerr != nil {
		return 0, fmt.Errorf("first byte of %q: %w", readyScript, rerr)
	}
	return d, nil
}
