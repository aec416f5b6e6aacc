package main

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// seqScript prints the numbered stream "1\n2\n3\n…" on a raw terminal (no \r added), long
// enough never to end during the run.
const seqScript = "stty raw -echo; exec seq 1 1000000000000"

// seqLineOffset is the offset of line k (k ≥ 1) in seq's output.
func seqLineOffset(k int64) int64 {
	var off int64
	lo := int64(1)
	for d := int64(1); ; d++ {
		hi := lo * 10 // numbers with d digits are [lo, hi)
		if k < hi {
			return off + (k-lo)*(d+1)
		}
		off += (hi - lo) * (d + 1)
		lo = hi
	}
}

// seqLineAt returns the line k holding offset off and off's position in it.
func seqLineAt(off int64) (k int64, pos int) {
	lo := int64(1)
	var start int64
	for d := int64(1); ; d++ {
		hi := lo * 10
		size := (hi - lo) * (d + 1)
		if off < start+size {
			rel := off - start
			return lo + rel/(d+1), int(rel % (d + 1))
		}
		start += size
		lo = hi
	}
}

// seqMatch reports how many leading bytes of p equal seq's output at offset off.
func seqMatch(off int64, p []byte) int {
	k, pos := seqLineAt(off)
	var line []byte
	i := 0
	for i < len(p) {
		line = strconv.AppendInt(line[:0], k, 10)
		line = append(line, '\n')
		for ; pos < len(line) && i < len(p); pos, i = pos+1, i+1 {
			if p[i] != line[pos] {
				return i
			}
		}
		k, pos = k+1, 0
	}
	return i
}

// seqActual finds the offset p actually starts at, from the first whole line in it; ok is false
// when p holds no whole line.
func seqActual(p []byte) (off int64, ok bool) {
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		return 0, false
	}
	j := bytes.IndexByte(p[i+1:], '\n')
	if j <= 0 {
		return 0, false
	}
	k, err := strconv.ParseInt(string(p[i+1:i+1+j]), 10, 64)
	if err != nil || k < 1 {
		return 0, false
	}
	return seqLineOffset(k) - int64(i+1), true
}

type resumeResult struct {
	Script        string  `json:"script"`
	DropEvery     bool    `json:"drop_every_cycle,omitempty"` // every cycle drops the socket
	StreamBytes   int64   `json:"stream_bytes,omitempty"`     // 0: endless
	Cycles        int     `json:"cycles"`
	NewSockets    int     `json:"reattached_on_new_socket"`
	Verified      int64   `json:"bytes_verified"`
	Lost          int64   `json:"bytes_lost_unreported"` // skipped without a gap report
	Duplicated    int64   `json:"bytes_duplicated"`
	GapReported   int64   `json:"bytes_lost_reported"` // session.gap or attach lost: beyond the ring
	BadSegments   int     `json:"mismatched_segments"`
	Unclassified  int     `json:"mismatches_unclassified"`
	OffsetErrors  int     `json:"client_offset_errors"`
	ReattachP50ms float64 `json:"reattach_p50_ms"`
	ReattachP99ms float64 `json:"reattach_p99_ms"`
}

// runResume: -resume detach/reattach cycles at random points of a numbered stream, checking
// every byte received against what seq printed at that offset. Three times: on a gateway whose
// ring holds the whole stream (nothing may be lost at all); on the default 1 MiB ring with an
// endless stream (what overflows the ring while detached must be reported, nothing else lost);
// and on the default ring with an endless stream whose socket drops every cycle (the resume hold
// keeps what the client acknowledged, so nothing may be lost at all).
func (b *bench) runResume(ctx context.Context) error {
	const lines = 3_000_000
	total := seqLineOffset(lines + 1)
	big, err := b.startGateway(ctx, 64, "--scrollback", "64MiB")
	if err != nil {
		return err
	}
	defer b.stopGatewayLater(big)
	whole, err := b.resumeRun(ctx, big, fmt.Sprintf("stty raw -echo; exec seq 1 %d", lines), total, false)
	if err != nil {
		return fmt.Errorf("ring holds the stream: %w", err)
	}
	gw, err := b.mainGateway(ctx)
	if err != nil {
		return err
	}
	endless, err := b.resumeRun(ctx, gw, seqScript, 0, false)
	if err != nil {
		return fmt.Errorf("default ring: %w", err)
	}
	dropped, err := b.resumeRun(ctx, gw, seqScript, 0, true)
	if err != nil {
		return fmt.Errorf("default ring, dropped sockets: %w", err)
	}
	one := func(v float64) []float64 { return []float64{v} }
	zero := &Target{Desc: "0", Of: "value", Op: "<=", Value: 0}
	for _, r := range []resumeResult{whole, endless, dropped} {
		name := "64 MiB ring holding the whole stream"
		lost, lostName := r.Lost+r.GapReported, "bytes lost"
		switch {
		case r.DropEvery:
			name, lostName = "default 1 MiB ring, endless stream, socket dropped every cycle", "bytes lost (resume hold)"
		case r.StreamBytes == 0:
			name, lost, lostName = "default 1 MiB ring, endless stream", r.Lost, "bytes lost inside the ring (unreported)"
		}
		note := fmt.Sprintf("%d detach/reattach cycles at random points of `%s` (%d on a new socket); %d bytes verified against seq's output; reattach p50 %.2f ms, p99 %.2f ms",
			r.Cycles, r.Script, r.NewSockets, r.Verified, r.ReattachP50ms, r.ReattachP99ms)
		b.addRow(newRow("resume", name+": "+lostName, "", one(float64(lost)), nil, nil, zero, note))
		b.addRow(newRow("resume", name+": bytes duplicated", "", one(float64(r.Duplicated)), nil, nil, zero, ""))
		b.addRow(newRow("resume", name+": segments not matching seq's output", "", one(float64(r.BadSegments)), nil, nil, zero,
			fmt.Sprintf("%d could not be classified as a skip or a repeat; client offset errors: %d", r.Unclassified, r.OffsetErrors)))
		if r.StreamBytes == 0 && !r.DropEvery {
			b.addRow(newRow("resume", name+": bytes lost beyond the ring, reported", "", one(float64(r.GapReported)), nil, nil, nil,
				"by session.gap or attach's lost: the stream ran on while detached (session.detach holds nothing) and overflowed the ring, as the protocol allows"))
		}
	}
	b.report.Details["resume"] = []resumeResult{whole, endless, dropped}
	return nil
}

