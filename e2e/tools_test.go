//go:build e2e

package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
)

// tool returns the path of a command the suite needs. A missing one fails the test: `make
// deps-tools` installs them (Debian's prometheus package: prometheus and promtool; Jaeger in
// bin/).
func tool(t *testing.T, name string) string {
	t.Helper()
	if name == "jaeger" {
		p := cmp.Or(os.Getenv("MUXTERM_JAEGER"), filepath.Join(repoRoot(t), "bin", "jaeger"))
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("jaeger: %v (make deps-tools builds bin/jaeger)", err)
		}
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed (make deps-tools installs it): %v", name, err)
	}
	return p
}

// toolProc is a tool's server process, stopped (SIGTERM, then SIGKILL) when the test ends.
type toolProc struct {
	name   string
	stop   syscall.Signal // what ends it: SIGTERM, or SIGKILL for a tool with nothing to keep
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	exited chan struct{}
}

func (p *toolProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *toolProc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startTool runs bin with args, its output kept for failures, and ends it with stop when the
// test ends.
func startTool(t *testing.T, name, bin string, stop syscall.Signal, args ...string) *toolProc {
	t.Helper()
	p := &toolProc{name: name, stop: stop, cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(p.stop)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			t.Errorf("%s did not exit within 10s of %v", name, p.stop)
		}
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, tail(p.logs()))
		}
	})
	return p
}

