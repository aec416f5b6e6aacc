package main

import (
	"context"
	"fmt"
	"time"

	"github.com/muxterm/muxterm/client"
)

type scalePoint struct {
	Sessions int   `json:"sessions"`
	RSSKiB   int64 `json:"rss_kib"`
	Threads  int   `json:"threads"`
	FDs      int   `json:"fds"`
}

// scaleOpenInFlight: the scale sessions are opened one at a time. A spawn holds an OS thread in
// fork/exec, and Go keeps every thread it once needed, so with opens in flight the thread count
// follows the opening concurrency (in earlier runs, 16 in flight: anywhere from 11 to 22 threads
// at 1,000 sessions, in both the builds compared) and hides what holding sessions costs.
const scaleOpenInFlight = 1

// runScale holds -sessions `sleep 3600` sessions on one socket of a fresh gateway and samples
// the gateway's RSS, threads and fds along the way (the sessions' own processes not counted).
func (b *bench) runScale(ctx context.Context) error {
	n := b.cfg.ScaleSessions
	g, err := b.startGateway(ctx, n+64)
	if err != nil {
		return err
	}
	defer b.stopGatewayLater(g)
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	base, err := g.sample()
	if err != nil {
		return err
	}
	points := []scalePoint{{0, base.RSSKiB, base.Threads, base.FDs}}
	chs := make([]*client.Channel, 0, n)
	defer func() {
		_ = parallel(context.Background(), len(chs), 16, func(i int) error {
			killQuiet(c, chs[i].Session())
			return nil
		})
	}()
	t0 := time.Now()
	for _, upto := range []int{n / 4, n / 2, 3 * n / 4, n} {
		from := len(chs)
		if upto <= from {
			continue
		}
		batch := make([]*client.Channel, upto-from)
		err := parallel(ctx, len(batch), scaleOpenInFlight, func(i int) error {
			ch, err := b.openArgv(ctx, c, []string{"sleep", "3600"})
			batch[i] = ch
			return err
		})
		for _, ch := range batch {
			if ch != nil {
				chs = append(chs, ch)
			}
		}
		if err != nil {
			return fmt.Errorf("open session %d of %d: %w", len(chs)+1, n, err)
		}
		s, err := g.sample()
		if err != nil {
			return err
		}
		points = append(points, scalePoint{len(chs), s.RSSKiB, s.Threads, s.FDs})
		b.logf("   %d sessions: gateway RSS %d KiB, %d threads, %d fds", len(chs), s.RSSKiB, s.Threads, s.FDs)
	}
	openRate := float64(len(chs)) / time.Since(t0).Seconds()
	tl := time.Now()
	list, err := c.List(ctx)
	if err != nil {
		return fmt.Errorf("list %d sessions: %w", n, err)
	}
	listMs := float64(time.Since(tl).Microseconds()) / 1e3
	held := 0
	for _, s := range list {
		if s.Exit == nil && s.Viewers == 1 {
			held++
		}
	}
	// A keystroke-free liveness check at full scale: a new session still answers.
	tc := time.Now()
	if _, err := b.firstByte(ctx, c, tc); err != nil {
		return fmt.Errorf("open with %d sessions held: %w", n, err)
	}
	openAtScaleMs := float64(time.Since(tc).Microseconds()) / 1e3

	tk := time.Now()
	err = parallel(ctx, len(chs), 16, func(i int) error {
		if _, err := c.Kill(ctx, chs[i].Session()); err != nil {
			return fmt.Errorf("kill %s: %w", chs[i].Session(), err)
		}
		return nil
	})
	killAll := time.Since(tk).Seconds()
	if err != nil {
		return err
	}
	chs = chs[:0]
	after, err := g.sample()
	if err != nil {
		return err
	}

	top, mid := points[len(points)-1], points[len(points)/2]
	perSession := float64(top.RSSKiB-base.RSSKiB) / float64(top.Sessions)
	slope := float64(top.RSSKiB-mid.RSSKiB) / float64(max(top.Sessions-mid.Sessions, 1))
	one := func(v float64) []float64 { return []float64{v} }
	series := ""
	for _, p := range points {
		series += fmt.Sprintf(" %d→%d", p.Sessions, p.Threads)
	}
	b.addRow(newRow("scale", "sessions held on one socket", "", one(float64(held)), nil, nil,
		&Target{Desc: "1,000", Of: "value", Op: ">=", Value: 1000},
		fmt.Sprintf("`sleep 3600` sessions, opened one at a time at %.0f/s; session.list of all took %.1f ms; a new session's first byte took %.1f ms with all held",
			openRate, listMs, openAtScaleMs)))
	b.addRow(newRow("scale", "gateway RSS per held session", "KiB", one(perSession), nil, nil,
		&Target{Desc: "≤ 8 KiB", Of: "value", Op: "<=", Value: 8},
		fmt.Sprintf("VmRSS %d KiB with the socket open, %d KiB with %d sessions", base.RSSKiB, top.RSSKiB, top.Sessions)))
	b.addRow(newRow("scale", fmt.Sprintf("gateway RSS per session, slope %d→%d", mid.Sessions, top.Sessions), "KiB", one(slope), nil, nil, nil, ""))
	b.addRow(newRow("scale", fmt.Sprintf("gateway threads growth, %d→%d sessions", mid.Sessions, top.Sessions), "", one(float64(top.Threads-mid.Threads)), nil, nil,
		&Target{Desc: "do not grow (≤ 4)", Of: "value", Op: "<=", Value: 4},
		"threads by sessions held:"+series+" (opened one at a time, so that the count is not the opening concurrency's: a spawn holds a thread in fork/exec)"))
	b.addRow(newRow("scale", "gateway fds per held session", "", one(float64(top.FDs-base.FDs)/float64(top.Sessions)), nil, nil, nil, ""))
	b.addRow(newRow("scale", fmt.Sprintf("kill all %d sessions, 16 in flight", top.Sessions), "s", one(killAll), nil, nil, nil,
		fmt.Sprintf("afterwards: RSS %d KiB, %d threads, %d fds", after.RSSKiB, after.Threads, after.FDs)))
	b.report.Details["scale"] = map[string]any{"points": points, "after_kill": after, "open_per_s": openRate,
		"list_ms": listMs, "open_at_scale_ms": openAtScaleMs, "kill_all_s": killAll}
	return nil
}
