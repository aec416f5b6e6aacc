package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// churnState is the gateway's footprint that must not grow across open/kill cycles.
type churnState struct {
	FDs      int   `json:"fds"`
	PTMX     int   `json:"ptmx_fds"`
	Threads  int   `json:"threads"`
	Zombies  int   `json:"zombie_children"`
	DevPts   int   `json:"dev_pts_entries"` // system-wide
	RSSKiB   int64 `json:"rss_kib"`
	Sessions int   `json:"sessions"`
}

func churnSample(ctx context.Context, g *gatewayProc, c *client.Client) (churnState, error) {
	s, err := g.sample()
	if err != nil {
		return churnState{}, err
	}
	list, err := c.List(ctx)
	if err != nil {
		return churnState{}, fmt.Errorf("list: %w", err)
	}
	return churnState{FDs: s.FDs, PTMX: s.PTMX, Threads: s.Threads, Zombies: zombieChildren(g.Pid),
		DevPts: devPtsEntries(), RSSKiB: s.RSSKiB, Sessions: len(list)}, nil
}

type churnPoint struct {
	Cycles  int `json:"cycles"`
	FDs     int `json:"fds"`
	Threads int `json:"threads"`
}

// settled reports whether the gateway's per-session resources are back at (or below) before.
// Threads are not among them: the Go runtime keeps the threads it once needed.
func (a churnState) settled(before churnState) bool {
	return a.FDs <= before.FDs && a.PTMX <= before.PTMX && a.Zombies <= before.Zombies &&
		a.Sessions <= before.Sessions
}