// resumeRun runs the cycles on one session of script. total is the stream's size (reads stop
// there), or 0 for an endless stream.
func (b *bench) resumeRun(ctx context.Context, gw *gatewayProc, script string, total int64, dropEvery bool) (resumeResult, error) {
	r := resumeResult{Script: script, StreamBytes: total, DropEvery: dropEvery}
	c, err := gw.dial(ctx)
	if err != nil {
		return r, err
	}
	defer func() { c.Close() }()
	ch, err := b.openSh(ctx, c, script)
	if err != nil {
		return r, err
	}
	id := ch.Session()
	defer func() { killQuiet(c, id) }()

	// Segment lengths average 128 KiB, or spread the stream over the cycles when it is finite.
	maxSeg := 256 << 10
	if total > 0 {
		maxSeg = int(2 * total / int64(b.cfg.Resume))
	}
	var reattach latencies
	buf := make([]byte, 256<<10)
	for cycle := range b.cfg.Resume {
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		// Read up to a random point (sometimes none at all), verifying as we go.
		want := 1 + b.rng.IntN(maxSeg)
		if b.rng.IntN(10) == 0 {
			want = 0
		}
		if total > 0 {
			want = int(min(int64(want), total-ch.Offset()))
		}
		segStart, bad := true, false
		stop := guard(ctx, c, ch)
		for got := 0; got < want; {
			off0 := ch.Offset()
			n, err := ch.Read(buf[:min(len(buf), want-got)])
			if err != nil {
				stop()
				return r, fmt.Errorf("cycle %d: read: %w", cycle, err)
			}
			off1 := ch.Offset()
			at := off1 - int64(n)
			if gap := at - off0; gap > 0 {
				r.GapReported += gap
			}
			if off1 < off0+int64(n) {
				r.OffsetErrors++
			}
			p := buf[:n]
			if !bad {
				if m := seqMatch(at, p); m < n {
					bad = true
					r.BadSegments++
					if actual, ok := seqActual(p); ok && m == 0 && segStart {
						if actual > at {
							r.Lost += actual - at
						} else {
							r.Duplicated += at - actual
						}
					} else {
						r.Unclassified++
					}
				} else {
					r.Verified += int64(n)
				}
			}
			segStart = false
			got += n
		}
		stop()
		// Detach (one time in ten, or every time with dropEvery: drop the socket instead and
		// resume on a new one), then reattach from what was consumed.
		from := ch.Offset()
		t := time.Now()
		if dropEvery || b.rng.IntN(10) == 0 {
			c.Close()
			if c, err = gw.dial(ctx); err != nil {
				return r, fmt.Errorf("cycle %d: %w", cycle, err)
			}
			r.NewSockets++
		} else if err := ch.Detach(ctx); err != nil {
			return r, fmt.Errorf("cycle %d: detach: %w", cycle, err)
		}
		var res proto.AttachResult
		// Reattach as a byte stream (screen "never"): where the ring cannot replay from `from`,
		// the attach reports the dropped bytes as lost instead of painting the screen, whose
		// bytes are not seq's output.
		ch, res, err = c.AttachWith(ctx, id, client.AttachOptions{From: &from, Screen: proto.ScreenNever})
		if err != nil {
			return r, fmt.Errorf("cycle %d: attach from %d: %w", cycle, from, err)
		}
		reattach = append(reattach, time.Since(t))
		r.GapReported += res.Lost
		if res.Offset != from+res.Lost {
			r.OffsetErrors++
		}
		r.Cycles++
	}
	p := reattach.pct()
	r.ReattachP50ms, r.ReattachP99ms = p.P50/1e3, p.P99/1e3
	return r, nil
}
