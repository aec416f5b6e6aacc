//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
)

var (
	tookRE    = regexp.MustCompile(`upgrade complete.*took=(\S+)`)
	dryRunRE  = regexp.MustCompile(`quiescing.*dry_run=(\S+)`)
	quiesceRE = regexp.MustCompile(`upgrade: executing.*quiesce=(\S+)`)
)

// lastDuration is the duration in the last match of re in logs.
func lastDuration(re *regexp.Regexp, logs string) time.Duration {
	m := re.FindAllStringSubmatch(logs, -1)
	if len(m) == 0 {
		return -1
	}
	d, _ := time.ParseDuration(m[len(m)-1][1])
	return d
}

// rssKiB reads VmRSS of pid.
func rssKiB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return -1
}

// TestUpgradeFigures measures upgrades in place with N sessions held (MUXTERM_UPGRADE_BENCH=N;
// skipped without it), 8 of them streaming, the rest idle cats, over sockets of 50 channels:
// per repetition, the time from SIGUSR2 to /readyz answering, to the gateway's own "upgrade
// complete", to every session re-attached by its client; the slowest answer a dialer in a tight
// loop got; bytes lost (from the attach results and a byte-exact check of every stream); RSS
// before and after. Figures go to the test log (docs/benchmarks.md).
func TestUpgradeFigures(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("MUXTERM_UPGRADE_BENCH"))
	if n <= 0 {
		t.Skip("set MUXTERM_UPGRADE_BENCH=<sessions> to measure upgrades in place")
	}
	const reps, streams, perSocket = 5, 8, 50
	g := startGateway(t, "--allow-cmd", "sh", "--allow-cmd", "cat", "--max-sessions", strconv.Itoa(n+10),
		"--resume-hold", "60s", "--log-level", "info", "--max-open-rate", "0", "--max-sockets", "64")
	if os.Getenv("MUXTERM_UPGRADE_BENCH_LOG") != "" {
		t.Cleanup(func() { t.Log(g.Logs()) })
	}
	gwPid := g.cmd.Process.Pid
	ctx := ctxT(t, 10*time.Minute)

	type sess struct {
		id string
		st *stream // nil for an idle cat
	}
	var all []*sess
	var clients []*client.Client
	dialAll := func() {
		clients = clients[:0]
		for i := 0; i < (n+perSocket-1)/perSocket; i++ {
			clients = append(clients, dialRetry(t, g, 20*time.Second))
		}
	}
	dialAll()
	for i := range n {
		c := clients[i/perSocket]
		var ch *client.Channel
		var err error
		if i < streams {
			ch, err = c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c",
				`stty raw -echo; i=0; while :; do i=$((i+1)); echo $i; [ $((i % 25)) -eq 0 ] && sleep 0.02; done`}})
		} else {
			ch, err = c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"cat"}})
		}
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		s := &sess{id: ch.Session()}
		if i < streams {
			s.st = &stream{id: s.id}
			s.st.follow(ch)
		}
		all = append(all, s)
	}
	t.Cleanup(func() { g.Stop(60 * time.Second) })
	for _, s := range all {
		if s.st != nil {
			s.st.waitGrowth(t, 5000, 30*time.Second)
		}
	}

	var toReady, toComplete, toResumed, slowest []time.Duration
	var lost int64
	for rep := 1; rep <= reps; rep++ {
		rssBefore := rssKiB(gwPid)
		d := startDialer(g.Base, 60*time.Second)
		start := time.Now()
		if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		// /readyz polled from the signal on, on fresh connections, until it says ok once the new
		// image has logged "upgrade complete" (before that, the old image may still answer).
		readyIn := make(chan time.Duration, 1)
		go func() {
			hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for time.Since(start) < time.Minute {
				resp, err := hc.Get(g.Base + "/readyz")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK && strings.Count(g.Logs(), "upgrade complete") >= rep {
						readyIn <- time.Since(start)
						return
					}
				}
			}
			readyIn <- -1
		}()
		for _, c := range clients {
			select {
			case <-c.Done():
			case <-ctx.Done():
				t.Fatal("socket not closed")
			}
		}
		// Reconnect every socket and re-attach every session from its offset, in parallel.
		var mu sync.Mutex
		var wg sync.WaitGroup
		dialAll()
		for i, s := range all {
			c := clients[i/perSocket]
			wg.Go(func() {
				var off int64
				if s.st != nil {
					<-s.st.ended
					off = s.st.len()
				}
				ch, res, err := c.Attach(ctx, s.id, &off)
				if err != nil {
					t.Errorf("attach %s: %v", s.id, err)
					return
				}
				mu.Lock()
				lost += res.Lost + max(off-res.Offset, res.Offset-off)
				mu.Unlock()
				if s.st != nil {
					s.st.follow(ch)
				}
			})
		}
		wg.Wait()
		resumed := time.Since(start)
		ready := <-readyIn
		g.waitLog(t, "upgrade complete", rep, time.Minute)
		logs := g.Logs()
		took, dry, quiesce := lastDuration(tookRE, logs), lastDuration(dryRunRE, logs), lastDuration(quiesceRE, logs)
		for _, s := range all {
			if s.st != nil {
				s.st.waitGrowth(t, s.st.len()+2000, 30*time.Second)
				s.st.checkExact(t)
			}
		}
		d.finish()
		if len(d.errs) > 0 {
			t.Fatalf("dialer: %d of %d requests failed, first %v", len(d.errs), d.tries, d.errs[0])
		}
		rssAfter := rssKiB(gwPid)
		t.Logf("rep %d: N=%d gateway's clock: dry run %v, exec at %v, 'upgrade complete' at %v; SIGUSR2→readyz %v, →all %d resumed %v; dialer %d requests, 0 failed, slowest %v; RSS %d → %d KiB",
			rep, n, dry.Round(time.Millisecond), quiesce.Round(time.Millisecond), took.Round(time.Millisecond),
			ready.Round(time.Millisecond), len(all), resumed.Round(time.Millisecond),
			d.tries, d.slowst.Round(time.Millisecond), rssBefore, rssAfter)
		toReady, toComplete, toResumed, slowest = append(toReady, ready), append(toComplete, took),
			append(toResumed, resumed), append(slowest, d.slowst)
	}
	med := func(v []time.Duration) time.Duration {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2].Round(time.Millisecond)
	}
	t.Logf("N=%d over %d upgrades, median (max): SIGUSR2→'upgrade complete' %v (%v), →/readyz %v (%v), →all resumed %v (%v); dialer slowest %v (%v); bytes lost %d",
		n, reps, med(toComplete), slices.Max(toComplete).Round(time.Millisecond), med(toReady), slices.Max(toReady).Round(time.Millisecond),
		med(toResumed), slices.Max(toResumed).Round(time.Millisecond), med(slowest), slices.Max(slowest).Round(time.Millisecond), lost)
	if lost != 0 {
		t.Fatalf("%d bytes lost", lost)
	}
}
