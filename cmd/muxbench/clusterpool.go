package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/muxterm/muxterm/client"
)

// The clusterpool section (docs/scaling.md, "Relay"): what relaying costs the relaying node per
// channel. One client on node b attaches clusterPoolN sessions that node a owns, timing each
// attach, and b's descriptors are counted before and after; then 8 MiB of output are read from
// one more of a's sessions through b and on a, alternating, with the clusterPoolN channels
// still attached.

const clusterPoolN = 200

func (b *bench) runClusterPool(ctx context.Context) error {
	// Every node takes clusterPoolN channels on one socket and sessions of one principal.
	saved := b.gwArgs
	b.gwArgs = append(slices.Clone(saved), "--max-channels", "256", "--max-sessions", "256")
	bc, err := b.startCluster(ctx)
	b.gwArgs = saved
	if err != nil {
		return err
	}
	defer bc.stop()
	a, bn := bc.nodes["a"], bc.nodes["b"]
	ca, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer ca.Close()
	buf := make([]byte, 32<<10)
	var fdPer, first, p50, p99, thrL, thrR, ratio []float64
	for rep := range b.cfg.Reps {
		ids := make([]string, 0, clusterPoolN)
		for range clusterPoolN {
			ch, err := b.openSh(ctx, ca, "exec sleep 3600")
			if err != nil {
				return err
			}
			ids = append(ids, ch.Session())
		}
		cb, err := bn.dial(ctx)
		if err != nil {
			return err
		}
		if _, err := waitListed(ctx, cb, ids[len(ids)-1], "a", 10*time.Second); err != nil {
			cb.Close()
			return err
		}
		before, err := bn.sample()
		if err != nil {
			cb.Close()
			return err
		}
		var att latencies
		for _, id := range ids {
			start := time.Now()
			if _, _, err := cb.Attach(ctx, id, nil); err != nil {
				cb.Close()
				return fmt.Errorf("attach %d through b: %w", len(att), err)
			}
			att = append(att, time.Since(start))
		}
		after, err := bn.sample()
		if err != nil {
			cb.Close()
			return err
		}
		fdPer = append(fdPer, float64(after.FDs-before.FDs)/clusterPoolN)
		first = append(first, float64(att[0].Microseconds())/1e3)
		rest := latencies(att[1:]).sortedMicros()
		p50, p99 = append(p50, quantile(rest, 0.5)/1e3), append(p99, quantile(rest, 0.99)/1e3)

		got := map[string]float64{}
		for _, c := range order([]*client.Client{ca, cb}, rep) {
			mibs, err := b.poolThroughput(ctx, ca, c, cb, buf)
			if err != nil {
				cb.Close()
				return err
			}
			got[map[bool]string{true: "relayed", false: "local"}[c == cb]] = mibs
		}
		thrL, thrR = append(thrL, got["local"]), append(thrR, got["relayed"])
		ratio = append(ratio, got["relayed"]/got["local"])
		b.logf("   clusterpool rep %d: b's descriptors +%.2f per relayed channel; attach through b first %.3f ms, then p50 %.3f p99 %.3f ms; throughput local %.0f relayed %.0f MiB/s",
			rep, fdPer[rep], first[rep], p50[rep], p99[rep], got["local"], got["relayed"])
		cb.Close()
		for _, id := range ids {
			if _, err := ca.Kill(ctx, id); err != nil {
				return fmt.Errorf("kill: %w", err)
			}
		}
	}
	sec := "clusterpool"
	n := fmt.Sprint(clusterPoolN)
	b.addRow(newRow(sec, "relaying node's descriptors per relayed channel ("+n+" on one socket)", "fds", fdPer, nil, nil, nil, "/proc/PID/fd of node b, after − before the attaches"))
	b.addRow(newRow(sec, "session.attach through b, the first of "+n, "ms", first, nil, nil, nil, ""))
	b.addRow(newRow(sec, "session.attach through b p50, the other "+fmt.Sprint(clusterPoolN-1), "ms", p50, nil, nil,
		&Target{Desc: "≤ 1 ms", Of: "value", Op: "<=", Value: 1}, ""))
	b.addRow(newRow(sec, "session.attach through b p99, the other "+fmt.Sprint(clusterPoolN-1), "ms", p99, nil, nil, nil, ""))
	b.addRow(newRow(sec, "output throughput, local (8 MiB, "+n+" relayed channels attached)", "MiB/s", thrL, nil, nil, nil, ""))
	b.addRow(newRow(sec, "output throughput, relayed (8 MiB, "+n+" relayed channels attached)", "MiB/s", thrR, nil, nil, nil, ""))
	b.addRow(newRow(sec, "relayed / local throughput with "+n+" relayed channels", "ratio", ratio, nil, nil,
		&Target{Desc: "≥ 80% of local", Of: "value", Op: ">=", Value: 0.8}, "per repetition"))
	return nil
}

// poolThroughput opens a session on a (through owner) that prints clusterBytes once told to,
// attaches it through c and returns the MiB/s c read it at; cb's path is relayed.
func (b *bench) poolThroughput(ctx context.Context, owner, c, cb *client.Client, buf []byte) (float64, error) {
	open, err := b.openSh(ctx, owner, fmt.Sprintf("stty raw -echo; echo READY; read x; exec head -c %d /dev/zero", clusterBytes))
	if err != nil {
		return 0, err
	}
	if _, err := open.ReadUntil(ctx, "READY\n"); err != nil {
		return 0, fmt.Errorf("throughput session: %w", err)
	}
	id := open.Session()
	if c == cb {
		if _, err := waitListed(ctx, cb, id, "a", 10*time.Second); err != nil {
			return 0, err
		}
	}
	ch, res, err := c.Attach(ctx, id, nil)
	if err != nil {
		return 0, fmt.Errorf("throughput attach: %w", err)
	}
	if err := open.Detach(ctx); err != nil {
		return 0, err
	}
	if err := readN(ctx, ch, int(res.End-res.Offset), buf); err != nil { // the replay: READY
		return 0, err
	}
	start := time.Now()
	if _, err := ch.Write([]byte("\n")); err != nil {
		return 0, err
	}
	if err := readN(ctx, ch, clusterBytes, buf); err != nil {
		return 0, fmt.Errorf("throughput: %w", err)
	}
	mibs := float64(clusterBytes) / (1 << 20) / time.Since(start).Seconds()
	if _, err := owner.Kill(ctx, id); err != nil {
		return 0, fmt.Errorf("kill: %w", err)
	}
	return mibs, nil
}
