package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEchotraceParseLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want ftraceEvent
	}{
		{"        muxbench-29256   (  29251) [000] ..... 42869.760544: sys_enter: NR 1 (f, 1cc05b01e000, 18a88, 0, 0, 0)",
			ftraceEvent{comm: "muxbench", tid: 29256, tgid: 29251, ns: 42869760544000, event: "sys_enter", nr: 1, args: [3]uint64{0xf, 0x1cc05b01e000, 0x18a88}}},
		{"         gateway-29270   (  29267) [001] ..... 42869.760700: sys_exit: NR 0 = -11",
			ftraceEvent{comm: "gateway", tid: 29270, tgid: 29267, ns: 42869760700000, event: "sys_exit", nr: 0, ret: -11}},
		// No tgid recorded: the tid stands for it; a comm with a dash and a slash.
		{"           <...>-29218   (-------) [000] d..2. 42869.740112: sched_switch: prev_comm=tail prev_pid=29218",
			ftraceEvent{comm: "<...>", tid: 29218, tgid: 29218, ns: 42869740112000, event: "sched_switch"}},
		{" kworker/u4:1-ev-77 (     77) [001] d..3. 5.000000001: sched_waking: comm=cat pid=9",
			ftraceEvent{comm: "kworker/u4:1-ev", tid: 77, tgid: 77, ns: 5000000001, event: "sched_waking"}},
	} {
		got, ok := parseFtraceLine(tc.line)
		if !ok || got != tc.want {
			t.Errorf("parseFtraceLine(%q) = %+v, %v; want %+v", tc.line, got, ok, tc.want)
		}
	}
	for _, bad := range []string{
		"# tracer: nop",
		"#           TASK-PID       TGID    CPU#  |||||  TIMESTAMP  FUNCTION",
		"        muxbench-29256 [000] ..... 42869.760544: sys_enter: NR 1 (f, 1, 18a88, 0, 0, 0)", // no tgid column
		"        muxbench-29256   (  29251) [000] ..... 42869.760544: sys_exit: NR 1 = x",
		"",
	} {
		if e, ok := parseFtraceLine(bad); ok {
			t.Errorf("parseFtraceLine(%q) = %+v, accepted", bad, e)
		}
	}
}

// testdata/echotrace.txt is cut from a real trace of `muxbench -only echotrace -echo-idle-n 30
// -echo-n 200` (muxbench 29251, the pass-through 29275, the gateway 29267, the cats 29285
// (pass-through), 29288 (lean client), 29290 (Go client)): the windows of keystrokes 0 of the
// pass-through (kind 1), 0 and 1 of the lean client from idle (kind 3), 0 and 10 of the Go client
// (kind 5) and 10 of the lean client (kind 7) back to back, with the syscalls of those processes
// and a few of the other lines of each window. From window 3/1 the lean client's cat's write
// exits were deleted, so that it misses a point.
var echotraceTestWho = traceWho{me: 29251, pass: 29275, gw: 29267, cats: map[int]bool{29285: true, 29288: true, 29290: true}}

// The segments of the checked-in windows, to the microsecond (computed by hand from the lines:
// each point is the first matching line after the one before).
func TestEchotraceAnalyze(t *testing.T) {
	want := map[int]struct {
		windows, complete int
		total             []float64
		segs              []float64 // the complete window's
	}{
		kindIdlePass: {1, 1, []float64{2069}, []float64{1706, 140, 24, 68, 47, 72, 12}},
		kindIdleLean: {2, 1, []float64{641, 520}, []float64{21, 171, 27, 175, 111, 121, 15}},
		kindB2BGo:    {1, 1, []float64{415}, []float64{5, 93, 5, 175, 79, 28, 30}}, // keystroke 0 is warm-up
		kindB2BLean:  {1, 1, []float64{288}, []float64{1, 43, 16, 110, 64, 52, 2}},
	}
	skip := func(kind, i int) bool {
		return (kind == kindB2BGo || kind == kindB2BLean) && i%echotraceBlock < echotraceBlockWarm
	}
	for _, who := range []traceWho{echotraceTestWho, {me: 29251, pass: 29275, gw: 29267}} {
		f, err := os.Open("testdata/echotrace.txt")
		if err != nil {
			t.Fatal(err)
		}
		res, err := analyzeEchoTrace(f, who, skip)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != len(want) {
			t.Errorf("kinds %v, want 4", slices.Sorted(maps.Keys(res)))
		}
		for kind, w := range want {
			r := res[kind]
			if r == nil {
				t.Errorf("kind %d: no windows", kind)
				continue
			}
			if r.Windows != w.windows || r.Complete != w.complete || !slices.Equal(r.Total, w.total) {
				t.Errorf("kind %d: %d windows, %d complete, totals %v; want %d, %d, %v", kind, r.Windows, r.Complete, r.Total, w.windows, w.complete, w.total)
			}
			var segs []float64
			for _, s := range r.Segs {
				if len(s) != 1 {
					t.Fatalf("kind %d: segment samples %v, want one each", kind, r.Segs)
				}
				segs = append(segs, s[0])
			}
			if !slices.Equal(segs, w.segs) {
				t.Errorf("kind %d (cats %v): segments %v, want %v", kind, who.cats, segs, w.segs)
			}
		}
	}
	// Without the skip, keystroke 0 of the Go client counts too.
	f, err := os.Open("testdata/echotrace.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := analyzeEchoTrace(f, echotraceTestWho, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[kindB2BGo]; r == nil || r.Windows != 2 || r.Complete != 2 || r.Segs[0][0] != 31 {
		t.Errorf("without skip, Go client windows %+v; want 2, both complete, the first starting with 31 µs", r)
	}
}

