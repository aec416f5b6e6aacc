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

// startTool runs bin with args and env, its output kept for failures, and stops it at the end.
func startTool(t *testing.T, name, bin string, env []string, args ...string) *toolProc {
	t.Helper()
	p := &toolProc{name: name, cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
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
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			t.Errorf("%s did not exit within 10s of SIGTERM", name)
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
	p.toolProc = startTool(t, "prometheus", bin, nil, "--config.file="+conf,
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