// waitHTTP waits until GET u answers 200, failing t if p exits first or d passes.
func (p *toolProc) waitHTTP(t *testing.T, u string, d time.Duration) {
	t.Helper()
	testutil.WaitFor(t, d, p.name+" ready at "+u, func() bool {
		select {
		case <-p.exited:
			t.Fatalf("%s exited:\n%s", p.name, tail(p.logs()))
		default:
		}
		resp, err := http.Get(u)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// getJSON GETs u and decodes its JSON answer into out.
func getJSON(ctx context.Context, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("get %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %s: %s", u, resp.Status, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("get %s: decode: %w", u, err)
	}
	return nil
}

// prometheus is Debian's Prometheus, scraping targets every 250 ms into a data directory of
// the test's own, with the exemplar store on and the rules of docs/alerts.yml loaded.
type prometheus struct {
	*toolProc
	base string // http://127.0.0.1:port
}

// promTarget is one scrape target and the node label it gets.
type promTarget struct{ addr, node string }

func startPrometheus(t *testing.T, targets ...promTarget) *prometheus {
	t.Helper()
	bin := tool(t, "prometheus")
	dir := t.TempDir()
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: 250ms\n  scrape_timeout: 250ms\n  evaluation_interval: 250ms\n")
	fmt.Fprintf(&cfg, "rule_files:\n  - %q\n", filepath.Join(repoRoot(t), "docs", "alerts.yml"))
	fmt.Fprintf(&cfg, "scrape_configs:\n  - job_name: muxterm\n    static_configs:\n")
	for _, tg := range targets {
		fmt.Fprintf(&cfg, "      - targets: [%q]\n        labels: {node: %q}\n", tg.addr, tg.node)
	}
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	p := &prometheus{base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	p.toolProc = startTool(t, "prometheus", bin, syscall.SIGTERM, "--config.file="+conf,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
		"--enable-feature=exemplar-storage", "--log.level=warn")
	p.waitHTTP(t, p.base+"/-/ready", 30*time.Second)
	// Its discovery hands the targets to the scrapers up to 5 s after start: the workload waits
	// for a first scrape of each, or it would run unseen.
	testutil.WaitFor(t, 30*time.Second, "Prometheus's first scrape of every target", func() bool {
		v, err := p.query(context.Background(), "up == 1")
		if err != nil {
			t.Fatal(err)
		}
		return len(v) == len(targets)
	})
	return p
}

// promSample is one series of an instant query's vector.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query evaluates expr now through /api/v1/query and returns the vector.
func (p *prometheus) query(ctx context.Context, expr string) ([]promSample, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := getJSON(ctx, p.base+"/api/v1/query?query="+url.QueryEscape(expr), &r); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: a %s, want a vector", expr, r.Data.ResultType)
	}
	var v []promSample
	if err := json.Unmarshal(r.Data.Result, &v); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	return v, nil
}

// promRule is one rule of /api/v1/rules.
type promRule struct {
	Name      string `json:"name"`
	State     string `json:"state"` // inactive, pending, firing
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

// rules returns the alerting rules Prometheus evaluates, by name.
func (p *prometheus) rules(ctx context.Context) (map[string]promRule, error) {
	var r struct {
		Data struct {
			Groups []struct {
				Rules []promRule `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := getJSON(ctx, p.base+"/api/v1/rules?type=alert", &r); err != nil {
		return nil, err
	}
	out := map[string]promRule{}
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			out[rule.Name] = rule
		}
	}
	return out, nil
}

// jaeger is the Jaeger all-in-one (bin/jaeger, v1.75.0: OTLP/HTTP in, memory storage, the
// query API) on loopback ports of the test's own.
type jaeger struct {
	*toolProc
	query string // http://127.0.0.1:port, the query API
	otlp  string // http://127.0.0.1:port, for OTEL_EXPORTER_OTLP_ENDPOINT
}

func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	bin := tool(t, "jaeger")
	q, g, h, o := freePort(t), freePort(t), freePort(t), freePort(t)
	cfg := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 100000
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 50ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`, q, g, h, o)
	conf := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	j := &jaeger{query: fmt.Sprintf("http://127.0.0.1:%d", q), otlp: fmt.Sprintf("http://127.0.0.1:%d", o)}
	// Memory storage: nothing to keep, so SIGKILL (its graceful stop can take over 10 s).
	j.toolProc = startTool(t, "jaeger", bin, syscall.SIGKILL, "--config", conf)
	j.waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/status", h), 60*time.Second)
	j.waitHTTP(t, j.query+"/api/services", 30*time.Second)
	return j
}

// otelEnv is the environment that sends a gateway's traces to j as service.
func (j *jaeger) otelEnv(service string) []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.otlp, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_EXPORTER=otlp", "OTEL_METRICS_EXPORTER=none", "OTEL_BSP_SCHEDULE_DELAY=50",
		"OTEL_SERVICE_NAME=" + service}
}

// jaegerTrace is a trace as the query API returns it.
type jaegerTrace struct {
	TraceID   string                   `json:"traceID"`
	Spans     []jaegerSpan             `json:"spans"`
	Processes map[string]jaegerProcess `json:"processes"`
}

type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64       `json:"startTime"` // µs since the epoch
	Duration  int64       `json:"duration"`  // µs
	Tags      []jaegerTag `json:"tags"`
	Logs      []struct {
		Timestamp int64       `json:"timestamp"`
		Fields    []jaegerTag `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
}

type jaegerTag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

type jaegerProcess struct {
	ServiceName string      `json:"serviceName"`
	Tags        []jaegerTag `json:"tags"`
}

// tag returns the value of s's tag key as text, and whether it has one.
func (s *jaegerSpan) tag(key string) (string, bool) {
	for _, tg := range s.Tags {
		if tg.Key == key {
			return fmt.Sprint(tg.Value), true
		}
	}
	return "", false
}

// events returns the names of s's events (Jaeger logs with an "event" field).
func (s *jaegerSpan) events() []string {
	var out []string
	for _, l := range s.Logs {
		for _, f := range l.Fields {
			if f.Key == "event" {
				out = append(out, fmt.Sprint(f.Value))
			}
		}
	}
	return out
}

// end is when s ended, in µs since the epoch.
func (s *jaegerSpan) end() int64 { return s.StartTime + s.Duration }

// traces searches service's traces with tags (may be nil) through /api/traces.
func (j *jaeger) traces(ctx context.Context, service string, tags map[string]string) ([]jaegerTrace, error) {
	v := url.Values{"service": {service}, "limit": {"1000"}, "lookback": {"1h"}}
	if len(tags) > 0 {
		b, _ := json.Marshal(tags)
		v.Set("tags", string(b))
	}
	var r struct {
		Data []jaegerTrace `json:"data"`
	}
	if err := getJSON(ctx, j.query+"/api/traces?"+v.Encode(), &r); err != nil {
		return nil, err
	}
	return r.Data, nil
}

// trace fetches one trace by id through /api/traces/{id}.
func (j *jaeger) trace(ctx context.Context, id string) (jaegerTrace, error) {
	var r struct {
		Data []jaegerTrace `json:"data"`
	}
	if err := getJSON(ctx, j.query+"/api/traces/"+id, &r); err != nil {
		return jaegerTrace{}, err
	}
	if len(r.Data) != 1 {
		return jaegerTrace{}, fmt.Errorf("trace %s: %d traces", id, len(r.Data))
	}
	return r.Data[0], nil
}