// runChurn: -churn cycles of open `cat` → one echoed line → kill on one socket of a fresh
// gateway, comparing fds, PTY masters, threads and zombie children before and after.
func (b *bench) runChurn(ctx context.Context) error {
	g, err := b.startGateway(ctx, 4096)
	if err != nil {
		return err
	}
	defer b.stopGatewayLater(g)
	// Input refused with unknown_channel comes back as an id-less error naming the channel.
	var refusedMu sync.Mutex
	refusedOn := map[uint32]bool{}
	c, err := g.dialWith(ctx, func(e *proto.Error) {
		if ch, ok := e.Channel(); ok && e.Kind() == proto.KindUnknownChannel {
			refusedMu.Lock()
			refusedOn[ch] = true
			refusedMu.Unlock()
		}
	})
	if err != nil {
		return err
	}
	defer c.Close()
	refusedInput := func(id uint32) bool {
		refusedMu.Lock()
		defer refusedMu.Unlock()
		return refusedOn[id]
	}
	// A cycle whose line never echoes because the gateway refused the input frame sent right
	// after session.open's reply (unknown_channel) is counted, not fatal: it is a finding.
	var refused atomic.Int64
	cycle := func() (time.Duration, error) {
		t := time.Now()
		ch, err := b.openArgv(ctx, c, []string{"cat"})
		if err != nil {
			return 0, err
		}
		if _, err := ch.Write([]byte("ping\n")); err != nil {
			killQuiet(c, ch.Session())
			return 0, fmt.Errorf("write: %w", err)
		}
		// The terminal echoes the line, then cat prints it.
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = readUntil(ectx, c, ch, "ping\r\nping\r\n")
		cancel()
		if err != nil {
			// readUntil killed the session to end the read.
			if ctx.Err() == nil && refusedInput(ch.ID) {
				refused.Add(1)
				return time.Since(t), nil
			}
			return 0, err
		}
		res, err := c.Kill(ctx, ch.Session())
		if err != nil {
			return 0, fmt.Errorf("kill: %w", err)
		}
		if res.Status != "killed" || res.Survivors != 0 {
			return 0, fmt.Errorf("kill %s: status %s, %d survivors (exit %v, %.1f ms, signals %v, %d groups, %d escapees, %d unverified)",
				ch.Session(), res.Status, res.Survivors, res.Exit != nil, res.DurationMs, res.Signals, res.Groups, res.Escapees, res.Unverified)
		}
		if err := waitClosed(ch); err != nil {
			return 0, err
		}
		return time.Since(t), nil
	}
	// Warm up first, so the runtime's first threads and buffers are not counted as growth.
	warm := min(50, b.cfg.Churn)
	if err := parallel(ctx, warm, b.cfg.ChurnWorkers, func(int) error { _, err := cycle(); return err }); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	before, err := churnSample(ctx, g, c)
	if err != nil {
		return err
	}
	var done atomic.Int64
	lat := make(latencies, b.cfg.Churn)
	step := int64(max(b.cfg.Churn/10, 1))
	var seriesMu sync.Mutex
	series := []churnPoint{{0, before.FDs, before.Threads}}
	t0 := time.Now()
	err = parallel(ctx, b.cfg.Churn, b.cfg.ChurnWorkers, func(i int) error {
		d, err := cycle()
		lat[i] = d
		if k := done.Add(1); k%step == 0 {
			// Sampled while the other workers run: a few sessions are open at this moment.
			if s, serr := g.sample(); serr == nil {
				seriesMu.Lock()
				series = append(series, churnPoint{int(k), s.FDs, s.Threads})
				seriesMu.Unlock()
				b.logf("   %d cycles: %d fds, %d threads", k, s.FDs, s.Threads)
			}
		}
		return err
	})
	elapsed := time.Since(t0)
	if err != nil {
		return fmt.Errorf("cycle %d: %w", done.Load(), err)
	}
	immediate, err := churnSample(ctx, g, c)
	if err != nil {
		return err
	}
	// The reader closes a master when its read ends, which may trail the kill's reply: give the
	// gateway up to 2 s to settle, sampling every 50 ms, and report how long it took.
	after, settle := immediate, time.Duration(0)
	ts := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !after.settled(before) && time.Since(ts) < 2*time.Second {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if after, err = churnSample(ctx, g, c); err != nil {
			return err
		}
	}
	if after.settled(before) {
		settle = time.Since(ts)
	}
	p := lat.pct()
	one := func(v float64) []float64 { return []float64{v} }
	zero := &Target{Desc: "0 growth", Of: "value", Op: "<=", Value: 0}
	b.logf("   before %+v, right after %+v, settled %+v", before, immediate, after)
	note := fmt.Sprintf("%d cycles of open `cat` → \"ping\\n\" echoed → kill, %d concurrent on one socket: %.0f cycles/s, cycle p50 %.1f ms, p99 %.1f ms; right after: %+v",
		b.cfg.Churn, b.cfg.ChurnWorkers, float64(b.cfg.Churn)/elapsed.Seconds(), p.P50/1e3, p.P99/1e3, immediate)
	switch {
	case immediate.settled(before):
	case after.settled(before):
		note += fmt.Sprintf("; back at the baseline %v after the last cycle", settle.Round(time.Millisecond))
	default:
		note += "; not back at the baseline 2 s after the last cycle"
	}
	b.addRow(newRow("churn", fmt.Sprintf("gateway fds growth (%d → %d)", before.FDs, after.FDs), "", one(float64(after.FDs-before.FDs)), nil, nil, zero, note))
	b.addRow(newRow("churn", fmt.Sprintf("gateway PTY masters growth (%d → %d)", before.PTMX, after.PTMX), "", one(float64(after.PTMX-before.PTMX)), nil, nil, zero, ""))
	threads := ""
	for _, p := range series {
		threads += fmt.Sprintf(" %d→%d", p.Cycles, p.Threads)
	}
	b.addRow(newRow("churn", fmt.Sprintf("gateway threads growth (%d → %d)", before.Threads, after.Threads), "", one(float64(after.Threads-before.Threads)), nil, nil, zero,
		"threads by cycles done:"+threads))
	b.addRow(newRow("churn", fmt.Sprintf("gateway zombie children (%d → %d)", before.Zombies, after.Zombies), "", one(float64(after.Zombies-before.Zombies)), nil, nil, zero, ""))
	b.addRow(newRow("churn", fmt.Sprintf("sessions listed (%d → %d)", before.Sessions, after.Sessions), "", one(float64(after.Sessions-before.Sessions)), nil, nil, zero, ""))
	b.addRow(newRow("churn", "cycles whose first input was refused (unknown_channel)", "", one(float64(refused.Load())), nil, nil,
		&Target{Desc: "0", Of: "value", Op: "<=", Value: 0},
		"input written as soon as session.open answered; the protocol says the channel is bound by then"))
	b.addRow(newRow("churn", fmt.Sprintf("/dev/pts entries, system-wide (%d → %d)", before.DevPts, after.DevPts), "", one(float64(after.DevPts-before.DevPts)), nil, nil, nil,
		"other programs on the machine open PTYs too; the gateway's own masters are counted above"))
	b.addRow(newRow("churn", fmt.Sprintf("gateway RSS growth (%d → %d KiB)", before.RSSKiB, after.RSSKiB), "KiB", one(float64(after.RSSKiB-before.RSSKiB)), nil, nil, nil, "heap growth is not a leak by itself; shown for context"))
	b.report.Details["churn"] = map[string]any{"before": before, "immediately_after": immediate, "after": after,
		"series": series, "refused_first_input": refused.Load(), "settle_ms": settle.Milliseconds(), "cycles": b.cfg.Churn, "workers": b.cfg.ChurnWorkers,
		"seconds": elapsed.Seconds(), "cycle_p50_ms": p.P50 / 1e3, "cycle_p99_ms": p.P99 / 1e3}
	return nil
}
