package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/muxterm/muxterm/client"
)

// killCase is a shell to kill. Each prints "ready" once it is in the state under test (the trap
// installed, the escapee in its own session), so the kill never races its start.
type killCase struct {
	name   string
	script string
	n      int
	target bool // the ≤ 20 ms target applies (the shell honours HUP)
}

type killSample struct {
	dur, rtt  time.Duration
	signals   string
	escapees  int
	survivors int
	status    string
}

// runKill: session.kill latency for a plain shell, one that ignores HUP and TERM, and one with
// an escapee holding the PTY.
func (b *bench) runKill(ctx context.Context) error {
	gw, err := b.mainGateway(ctx)
	if err != nil {
		return err
	}
	cases := []killCase{
		{name: "plain `sh -c 'exec sleep 3600'`", script: "echo ready; exec sleep 3600", n: b.cfg.KillN, target: true},
		{name: "HUP/TERM ignored", script: "trap '' HUP TERM; echo ready; while :; do sleep 1; done", n: b.cfg.KillTrapN},
		{name: "with escapee (setsid)", script: "setsid sh -c 'echo ready; exec sleep 30' & exec sleep 3600", n: b.cfg.KillN, target: true},
	}
	c, err := gw.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	type series struct {
		durP50, durP99, rttP50, rttP99 []float64
		all                            []killSample
	}
	res := make([]series, len(cases))
	for rep := range b.cfg.Reps {
		for _, ci := range order([]int{0, 1, 2}, rep) {
			kc := cases[ci]
			samples, err := b.killBatch(ctx, c, kc)
			if err != nil {
				return fmt.Errorf("kill %s: %w", kc.name, err)
			}
			var dur, rtt latencies
			for _, s := range samples {
				dur, rtt = append(dur, s.dur), append(rtt, s.rtt)
			}
			dp, rp := dur.pct(), rtt.pct()
			s := &res[ci]
			s.durP50, s.durP99 = append(s.durP50, dp.P50/1e3), append(s.durP99, dp.P99/1e3)
			s.rttP50, s.rttP99 = append(s.rttP50, rp.P50/1e3), append(s.rttP99, rp.P99/1e3)
			s.all = append(s.all, samples...)
			b.logf("   rep %d, %s: duration_ms p50 %.2f p99 %.2f; round trip p50 %.2f p99 %.2f ms",
				rep+1, kc.name, dp.P50/1e3, dp.P99/1e3, rp.P50/1e3, rp.P99/1e3)
		}
	}
	details := map[string]any{}
	for ci, kc := range cases {
		s := res[ci]
		var t *Target
		if kc.target {
			t = &Target{Desc: "p99 ≤ 20 ms", Of: "value", Op: "<=", Value: 20}
		}
		// What the gateway reported, summed over every sample.
		signals, statuses := map[string]int{}, map[string]int{}
		escapees, survivors := 0, 0
		for _, k := range s.all {
			signals[k.signals]++
			statuses[k.status]++
			escapees += k.escapees
			survivors += k.survivors
		}
		note := fmt.Sprintf("`sh -c %q`, %d kills per repetition", kc.script, kc.n)
		if kc.n < 100 {
			note += " (p99 is the maximum)"
		}
		if !kc.target {
			note += ", killed concurrently; escalation is HUP, 250 ms, TERM, 250 ms, KILL by design"
		}
		note += fmt.Sprintf("; signals %v, escapees found %d, survivors %d", signals, escapees, survivors)
		b.addRow(newRow("kill", kc.name+", duration_ms p50", "ms", s.durP50, nil, nil, nil, note))
		b.addRow(newRow("kill", kc.name+", duration_ms p99", "ms", s.durP99, nil, nil, t, ""))
		b.addRow(newRow("kill", kc.name+", client round trip p50", "ms", s.rttP50, nil, nil, nil, ""))
		b.addRow(newRow("kill", kc.name+", client round trip p99", "ms", s.rttP99, nil, nil, t, ""))
		details[kc.name] = map[string]any{"script": kc.script, "signals": signals, "status": statuses,
			"escapees": escapees, "survivors": survivors, "samples": len(s.all)}
	}
	b.report.Details["kill"] = details
	return nil
}

// killBatch opens kc.n sessions, waits until each is ready, and kills them: one at a time for
// the fast cases, all at once for the slow one (its escalation is timer-bound).
func (b *bench) killBatch(ctx context.Context, c *client.Client, kc killCase) ([]killSample, error) {
	samples := make([]killSample, kc.n)
	if kc.target {
		for i := range kc.n {
			ch, err := b.openReady(ctx, c, kc.script)
			if err != nil {
				return nil, err
			}
			if samples[i], err = killOne(ctx, c, ch); err != nil {
				return nil, err
			}
		}
		return samples, nil
	}
	chs := make([]*client.Channel, kc.n)
	err := parallel(ctx, kc.n, 16, func(i int) error {
		var err error
		chs[i], err = b.openReady(ctx, c, kc.script)
		return err
	})
	if err == nil {
		err = parallel(ctx, kc.n, 16, func(i int) error {
			var err error
			samples[i], err = killOne(ctx, c, chs[i])
			chs[i] = nil
			return err
		})
	}
	for _, ch := range chs {
		if ch != nil {
			killQuiet(c, ch.Session())
		}
	}
	return samples, err
}

func (b *bench) openReady(ctx context.Context, c *client.Client, script string) (*client.Channel, error) {
	ch, err := b.openSh(ctx, c, script)
	if err != nil {
		return nil, err
	}
	if _, err := readUntil(ctx, c, ch, "ready"); err != nil {
		killQuiet(c, ch.Session())
		return nil, err
	}
	return ch, nil
}

func killOne(ctx context.Context, c *client.Client, ch *client.Channel) (killSample, error) {
	t := time.Now()
	res, err := c.Kill(ctx, ch.Session())
	rtt := time.Since(t)
	if err != nil {
		return killSample{}, fmt.Errorf("kill %s: %w", ch.Session(), err)
	}
	if err := waitClosed(ch); err != nil {
		return killSample{}, err
	}
	sigs := slices.Clone(res.Signals)
	return killSample{dur: time.Duration(res.DurationMs * float64(time.Millisecond)), rtt: rtt,
		signals: strings.Join(sigs, ","), escapees: res.Escapees, survivors: res.Survivors,
		status: res.Status}, nil
}
