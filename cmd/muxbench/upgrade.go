package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/muxterm/muxterm/client"
)

// The upgrade section: an upgrade in place (SIGUSR2) of a gateway holding -upgrade-sessions
// sessions, upgradeStreams of them streaming, -reps times in a row on the same gateway.

const (
	upgradeStreams   = 8  // sessions that stream throughout
	upgradePerSocket = 50 // channels per client socket
	// upgradeStreamScript prints "1\n2\n3\n…" like seq (so seqMatch checks it), about 25 lines
	// every 20 ms: a stream that never stops, slow enough not to load the machine.
	upgradeStreamScript = `stty raw -echo; i=0; while :; do i=$((i+1)); echo $i; [ $((i % 25)) -eq 0 ] && sleep 0.02; done`
	// upgradeGrowth is how many bytes each stream must deliver after a resume before the
	// repetition counts as done: the stream is read live from the new image, and checked.
	upgradeGrowth = 4096
)

// upgradeRep is one upgrade's figures.
type upgradeRep struct {
	Requests        int     `json:"dialer_requests"`
	Refused         int     `json:"dialer_refused"` // ECONNREFUSED
	Failed          int     `json:"dialer_failed"`  // any other error or a status other than 200
	FirstFailure    string  `json:"dialer_first_failure,omitempty"`
	AcceptP50ms     float64 `json:"accept_p50_ms"`
	AcceptP99ms     float64 `json:"accept_p99_ms"`
	AcceptMaxms     float64 `json:"accept_max_ms"`
	SlowestAtms     float64 `json:"accept_max_started_ms"` // when the slowest request started, after SIGUSR2
	ResumedP50ms    float64 `json:"resumed_p50_ms"`        // over client sockets: SIGUSR2 → every channel bound again
	ResumedP99ms    float64 `json:"resumed_p99_ms"`
	ResumedMaxms    float64 `json:"resumed_max_ms"`
	BytesLost       int64   `json:"bytes_lost"`     // announced (gap, attach's lost) by the clients
	BytesBad        int64   `json:"bytes_mismatch"` // streams' bytes that were not seq's at their offset (cumulative)
	Verified        int64   `json:"bytes_verified"` // streams' bytes checked so far (cumulative)
	SessionsLost    int     `json:"sessions_lost"`  // held before, not live after (listed or resumed)
	RSSBeforeKiB    int64   `json:"rss_before_kib"`
	RSSAfterKiB     int64   `json:"rss_after_kib"`
	GatewayLine     string  `json:"gateway_timeline,omitempty"`  // the new image's "upgrade timeline" log line
	ExecLine        string  `json:"gateway_executing,omitempty"` // the old image's "upgrade: executing" log line
	NoAcceptms      float64 `json:"gateway_no_accept_ms"`        // from that line, -1 if absent
	SignalToAdopted float64 `json:"gateway_adopted_ms"`          // from that line: SIGUSR2 → every session adopted, -1 if absent
}

// upgradeStream is a streaming session whose every byte is checked against seq's output.
type upgradeStream struct {
	ch *client.Channel
	// mu guards got, bad, firstBad; grew is signalled after each read.
	mu       sync.Mutex
	got      int64 // bytes read (offset of the next byte, gaps aside)
	bad      int64
	firstBad string
	grew     chan struct{}
	done     chan struct{}
}

