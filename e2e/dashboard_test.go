//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/proto"
)

// dashboard is the part of docs/grafana-dashboard.json the tests read.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID        string `json:"refId"`
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
			Exemplar     bool   `json:"exemplar"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("docs/grafana-dashboard.json has no panels")
	}
	return d
}

// legendLabels are the labels a legend format names ({{label}}): every series the query
// returns must carry them, or the panel's legend is blank.
var legendLabels = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// opsNode is the standalone gateway of the operators' tools test, with the workload's ids.
type opsNode struct {
	g       *gateway
	bin     string // the binary copy an upgrade in place re-executes
	metrics string // its --metrics-listen address
}

// startOpsGateway starts a standalone gateway from a copy of the binary (an upgrade in place
// may rename it) with /metrics on a loopback port of its own, a fast reaper and extra env.
func startOpsGateway(t *testing.T, env []string) *opsNode {
	t.Helper()
	_, bin := binaryCopy(t)
	tok := randomToken()
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	g := launchGatewayBin(t, bin, tok, env, "--token", tok, "--allow-cmd", "sh", "--metrics-listen", metrics,
		"--kill-grace", "100ms", "--idle-grace", "1s", "--reap-interval", "100ms", "--scrollback", "4KiB")
	return &opsNode{g: g, bin: bin, metrics: metrics}
}

// standaloneWorkload runs on n: a refused WebSocket upgrade, opens, output and input, a viewer
// that lost bytes (a gap), kills (one whose escapee holds the PTY), a reap, a refused upgrade
// in place and one that completes, and an open, attach and kill in the new image. It returns
// the ids of the escapee's session and of the reaped one.
// settle is called between its phases (Prometheus scrapes each phase's effect: a rate needs
// two samples of a counter, and an upgrade in place starts the counters again).
func standaloneWorkload(ctx context.Context, t *testing.T, n *opsNode, settle func()) (escapee, reaped string) {
	t.Helper()
	g := n.g
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.Base+"/ws", nil)
	req.Header.Set("Authorization", "Bearer wrong")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("upgrade with a wrong token: got %v %v, want 401", resp, err)
	} else {
		resp.Body.Close()
	}

	c := g.dial(t)
	cat := catSession(ctx, t, c)
	typeUntil(ctx, t, cat, "hello\n", "hello\n")

	// A session that prints more than its 4 KiB ring, then a viewer asking for it from 0: the
	// bytes the ring no longer holds are a gap.
	big, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c",
		"stty raw -echo; head -c 20000 /dev/zero | tr '\\000' x; echo; echo BIGDONE; exec cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := big.ReadUntil(ctx, "BIGDONE"); err != nil {
		t.Fatal(err)
	}
	late := g.dial(t)
	gapCh, res, err := late.AttachWith(ctx, big.Session(), client.AttachOptions{From: ptrTo(int64(0)), Screen: proto.ScreenNever})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gapCh.ReadUntil(ctx, "BIGDONE"); err != nil {
		t.Fatal(err)
	}
	if gapCh.Lost() == 0 && res.Lost == 0 {
		t.Fatalf("attach from 0 past a 4 KiB ring: nothing announced lost (%+v)", res)
	}
	settle()

	// The escapee: a kill returns while a process in a session of its own holds the PTY.
	esc := openEscapee(ctx, t, c)
	if kr, err := c.Kill(ctx, esc.Session()); err != nil || kr.Escapees != 1 {
		t.Fatalf("kill with an escapee: got %+v %v, want 1 escapee", kr, err)
	}
	plain, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Resize(ctx, 100, 30); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kill(ctx, plain.Session()); err != nil {
		t.Fatal(err)
	}
	// A second attach, a phase after the first: a rate of attaches needs the count to grow
	// between two scrapes.
	if _, _, err := late.Attach(ctx, cat.Session(), nil); err != nil {
		t.Fatal(err)
	}
	settle()

	// The reap: detached, unwatched past the 1 s grace.
	idle, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "the reaper to close the detached session", func() bool {
		return !slices.ContainsFunc(sessionList(ctx, t, c), func(s proto.SessionInfo) bool { return s.Session == idle.Session() })
	})
	settle()

	// An upgrade in place refused (the binary is gone), then one that completes.
	hidden := n.bin + ".away"
	if err := os.Rename(n.bin, hidden); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, "upgrade refused; still serving", 1, 30*time.Second)
	settle()
	if err := os.Rename(hidden, n.bin); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, "upgrade complete", 1, 60*time.Second)
	c2 := dialRetry(t, g, 30*time.Second)
	again, _, err := c2.Attach(ctx, cat.Session(), nil)
	if err != nil {
		t.Fatalf("attach after the upgrade: %v", err)
	}
	typeUntil(ctx, t, again, "after\n", "after\n")
	last, err := c2.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Kill(ctx, last.Session()); err != nil {
		t.Fatal(err)
	}
	settle()
	return esc.Session(), idle.Session()
}

// clusterWorkload runs relayed requests on a three-node cluster: a session opened on a,
// attached, resized, typed into and detached through b, killed through b; then node c dies,
// so a and b count it lost. It returns the session's id.
func clusterWorkload(ctx context.Context, t *testing.T, tc *testCluster, settle func()) string {
	t.Helper()
	a, b := tc.nodes["a"], tc.nodes["b"]
	ca, cb := dialAs(t, a, tc.alice), dialAs(t, b, tc.alice)
	cha := catSession(ctx, t, ca)
	id := cha.Session()
	waitListed(t, cb, id, "a", 10*time.Second)
	chb, _, err := cb.Attach(ctx, id, ptrTo(int64(0)))
	if err != nil {
		t.Fatalf("attach through b: %v", err)
	}
	if err := chb.Resize(ctx, 90, 30); err != nil {
		t.Fatalf("resize through b: %v", err)
	}
	typeUntil(ctx, t, chb, "relayed\n", "relayed\n")
	if err := chb.Detach(ctx); err != nil {
		t.Fatalf("detach through b: %v", err)
	}
	if _, err := cb.Kill(ctx, id); err != nil {
		t.Fatalf("kill through b: %v", err)
	}
	settle()
	// c dies (a stop would say goodbye): a and b find it lost when its heartbeats stop.
	if err := tc.nodes["c"].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "a and b to count c lost", func() bool {
		return strings.Contains(a.Logs(), " lost=c silent=") && strings.Contains(b.Logs(), " lost=c silent=")
	})
	return id
}

// waitScraped waits until Prometheus has scraped every target that is up (live of them)
// after now.
func waitScraped(ctx context.Context, t *testing.T, p *prometheus, live int) {
	t.Helper()
	after := float64(time.Now().UnixMilli()) / 1000
	testutil.WaitFor(t, 30*time.Second, "a scrape of every target after the workload", func() bool {
		v, err := p.query(ctx, fmt.Sprintf("timestamp(up == 1) > %f", after+0.1))
		if err != nil {
			t.Fatal(err)
		}
		return len(v) >= live
	})
}

// TestPrometheusDashboard: Debian's Prometheus scrapes a standalone gateway and a three-node
// cluster while they run the workload above; the alerts of docs/alerts.yml it evaluates are
// healthy and fire for what happened (checkAlertsLive); and every query of every panel of
// docs/grafana-dashboard.json, evaluated by that Prometheus, returns series, each a number (not
// NaN) carrying the labels its legend names.
func TestPrometheusDashboard(t *testing.T) {
	ctx := ctxT(t, 240*time.Second)
	j := startJaeger(t)
	n := startOpsGateway(t, j.otelEnv(opsService))
	tc := startClusterWith(t, map[string][]string{
		"a": {"--metrics-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t))},
		"b": {"--metrics-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t))},
		"c": {"--metrics-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t))},
	}, "a", "b", "c")
	targets := []promTarget{{n.metrics, "standalone"}}
	for _, name := range []string{"a", "b", "c"} {
		args := tc.args[name]
		for i, a := range args {
			if a == "--metrics-listen" {
				targets = append(targets, promTarget{args[i+1], name})
			}
		}
	}
	p := startPrometheus(t, targets...)

	live := len(targets)
	settle := func() {
		waitScraped(ctx, t, p, live)
		waitScraped(ctx, t, p, live)
	}
	standaloneWorkload(ctx, t, n, settle)
	clusterWorkload(ctx, t, tc, settle)
	live-- // node c was stopped
	settle()

	t.Cleanup(func() {
		if t.Failed() {
			var targets any
			_ = getJSON(context.Background(), p.base+"/api/v1/targets", &targets)
			t.Logf("Prometheus's targets: %v", targets)
			for _, q := range []string{`count_over_time(up[5m])`, `sum_over_time(up[5m])`, `count_over_time(muxterm_sockets[5m])`} {
				v, err := p.query(context.Background(), q)
				t.Logf("%s: %v %v", q, v, err)
			}
		}
	})
	checkAlertsLive(ctx, t, p)
	checkExemplarsScraped(ctx, t, n.metrics)
	d := readDashboard(t)
	for _, panel := range d.Panels {
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q has no queries", panel.Title)
		}
		for _, tg := range panel.Targets {
			v, err := p.query(ctx, tg.Expr)
			if err != nil {
				t.Errorf("panel %q, query %s: %v", panel.Title, tg.RefID, err)
				continue
			}
			if len(v) == 0 {
				t.Errorf("panel %q, query %s: no series: %s", panel.Title, tg.RefID, tg.Expr)
				continue
			}
			for _, s := range v {
				if s.Value[1] == "NaN" {
					t.Errorf("panel %q, query %s: series %v is NaN (nothing to chart): %s", panel.Title, tg.RefID, s.Metric, tg.Expr)
				}
			}
			for _, m := range legendLabels.FindAllStringSubmatch(tg.LegendFormat, -1) {
				for _, s := range v {
					if _, ok := s.Metric[m[1]]; !ok {
						t.Errorf("panel %q, query %s: series %v lacks label %s of its legend %q",
							panel.Title, tg.RefID, s.Metric, m[1], tg.LegendFormat)
					}
				}
			}
			t.Logf("panel %q %s: %d series, first %v = %v", panel.Title, tg.RefID, len(v), v[0].Metric, v[0].Value[1])
			if strings.Contains(tg.Expr, "_duration_seconds_bucket") {
				checkPanelExemplars(ctx, t, p, j, panel.Title, tg.RefID, tg.Expr, tg.Exemplar)
			}
		}
	}
}

func sessionList(ctx context.Context, t *testing.T, c *client.Client) []proto.SessionInfo {
	t.Helper()
	l, err := c.List(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	return l
}

// checkAlertsLive checks the rules of docs/alerts.yml as the Prometheus that scraped the
// workload evaluates them: every one healthy (its query runs on the real series), the refused
// upgrade firing, the lost node c pending or firing (it waits 1 m), and nothing else firing
// (no kill was slow or left survivors, no reap failed, no descriptor ran short).
func checkAlertsLive(ctx context.Context, t *testing.T, p *prometheus) {
	t.Helper()
	want := map[string][]string{
		"MuxtermUpgradeRefused":       {"firing"},
		"MuxtermNodeLost":             {"pending", "firing"},
		"MuxtermKillSlow":             {"inactive"},
		"MuxtermKillSurvivors":        {"inactive"},
		"MuxtermReaperErrors":         {"inactive"},
		"MuxtermDescriptorReserveHit": {"inactive"},
		"MuxtermRecordingDrops":       {"inactive"},
	}
	var rules map[string]promRule
	wrong := func() []string {
		var w []string
		for name, states := range want {
			if r := rules[name]; !slices.Contains(states, r.State) {
				w = append(w, fmt.Sprintf("%s %q (want %v, health %q %s)", name, r.State, states, r.Health, r.LastError))
			}
		}
		slices.Sort(w)
		return w
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if rules, err = p.rules(ctx); err != nil {
			t.Fatal(err)
		}
		w := wrong()
		if len(w) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, q := range []string{`muxterm_session_kill_duration_seconds_count`, `muxterm_session_kill_duration_seconds_bucket{le="2.5"}`, `muxterm_cluster_nodes`, `muxterm_upgrades_total`} {
				v, err := p.query(ctx, q)
				t.Logf("%s: %v %v", q, v, err)
			}
			t.Fatalf("the alerts evaluated on the workload's series, 30 s on: %s", strings.Join(w, "; "))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the alerts evaluated on the workload's series: %v: %s", ctx.Err(), strings.Join(w, "; "))
		case <-time.After(100 * time.Millisecond):
		}
	}
	if len(rules) != len(want) {
		t.Errorf("Prometheus evaluates %d alerts, the test knows %d: %v", len(rules), len(want), rules)
	}
	for name, r := range rules {
		if r.Health != "ok" {
			t.Errorf("alert %s: health %q: %s", name, r.Health, r.LastError)
		}
	}
}

// TestAlertRules: docs/alerts.yml passes `promtool check rules`, and its unit tests
// (docs/alerts_test.yml: each alert fires when it should, not before, not on healthy series)
// pass `promtool test rules`.
func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool")
	docs := filepath.Join(repoRoot(t), "docs")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = docs
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// opsService is the standalone gateway's OTEL_SERVICE_NAME in the operators' tools tests.
const opsService = "muxterm-ops"

// exemplarLine is a histogram bucket with an exemplar in OpenMetrics: `name_bucket{…} n #
// {trace_id="…",span_id="…"} value timestamp`.
var exemplarLine = regexp.MustCompile(`^(muxterm_session_(?:kill|open|attach)_duration_seconds)_bucket\{.*\} \S+ # \{[^}]*trace_id="([0-9a-f]{32})"[^}]*\} `)