// The section refuses, before it starts anything, when no tracefs root is writable and when
// tracing is already on.
func TestEchotraceRefuses(t *testing.T) {
	dir := t.TempDir()
	b := &bench{tracefsRoots: []string{filepath.Join(dir, "none"), filepath.Join(dir, "nothing")},
		report: &Report{Details: map[string]any{}}}
	err := b.runEchotrace(context.Background())
	if err == nil || !strings.Contains(err.Error(), "needs root and a writable tracefs") {
		t.Fatalf("without tracefs: %v", err)
	}
	busy := filepath.Join(dir, "busy")
	if err := os.Mkdir(busy, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(busy, "tracing_on"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.tracefsRoots = []string{filepath.Join(dir, "none"), busy}
	err = b.runEchotrace(context.Background())
	if err == nil || !strings.Contains(err.Error(), "tracing is already on") {
		t.Fatalf("with tracing on: %v", err)
	}
	if b.gw != nil || b.pt != nil {
		t.Fatal("a refused section started the gateway or the pass-through")
	}
}

// testGatewayBin is $MUXTERM_BIN, or the gateway built into a temporary directory.
func testGatewayBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("MUXTERM_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "gateway")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/muxterm/muxterm/cmd/gateway").CombinedOutput()
	if err != nil {
		t.Fatalf("build the gateway: %v\n%s", err, out)
	}
	return bin
}

// fakeTracefs is a directory of plain files standing in for tracefs, with tracing off.
func fakeTracefs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"tracing_on": "0\n", "set_event": "sched:sched_wakeup\n", "options/record-tgid": "0\n",
		"buffer_size_kb": "7 (expanded: 1408)\n", "trace": "old lines\n"}
	if err := os.Mkdir(filepath.Join(dir, "options"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// checkFiles compares files under dir with want.
func checkFiles(t *testing.T, when, dir string, want map[string]string) {
	t.Helper()
	for name, w := range want {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != w {
			t.Errorf("%s: %s = %q, %v; want %q", when, name, got, err, w)
		}
	}
}

// restored is what fakeTracefs holds once restored.
var restored = map[string]string{"set_event": "sched:sched_wakeup\n", "options/record-tgid": "0",
	"buffer_size_kb": "7", "trace": "", "tracing_on": "0"}

// A run cancelled while tracing puts tracefs back as it found it (a fake tracefs: no root
// needed), and leaves no process behind.
func TestEchotraceRestoresOnCancel(t *testing.T) {
	dir := fakeTracefs(t)
	cfg, err := parseFlags([]string{"-only", "echotrace", "-echo-idle-n", "1000", "-gateway", testGatewayBin(t), "-json", ""})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	on := false
	b := &bench{cfg: cfg, tagKey: "MUXBENCH_TEST", tagVal: fmt.Sprintf("echotrace-%d", os.Getpid()), log: io.Discard,
		report: &Report{Details: map[string]any{}}, tracefsRoots: []string{dir},
		tracingOn: func() {
			on = true
			checkFiles(t, "while tracing", dir, map[string]string{"tracing_on": "1", "options/record-tgid": "1", "trace": ""})
			cancel()
		}}
	err = b.runEchotrace(ctx)
	if cerr := b.cleanup(); cerr != nil {
		t.Errorf("cleanup: %v", cerr)
	}
	if !on || !errors.Is(err, context.Canceled) {
		t.Fatalf("tracing on: %v; the run returned %v, want context.Canceled", on, err)
	}
	checkFiles(t, "after the cancelled run", dir, restored)
}

// setup changes the events, record-tgid and the buffer size, and restore puts back what it
// found (on a directory of plain files standing in for tracefs).
func TestEchotraceSetupRestores(t *testing.T) {
	dir := fakeTracefs(t)
	tfs, err := openTracefs([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	restore, err := tfs.setup(echotraceEvents, 4096)
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, "after setup", dir, map[string]string{"set_event": strings.Join(echotraceEvents, "\n") + "\n",
		"options/record-tgid": "1", "buffer_size_kb": "4096", "trace": "", "tracing_on": "0\n"})
	if err := tfs.write("tracing_on", "1", false); err != nil {
		t.Fatal(err)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, "after restore", dir, restored)
}

// One real run of the section, tiny: it needs root and tracefs (CI has both) and skips without.
// Every segment row has figures in its columns from windows that had every point.
func TestEchotraceRun(t *testing.T) {
	if _, err := openTracefs(defaultTracefsRoots); err != nil {
		t.Skipf("no tracefs to trace with: %v", err)
	}
	bin := testGatewayBin(t)
	dir := t.TempDir()
	cfg, err := parseFlags([]string{"-only", "echotrace", "-echo-idle-n", "20", "-echo-n", "20", "-idle-pause", "5ms",
		"-gateway", bin, "-json", filepath.Join(dir, "r.json"), "-echotrace-out", filepath.Join(dir, "trace.txt")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx, cfg, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Rows    []Row `json:"rows"`
		Details struct {
			Echotrace map[string]json.RawMessage `json:"echotrace"`
		} `json:"details"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"idle: pass-through", "idle: lean client", "back to back: Go client", "back to back: lean client"} {
		var k echoKind
		if err := json.Unmarshal(rep.Details.Echotrace[col], &k); err != nil || k.Complete < 1 || k.Windows < k.Complete {
			t.Errorf("%s: %s, %v; want windows with every point", col, rep.Details.Echotrace[col], err)
		}
	}
	rows := map[string]Row{}
	for _, r := range rep.Rows {
		rows[r.Section+" / "+r.Name] = r
	}
	for _, seg := range append([]string{"whole window (marker to marker)"}, echoSegments...) {
		for _, q := range []string{"p50", "p90"} {
			idle, b2b := rows["echotrace idle / "+seg+", "+q], rows["echotrace back to back / "+seg+", "+q]
			if idle.Pass == nil || idle.Lean == nil || b2b.Mux == nil || b2b.Lean == nil {
				t.Errorf("%s, %s: idle pass-through %v, lean %v; back to back Go client %v, lean %v", seg, q, idle.Pass, idle.Lean, b2b.Mux, b2b.Lean)
			}
		}
	}
	if len(rows) != 2*2*(len(echoSegments)+1) {
		t.Errorf("%d rows, want %d", len(rows), 2*2*(len(echoSegments)+1))
	}
	if fi, err := os.Stat(filepath.Join(dir, "trace.txt")); err != nil || fi.Size() == 0 {
		t.Errorf("-echotrace-out: %v, %v", fi, err)
	}
	if on, err := os.ReadFile(filepath.Join(defaultTracefsRoots[0], "tracing_on")); err == nil && strings.TrimSpace(string(on)) != "0" {
		t.Errorf("tracing_on = %q after the run", on)
	}
}

// echotrace runs only when named: not in the default or -short runs, not with -variant.
func TestEchotraceOnlyWhenNamed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{{nil, false}, {[]string{"-short"}, false}, {[]string{"-only", "echo"}, false},
		{[]string{"-only", "echotrace"}, true}, {[]string{"-short", "-only", "echo,echotrace"}, true}} {
		cfg, err := parseFlags(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if got := runsSection(cfg, "echotrace"); got != tc.want {
			t.Errorf("%q runs echotrace: %v, want %v", tc.args, got, tc.want)
		}
		if !runsSection(cfg, "echo") && len(tc.args) < 2 {
			t.Errorf("%q does not run echo", tc.args)
		}
	}
	if _, err := parseFlags([]string{"-variant", "a=/bin/true", "-only", "echotrace"}); err == nil {
		t.Error("-variant accepted -only echotrace")
	}
}