// follow reads s.ch until ctx ends or the channel does, checking each byte.
func (s *upgradeStream) follow(ctx context.Context) {
	defer close(s.done)
	buf := make([]byte, 32<<10)
	for {
		n, err := s.ch.ReadContext(ctx, buf)
		if n > 0 {
			s.mu.Lock()
			off := s.got + s.ch.Lost() // a gap moves the stream on without bytes
			if m := seqMatch(off, buf[:n]); m < n {
				if s.bad == 0 {
					s.firstBad = fmt.Sprintf("at offset %d: %q", off+int64(m), tail(buf[m:min(n, m+40)]))
				}
				s.bad += int64(n - m)
			}
			s.got += int64(n)
			s.mu.Unlock()
			select {
			case s.grew <- struct{}{}:
			default:
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *upgradeStream) len() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}

// waitGrowth waits until s has read more than n bytes.
func (s *upgradeStream) waitGrowth(ctx context.Context, n int64) error {
	for s.len() <= n {
		select {
		case <-s.grew:
		case <-s.done:
			return fmt.Errorf("stream of %s ended after %d bytes: %v", s.ch.Session(), s.len(), s.ch.Reason())
		case <-ctx.Done():
			return fmt.Errorf("stream of %s stuck at %d bytes (want > %d): %w", s.ch.Session(), s.len(), n, ctx.Err())
		}
	}
	return nil
}

// upgradeDialer requests /healthz on a fresh connection in a tight loop and records each
// answer's time from the dial.
type upgradeDialer struct {
	mu      sync.Mutex // guards the slices
	starts  []time.Time
	took    []time.Duration
	errs    []error
	stop    chan struct{}
	stopped chan struct{}
}

func startUpgradeDialer(addr string) *upgradeDialer {
	d := &upgradeDialer{stop: make(chan struct{}), stopped: make(chan struct{})}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	go func() {
		defer close(d.stopped)
		for {
			select {
			case <-d.stop:
				return
			default:
			}
			t := time.Now()
			resp, err := hc.Get("http://" + addr + "/healthz")
			took := time.Since(t)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("/healthz: HTTP %d", resp.StatusCode)
				}
			}
			d.mu.Lock()
			d.starts, d.took, d.errs = append(d.starts, t), append(d.took, took), append(d.errs, err)
			d.mu.Unlock()
		}
	}()
	return d
}

// finish stops the loop and fills in r's dialer figures; signalled is when SIGUSR2 was sent.
func (d *upgradeDialer) finish(r *upgradeRep, signalled time.Time) {
	close(d.stop)
	<-d.stopped
	var ok latencies
	var slowest time.Duration
	for i, err := range d.errs {
		r.Requests++
		switch {
		case err == nil:
			ok = append(ok, d.took[i])
			if d.took[i] > slowest {
				slowest = d.took[i]
				r.SlowestAtms = float64(d.starts[i].Sub(signalled).Microseconds()) / 1e3
			}
		case errors.Is(err, syscall.ECONNREFUSED):
			r.Refused++
		default:
			r.Failed++
		}
		if err != nil && r.FirstFailure == "" {
			r.FirstFailure = err.Error()
		}
	}
	s := ok.sortedMicros()
	r.AcceptP50ms, r.AcceptP99ms = quantile(s, 0.5)/1e3, quantile(s, 0.99)/1e3
	if len(s) > 0 {
		r.AcceptMaxms = s[len(s)-1] / 1e3
	}
}

var (
	upgradeTimelineRE = regexp.MustCompile(`msg="upgrade timeline".*`)
	upgradeExecRE     = regexp.MustCompile(`msg="upgrade: executing".*`)
)