// checkExemplarsScraped scrapes addr's /metrics asking for OpenMetrics, as Prometheus does, and
// finds exemplars (trace ids) on the kill, open and attach latency histograms. (The text format
// has none: it cannot carry them.)
func checkExemplarsScraped(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Errorf("/metrics with an OpenMetrics Accept: Content-Type %q", ct)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := exemplarLine.FindStringSubmatch(line); m != nil {
			found[m[1]] = true
		}
	}
	for _, h := range []string{"muxterm_session_kill_duration_seconds", "muxterm_session_open_duration_seconds", "muxterm_session_attach_duration_seconds"} {
		if !found[h] {
			t.Errorf("no exemplar on %s's buckets in the OpenMetrics exposition", h)
		}
	}
}

// checkPanelExemplars checks a latency panel's query: the dashboard asks Grafana for its
// exemplars, Prometheus (exemplar storage on) returns some for it, and each names a trace that
// Jaeger holds, with the span the exemplar names: the request's (session.kill for the kill
// histogram, and so on).
func checkPanelExemplars(ctx context.Context, t *testing.T, p *prometheus, j *jaeger, title, ref, expr string, on bool) {
	t.Helper()
	if !on {
		t.Errorf("panel %q, query %s: a latency histogram without \"exemplar\": true", title, ref)
	}
	var r struct {
		Data []struct {
			SeriesLabels map[string]string `json:"seriesLabels"`
			Exemplars    []struct {
				Labels map[string]string `json:"labels"`
			} `json:"exemplars"`
		} `json:"data"`
	}
	now := time.Now()
	u := fmt.Sprintf("%s/api/v1/query_exemplars?query=%s&start=%d&end=%d", p.base, url.QueryEscape(expr),
		now.Add(-10*time.Minute).Unix(), now.Unix()+1)
	if err := getJSON(ctx, u, &r); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range r.Data {
		for _, e := range s.Exemplars {
			ids = append(ids, e.Labels["trace_id"]+"/"+e.Labels["span_id"])
		}
	}
	if len(ids) == 0 {
		t.Errorf("panel %q, query %s: Prometheus holds no exemplars for %s", title, ref, expr)
		return
	}
	tid, sid, _ := strings.Cut(ids[len(ids)-1], "/")
	var span *jaegerSpan
	testutil.WaitFor(t, 15*time.Second, "the exemplar's trace "+tid+" in Jaeger", func() bool {
		tr, err := j.trace(ctx, tid)
		if err != nil {
			return false
		}
		span = tr.spanByID(sid)
		return span != nil
	})
	m := regexp.MustCompile(`muxterm_session_(kill|open|attach)_duration`).FindStringSubmatch(expr)
	if m == nil || span.OperationName != "session."+m[1] {
		t.Errorf("panel %q, query %s: the exemplar's span is %s", title, ref, span.OperationName)
	}
	t.Logf("panel %q %s: %d exemplars; the last is span %s of trace %s in Jaeger", title, ref, len(ids), span.OperationName, tid)
}