// durationField returns the duration of key=VALUE in line in ms, -1 if absent.
func durationField(line, key string) float64 {
	m := regexp.MustCompile(`\b` + key + `=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		return -1
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		return -1
	}
	return float64(d.Microseconds()) / 1e3
}

// runUpgrade: a gateway holds -upgrade-sessions sessions (upgradeStreams streaming, the rest
// idle `cat`) on client sockets of upgradePerSocket channels, each client reconnecting and
// resuming by itself (client.DialOptions.Reconnect, as the bundled UI does); then -reps
// upgrades in place to the same binary, one after the other. Each upgrade is measured from
// SIGUSR2 until every client has resumed and every stream has delivered upgradeGrowth more
// bytes, all checked against what the program printed.
func (b *bench) runUpgrade(ctx context.Context) error {
	n := b.cfg.UpgradeSessions
	g, err := b.startGateway(ctx, n+64, "--log-level", "info", "--resume-hold", "30s")
	if err != nil {
		return err
	}
	defer b.stopGatewayLater(g)
	g.stderr.setMax(8 << 20) // the timeline lines must survive a thousand attach logs

	// resumedAt[i] gets each resume of client i.
	nc := (n + upgradePerSocket - 1) / upgradePerSocket
	resumed := make([]chan time.Time, nc)
	var ended atomic.Int64 // channels whose session was gone at a resume
	clients := make([]*client.Client, nc)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range clients {
		resumed[i] = make(chan time.Time, 1)
		ri := resumed[i]
		c, err := client.Dial(ctx, g.URL(), client.DialOptions{Token: g.token, Name: "muxbench-upgrade",
			Dialer: benchDialer(), Reconnect: &client.ReconnectOptions{Within: time.Minute,
				OnEvent: func(e client.ReconnectEvent) {
					if !e.Resumed {
						return
					}
					ended.Add(int64(len(e.Ended)))
					select {
					case ri <- time.Now():
					default:
					}
				}}})
		if err != nil {
			return fmt.Errorf("dial client %d: %w", i, err)
		}
		clients[i] = c
	}
	t0 := time.Now()
	chans := make([]*client.Channel, n)
	err = parallel(ctx, n, 8, func(i int) error {
		argv := []string{"cat"}
		if i < upgradeStreams {
			argv = []string{"sh", "-c", upgradeStreamScript}
		}
		ch, err := b.openArgv(ctx, clients[i/upgradePerSocket], argv)
		chans[i] = ch
		return err
	})
	if err != nil {
		return err
	}
	b.logf("   %d sessions open in %.1fs (%d streaming), on %d sockets", n, time.Since(t0).Seconds(), upgradeStreams, nc)
	rctx, stopReads := context.WithCancel(ctx)
	defer stopReads()
	streams := make([]*upgradeStream, upgradeStreams)
	for i := range streams {
		streams[i] = &upgradeStream{ch: chans[i], grew: make(chan struct{}, 1), done: make(chan struct{})}
		go streams[i].follow(rctx)
	}
	defer func() {
		stopReads()
		for _, s := range streams {
			<-s.done
		}
	}()
	for _, s := range streams {
		if err := s.waitGrowth(ctx, upgradeGrowth); err != nil {
			return err
		}
	}
	ids := make(map[string]bool, n)
	for _, ch := range chans {
		ids[ch.Session()] = true
	}

	var reps []upgradeRep
	lost := make([]int64, n) // each channel's Lost after the previous upgrade
	for rep := 1; rep <= b.cfg.Reps; rep++ {
		var r upgradeRep
		before, err := g.sample()
		if err != nil {
			return err
		}
		r.RSSBeforeKiB = before.RSSKiB
		lens := make([]int64, len(streams))
		for i, s := range streams {
			lens[i] = s.len()
		}
		for _, ri := range resumed {
			select { // a resume of an earlier drop must not count for this one
			case <-ri:
			default:
			}
		}
		d := startUpgradeDialer(g.Addr)
		signalled := time.Now()
		if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
			d.finish(&r, signalled)
			return fmt.Errorf("SIGUSR2: %w", err)
		}
		var took latencies
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		for i, ri := range resumed {
			select {
			case at := <-ri:
				took = append(took, at.Sub(signalled))
			case <-wctx.Done():
				cancel()
				d.finish(&r, signalled)
				return fmt.Errorf("upgrade %d: client %d did not resume: %w: %s", rep, i, wctx.Err(), g.stderr.String())
			}
		}
		for i, s := range streams {
			if err := s.waitGrowth(wctx, lens[i]+upgradeGrowth); err != nil {
				cancel()
				d.finish(&r, signalled)
				return fmt.Errorf("upgrade %d: %w", rep, err)
			}
		}
		cancel()
		d.finish(&r, signalled)
		s := took.sortedMicros()
		r.ResumedP50ms, r.ResumedP99ms, r.ResumedMaxms = quantile(s, 0.5)/1e3, quantile(s, 0.99)/1e3, s[len(s)-1]/1e3

		// Every session still there and live, and what the clients were told was lost.
		list, err := clients[0].List(ctx)
		if err != nil {
			return fmt.Errorf("upgrade %d: list: %w", rep, err)
		}
		live := 0
		for _, si := range list {
			if ids[si.Session] && si.Exit == nil {
				live++
			}
		}
		r.SessionsLost = n - live + int(ended.Swap(0))
		for i, ch := range chans {
			l := ch.Lost()
			r.BytesLost += l - lost[i]
			lost[i] = l
		}
		for _, st := range streams {
			st.mu.Lock()
			r.BytesBad += st.bad
			r.Verified += st.got
			if st.firstBad != "" {
				b.report.Notes = append(b.report.Notes, fmt.Sprintf("upgrade: stream %s: first mismatch %s", st.ch.Session(), st.firstBad))
				st.firstBad = ""
			}
			st.mu.Unlock()
		}
		after, err := g.sample()
		if err != nil {
			return err
		}
		r.RSSAfterKiB = after.RSSKiB
		r.NoAcceptms, r.SignalToAdopted = -1, -1
		logs := g.stderr.String()
		if lines := upgradeTimelineRE.FindAllString(logs, -1); len(lines) >= rep {
			r.GatewayLine = lines[rep-1]
			r.NoAcceptms, r.SignalToAdopted = durationField(r.GatewayLine, "no_accept"), durationField(r.GatewayLine, "adopted")
		}
		if lines := upgradeExecRE.FindAllString(logs, -1); len(lines) >= rep {
			r.ExecLine = lines[rep-1]
		}
		b.logf("   upgrade %d: dialer %d requests, %d refused, %d failed, accept p50 %.1f ms p99 %.1f ms max %.1f ms (sent %.1f ms after the signal); resumed p50 %.0f ms p99 %.0f ms; lost %d B, mismatched %d B, sessions lost %d; RSS %d → %d KiB",
			rep, r.Requests, r.Refused, r.Failed, r.AcceptP50ms, r.AcceptP99ms, r.AcceptMaxms, r.SlowestAtms, r.ResumedP50ms, r.ResumedP99ms,
			r.BytesLost, r.BytesBad, r.SessionsLost, r.RSSBeforeKiB, r.RSSAfterKiB)
		b.logf("   gateway: %s", r.GatewayLine)
		b.logf("   gateway: %s", r.ExecLine)
		reps = append(reps, r)
	}
	b.upgradeRows(n, reps)
	return nil
}

// upgradeRows adds the section's rows: one value per upgrade, summarised.
func (b *bench) upgradeRows(n int, reps []upgradeRep) {
	col := func(f func(r upgradeRep) float64) []float64 {
		out := make([]float64, len(reps))
		for i, r := range reps {
			out[i] = f(r)
		}
		return out
	}
	zero := &Target{Desc: "0", Of: "value", Op: "<=", Value: 0}
	sum := func(v []float64) float64 {
		var s float64
		for _, x := range v {
			s += x
		}
		return s
	}
	// Zero targets are checked on the worst upgrade, not the median.
	worst := func(row Row) Row {
		if row.Target != nil && row.Mux != nil {
			ok := row.Mux.Max <= row.Target.Value
			row.Met = &ok
		}
		return row
	}
	refused := col(func(r upgradeRep) float64 { return float64(r.Refused) })
	b.addRow(worst(newRow("upgrade", "refused connections per upgrade (dialer in a tight loop)", "", refused, nil, nil, zero,
		fmt.Sprintf("%d sessions held, %d streaming, on %d sockets; %d upgrades in a row of one gateway to the same binary; %.0f requests in all, %.0f failed otherwise",
			n, upgradeStreams, (n+upgradePerSocket-1)/upgradePerSocket, len(reps), sum(col(func(r upgradeRep) float64 { return float64(r.Requests) })),
			sum(col(func(r upgradeRep) float64 { return float64(r.Failed) }))))))
	b.addRow(newRow("upgrade", "accept delay p50 (fresh connection → /healthz answered)", "ms", col(func(r upgradeRep) float64 { return r.AcceptP50ms }), nil, nil, nil, ""))
	b.addRow(newRow("upgrade", "accept delay p99", "ms", col(func(r upgradeRep) float64 { return r.AcceptP99ms }), nil, nil, nil, ""))
	maxRow := newRow("upgrade", "accept delay max per upgrade", "ms", col(func(r upgradeRep) float64 { return r.AcceptMaxms }), nil, nil,
		&Target{Desc: fmt.Sprintf("p99 ≤ 200 ms (over %d upgrades: the worst)", len(reps)), Of: "value", Op: "<=", Value: 200},
		"the slowest answer in each upgrade (when it was sent is in the JSON details, accept_max_started_ms: normally at the listeners' stop, so it waited in the backlog while no image accepted)")
	b.addRow(worst(maxRow))
	b.addRow(newRow("upgrade", "gateway's own window without accept (listeners stopped → new image serves)", "ms",
		col(func(r upgradeRep) float64 { return r.NoAcceptms }), nil, nil, nil, "from the new image's `upgrade timeline` log line (no_accept; -1: line missing, a binary without it)"))
	b.addRow(newRow("upgrade", "SIGUSR2 → client socket resumed, p50 over sockets", "ms", col(func(r upgradeRep) float64 { return r.ResumedP50ms }), nil, nil, nil, ""))
	b.addRow(newRow("upgrade", "SIGUSR2 → client socket resumed, p99 over sockets", "ms", col(func(r upgradeRep) float64 { return r.ResumedP99ms }), nil, nil, nil,
		"each client reconnects after its 1012 and re-attaches every channel from its offset in one round trip (client.DialOptions.Reconnect)"))
	var verified int64
	if len(reps) > 0 {
		verified = reps[len(reps)-1].Verified
	}
	b.addRow(worst(newRow("upgrade", "bytes lost per upgrade (announced by a gap or attach's lost)", "", col(func(r upgradeRep) float64 { return float64(r.BytesLost) }), nil, nil, zero,
		fmt.Sprintf("besides, %d bytes of the %d streams were checked against seq's output at their offset, and %.0f did not match",
			verified, upgradeStreams, sum(col(func(r upgradeRep) float64 { return float64(r.BytesBad) }))))))
	b.addRow(worst(newRow("upgrade", "sessions lost per upgrade", "", col(func(r upgradeRep) float64 { return float64(r.SessionsLost) }), nil, nil, zero,
		"held before and not live after (session.list), plus channels a resume found gone")))
	b.addRow(newRow("upgrade", "gateway RSS before the upgrade", "KiB", col(func(r upgradeRep) float64 { return float64(r.RSSBeforeKiB) }), nil, nil, nil, ""))
	b.addRow(newRow("upgrade", "gateway RSS after (every client resumed, streams moved on)", "KiB", col(func(r upgradeRep) float64 { return float64(r.RSSAfterKiB) }), nil, nil, nil, ""))
	var lines []string
	for _, r := range reps {
		lines = append(lines, r.ExecLine, r.GatewayLine)
	}
	b.report.Notes = append(b.report.Notes, "upgrade: the gateway's own account of each upgrade (the old image's last line, the new image's timeline):\n  - "+strings.Join(slices.DeleteFunc(lines, func(s string) bool { return s == "" }), "\n  - "))
	b.report.Details["upgrade"] = reps
}

// setMax changes how many bytes t keeps.
func (t *tailBuffer) setMax(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.max = n
}
