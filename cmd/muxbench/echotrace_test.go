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
	"sync"
	"syscall"
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
		// Comms with parentheses, " (" and ") [": the line is read from its (tgid) [cpu] field.
		{"        (sd-pam)-1234    (   1234) [001] ..... 7.000001: sys_exit: NR 0 = 3",
			ftraceEvent{comm: "(sd-pam)", tid: 1234, tgid: 1234, ns: 7000001000, event: "sys_exit", ret: 3}},
		{"     Web (x) [1]-4321    (   4300) [000] ..... 7.5: sched_switch: prev_comm=a (b) [0] prev_pid=4321",
			ftraceEvent{comm: "Web (x) [1]", tid: 4321, tgid: 4300, ns: 7500000000, event: "sched_switch"}},
		{"      my (prog)-55     (-------) [000] d..2. 8.000002: sched_waking: comm=(sd-pam) pid=1234",
			ftraceEvent{comm: "my (prog)", tid: 55, tgid: 55, ns: 8000002000, event: "sched_waking"}},
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
		// A raw counter clock's timestamp (x86-tsc, counter) is not seconds.
		"        muxbench-29256   (  29251) [000] ..... 120123456789: sys_exit: NR 1 = 1",
		"        muxbench-29256   (  29251) [000] ..... 42869.: sys_exit: NR 1 = 1",
		"        muxbench-29256   (  xx) [000] ..... 42869.760544: sys_exit: NR 1 = 1",
		"CPU:1 [LOST 42 EVENTS]",
		"",
	} {
		if e, ok := parseFtraceLine(bad); ok {
			t.Errorf("parseFtraceLine(%q) = %+v, accepted", bad, e)
		}
	}
}

func TestEchotraceParseLost(t *testing.T) {
	for line, want := range map[string]int64{"CPU:1 [LOST 42 EVENTS]": 42, "CPU:0 [LOST EVENTS]": -1, "  CPU:12 [LOST 7 EVENTS]": 7} {
		if n, ok := parseLostLine(line); !ok || n != want {
			t.Errorf("parseLostLine(%q) = %d, %v; want %d", line, n, ok, want)
		}
	}
	for _, bad := range []string{"CPU:x [LOST 1 EVENTS]", "CPU:1 [LOST x EVENTS]", "CPU:1 [LOST 1]", "# CPU:1 [LOST 1 EVENTS]",
		"        muxbench-29256   (  29251) [000] ..... 42869.760544: sys_exit: NR 1 = 1"} {
		if _, ok := parseLostLine(bad); ok {
			t.Errorf("parseLostLine(%q) accepted", bad)
		}
	}
}

// testdata/echotrace.txt is cut from a real trace of `muxbench -only echotrace -echo-idle-n 30
// -echo-n 200` (muxbench 29251, the pass-through 29275, the gateway 29267, the cats 29285
// (pass-through), 29288 (lean client), 29290 (Go client)): the windows of keystrokes 0 of the
// pass-through (kind 1), 0 and 1 of the lean client from idle (kind 3), 0 and 10 of the Go client
// (kind 5) and 10 of the lean client (kind 7) back to back, with the syscalls of those processes
// and a few of the other lines of each window. From window 3/1 the lean client's cat's write
// exits were deleted, so that it misses a point. The last window, 5/11, is synthesized: window
// 5/10 moved by 0.1 s with the Go client's ack write (15 bytes, which in 5/10 follows the
// keystroke's 12-byte write) moved before the keystroke, as it comes when the client's ackLoop
// acknowledges the previous echo late: point 0 must still be the keystroke's write.
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
		kindB2BGo:    {2, 2, []float64{415, 415}, []float64{5, 93, 5, 175, 79, 28, 30}}, // keystroke 0 is warm-up; 10 and 11 alike
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
		if len(res.Kinds) != len(want) || res.LostLines != 0 || res.CutWindows != 0 {
			t.Errorf("kinds %v, lost-events lines %d, cut windows %d; want 4, 0, 0", slices.Sorted(maps.Keys(res.Kinds)), res.LostLines, res.CutWindows)
		}
		for kind, w := range want {
			r := res.Kinds[kind]
			if r == nil {
				t.Errorf("kind %d: no windows", kind)
				continue
			}
			if r.Windows != w.windows || r.Complete != w.complete || !slices.Equal(r.Total, w.total) {
				t.Errorf("kind %d: %d windows, %d complete, totals %v; want %d, %d, %v", kind, r.Windows, r.Complete, r.Total, w.windows, w.complete, w.total)
			}
			for j := range w.complete {
				var segs []float64
				for _, s := range r.Segs {
					if len(s) != w.complete {
						t.Fatalf("kind %d: segment samples %v, want %d each", kind, r.Segs, w.complete)
					}
					segs = append(segs, s[j])
				}
				if !slices.Equal(segs, w.segs) {
					t.Errorf("kind %d (cats %v), complete window %d: segments %v, want %v", kind, who.cats, j, segs, w.segs)
				}
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
	if r := res.Kinds[kindB2BGo]; r == nil || r.Windows != 3 || r.Complete != 3 || r.Segs[0][0] != 31 {
		t.Errorf("without skip, Go client windows %+v; want 3, all complete, the first starting with 31 µs", r)
	}
}

// A lost-events line ends the window being built (it is not counted) and is counted itself,
// inside a window or not.
func TestEchotraceLostEvents(t *testing.T) {
	raw, err := os.ReadFile("testdata/echotrace.txt")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for line := range strings.Lines(string(raw)) {
		lines = append(lines, line)
		if strings.Contains(line, "# tracer") {
			lines = append(lines, "CPU:0 [LOST EVENTS]\n") // before any window
		}
		if strings.Contains(line, "42869.762250: sys_enter") { // in window 1/0, the pass-through's
			lines = append(lines, "CPU:1 [LOST 7 EVENTS]\n")
		}
	}
	res, err := analyzeEchoTrace(strings.NewReader(strings.Join(lines, "")), echotraceTestWho, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.LostLines != 2 || res.LostEvents != 7 || res.CutWindows != 1 {
		t.Errorf("lost-events lines %d (%d events), cut windows %d; want 2 (7), 1", res.LostLines, res.LostEvents, res.CutWindows)
	}
	if r := res.Kinds[kindIdlePass]; r != nil {
		t.Errorf("the cut pass-through window counted: %+v", r)
	}
	if r := res.Kinds[kindIdleLean]; r == nil || r.Windows != 2 || r.Complete != 1 {
		t.Errorf("the lean client's windows after the lost events: %+v; want 2, 1 complete", r)
	}
}

// The keystroke's socket write is the WebSocket frame of its bytes: 2 header bytes and a
// 4-byte mask (a client's frames are masked), then 1 byte to the pass-through or a 6-byte input
// frame to the gateway; the lengths seen in testdata/echotrace.txt (7 and c).
func TestEchotraceKeystrokeWriteLen(t *testing.T) {
	for kind, want := range map[int]uint64{kindIdlePass: 7, kindIdleLean: 12, kindB2BGo: 12, kindB2BLean: 12} {
		if got := keystrokeWriteLen(kind); got != want {
			t.Errorf("keystrokeWriteLen(%s, kind %d) = %d, want %d", echotraceKindName(kind), kind, got, want)
		}
	}
}

// A report of echotrace alone says what its figures are (one traced run), not the sentence of
// the repeated sections; a report with other sections keeps that sentence.
func TestEchotraceReportSentence(t *testing.T) {
	for _, tc := range []struct {
		only      []string
		want, not string
	}{
		{[]string{"echotrace"}, "Values come from one traced run", "median over repetitions"},
		{[]string{"echo", "echotrace"}, "median over repetitions", "one traced run"},
		{nil, "median over repetitions", "one traced run"},
	} {
		var sb strings.Builder
		writeMarkdown(&sb, &Report{Config: config{Only: tc.only, Reps: 5}, Details: map[string]any{}})
		if out := sb.String(); !strings.Contains(out, tc.want) || strings.Contains(out, tc.not) {
			t.Errorf("-only %q: the report does not say %q or says %q:\n%s", tc.only, tc.want, tc.not, out)
		}
	}
}

// The section refuses, before it starts anything, when no tracefs root has instances it can
// make one in.
func TestEchotraceRefuses(t *testing.T) {
	dir := t.TempDir()
	noInstances := filepath.Join(dir, "old")
	if err := os.Mkdir(noInstances, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(noInstances, "tracing_on"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &bench{tracefsRoots: []string{filepath.Join(dir, "none"), noInstances},
		report: &Report{Details: map[string]any{}}}
	err := b.runEchotrace(context.Background())
	if err == nil || !strings.Contains(err.Error(), "needs root and a tracefs with writable instances") {
		t.Fatalf("without tracefs instances: %v", err)
	}
	if b.gw != nil || b.pt != nil {
		t.Fatal("a refused section started the gateway or the pass-through")
	}
}

// testGatewayDir is where testGatewayBuild built the gateway; TestMain removes it.
var testGatewayDir string

// testGatewayBuild builds the gateway once for the package's tests.
var testGatewayBuild = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "muxbench-test-gateway-")
	if err != nil {
		return "", fmt.Errorf("build the gateway: %w", err)
	}
	testGatewayDir = dir
	bin := filepath.Join(dir, "gateway")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/muxterm/muxterm/cmd/gateway").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the gateway: %w\n%s", err, out)
	}
	return bin, nil
})

// testGatewayBin is $MUXTERM_BIN, or the gateway built once for these tests.
func testGatewayBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("MUXTERM_BIN"); bin != "" {
		return bin
	}
	bin, err := testGatewayBuild()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// fakeGlobal is the global state of fakeTracefs: what echotrace must never touch.
var fakeGlobal = map[string]string{"tracing_on": "1\n", "set_event": "sched:sched_wakeup\n", "options/record-tgid": "0\n",
	"buffer_size_kb": "7 (expanded: 1408)\n", "trace_clock": "[local] global mono x86-tsc\n", "trace": "someone's lines\n"}

// fakeInstance is what a new instance holds (tracing on, as tracefs makes it).
var fakeInstance = map[string]string{"tracing_on": "1\n", "set_event": "", "options/record-tgid": "0\n",
	"buffer_size_kb": "1410\n", "trace_clock": "[local] global mono x86-tsc\n", "trace": "",
	"per_cpu/cpu0/stats": "entries: 5\noverrun: 3\ncommit overrun: 0\nbytes: 1\ndropped events: 1\nread events: 0\n",
	"per_cpu/cpu1/stats": "entries: 5\noverrun: 10\ncommit overrun: 0\nbytes: 1\ndropped events: 0\nread events: 0\n"}

func writeFiles(t *testing.T, dir string, files map[string]string) error {
	t.Helper()
	for name, s := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// fakeTracefs is a directory of plain files standing in for tracefs (global tracing on:
// someone else traces), and the operations that make and remove an instance in it as tracefs
// would.
func fakeTracefs(t *testing.T) (string, tracefsOps) {
	t.Helper()
	dir := t.TempDir()
	if err := writeFiles(t, dir, fakeGlobal); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "instances"), 0o755); err != nil {
		t.Fatal(err)
	}
	ops := tracefsOps{
		mkdir: func(inst string) error {
			if err := os.Mkdir(inst, 0o755); err != nil {
				return err
			}
			return writeFiles(t, inst, fakeInstance)
		},
		rmdir: func(inst string) error {
			if filepath.Dir(inst) != filepath.Join(dir, "instances") {
				return fmt.Errorf("rmdir %s: not an instance of %s", inst, dir)
			}
			if _, err := os.Stat(inst); err != nil {
				return err
			}
			return os.RemoveAll(inst)
		},
	}
	return dir, ops
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

// ownInstance is this process's instance under the fake tracefs dir.
func ownInstance(dir string) string {
	name, err := instanceName(os.Getpid())
	if err != nil {
		panic(err)
	}
	return filepath.Join(dir, "instances", name)
}

// setup readies the instance (tracing off, the mono clock, record-tgid, the buffer, the
// events, an empty buffer) and nothing global; overruns sums the CPUs' overrun and dropped
// counts; close removes the instance. Opening sweeps the instances of muxbench processes that
// are gone, and only those.
func TestEchotraceInstance(t *testing.T) {
	dir, ops := fakeTracefs(t)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	init1, err := instanceName(1) // a live process's own name
	if err != nil {
		t.Fatal(err)
	}
	// A dead process's, and a live pid's with another start time (the pid was reused).
	stales := []string{fmt.Sprintf("muxbench-%d-1", gone.ProcessState.Pid()), init1 + "0"}
	kept := []string{init1, "muxbench-1", "muxbench-x", "someone-else", fmt.Sprintf("other-%d", gone.ProcessState.Pid())}
	for _, name := range append(stales, kept...) {
		if err := ops.mkdir(filepath.Join(dir, "instances", name)); err != nil {
			t.Fatal(err)
		}
	}
	tfs, err := openTracefs([]string{filepath.Join(dir, "none"), dir}, ops)
	if err != nil {
		t.Fatal(err)
	}
	if tfs.dir != ownInstance(dir) {
		t.Errorf("instance %s, want %s", tfs.dir, ownInstance(dir))
	}
	for _, stale := range stales {
		if _, err := os.Stat(filepath.Join(dir, "instances", stale)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the stale instance %s is still there: %v", stale, err)
		}
	}
	for _, name := range kept {
		if _, err := os.Stat(filepath.Join(dir, "instances", name)); err != nil {
			t.Errorf("swept %s, which is not a dead muxbench's: %v", name, err)
		}
	}
	// A second instance of the same process is refused (mkdir is the lock).
	if _, err := openTracefs([]string{dir}, ops); err == nil || !strings.Contains(err.Error(), "writable instances") {
		t.Errorf("a second open: %v", err)
	}
	if err := tfs.setup(echotraceEvents, 4096); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, "after setup", tfs.dir, map[string]string{"tracing_on": "0", "trace_clock": "mono", "options/record-tgid": "1",
		"buffer_size_kb": "4096", "set_event": strings.Join(echotraceEvents, "\n") + "\n", "trace": ""})
	checkFiles(t, "after setup (global)", dir, fakeGlobal)
	if n, err := tfs.overruns(); err != nil || n != 14 {
		t.Errorf("overruns = %d, %v; want 3+1+10", n, err)
	}
	if err := tfs.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tfs.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the instance is still there after close: %v", err)
	}
	checkFiles(t, "after close (global)", dir, fakeGlobal)
}

// The buffer: 256 MiB shared by the CPUs, at most 64 MiB each.
func TestEchotraceBufferKB(t *testing.T) {
	for cpus, want := range map[int]int{1: 65536, 2: 65536, 4: 65536, 8: 32768, 64: 4096, 0: 65536} {
		if got := echotraceBufferKB(cpus); got != want {
			t.Errorf("echotraceBufferKB(%d) = %d, want %d", cpus, got, want)
		}
	}
}

// fakeTracefsBench is a bench for one echotrace run on a fake tracefs (no root needed).
func fakeTracefsBench(t *testing.T, dir string, ops tracefsOps, args ...string) *bench {
	t.Helper()
	cfg, err := parseFlags(append([]string{"-only", "echotrace", "-gateway", testGatewayBin(t), "-json", ""}, args...))
	if err != nil {
		t.Fatal(err)
	}
	return &bench{cfg: cfg, tagKey: "MUXBENCH_TEST", tagVal: fmt.Sprintf("echotrace-%d", os.Getpid()), log: io.Discard,
		report: &Report{Details: map[string]any{}}, tracefsRoots: []string{dir}, tracefsOps: ops}
}

// A run cancelled while tracing removes its instance, never touched the global files, and
// leaves no process behind.
func TestEchotraceRemovesInstanceOnCancel(t *testing.T) {
	dir, ops := fakeTracefs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := fakeTracefsBench(t, dir, ops, "-echo-idle-n", "1000")
	on := false
	b.tracingOn = func() {
		on = true
		checkFiles(t, "while tracing", ownInstance(dir), map[string]string{"tracing_on": "1", "trace_clock": "mono", "options/record-tgid": "1", "trace": ""})
		cancel()
	}
	err := b.runEchotrace(ctx)
	if cerr := b.cleanup(); cerr != nil {
		t.Errorf("cleanup: %v", cerr)
	}
	if !on || !errors.Is(err, context.Canceled) {
		t.Fatalf("tracing on: %v; the run returned %v, want context.Canceled", on, err)
	}
	if _, err := os.Stat(ownInstance(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the instance outlived the cancelled run: %v", err)
	}
	checkFiles(t, "after the cancelled run (global)", dir, fakeGlobal)
}

// A panic in the section's goroutine while tracing still removes the instance.
func TestEchotraceRemovesInstanceOnPanic(t *testing.T) {
	dir, ops := fakeTracefs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := fakeTracefsBench(t, dir, ops, "-echo-idle-n", "5")
	b.tracingOn = func() { panic("boom") }
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the hook's panic", r)
			}
		}()
		_ = b.runEchotrace(ctx)
	}()
	if cerr := b.cleanup(); cerr != nil {
		t.Errorf("cleanup: %v", cerr)
	}
	if _, err := os.Stat(ownInstance(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the instance outlived the panic: %v", err)
	}
	checkFiles(t, "after the panic (global)", dir, fakeGlobal)
}

// A keystroke whose echo does not come (the cats are stopped) ends the run after the
// per-keystroke deadline, saying so, and removes the instance.
func TestEchotraceKeystrokeDeadline(t *testing.T) {
	dir, ops := fakeTracefs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := fakeTracefsBench(t, dir, ops, "-echo-idle-n", "5", "-idle-pause", "1ms")
	b.echoKeyTimeout = 300 * time.Millisecond
	var stopped []int
	b.tracingOn = func() {
		for _, pid := range taggedProcs(b.tag()) {
			if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(comm)) == "cat" {
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					t.Errorf("stop cat %d: %v", pid, err)
				}
				stopped = append(stopped, pid)
			}
		}
	}
	start := time.Now()
	err := b.runEchotrace(ctx)
	took := time.Since(start)
	for _, pid := range stopped {
		_ = syscall.Kill(pid, syscall.SIGCONT) // so that the hang-up ends them
	}
	if cerr := b.cleanup(); cerr != nil {
		t.Errorf("cleanup: %v", cerr)
	}
	if len(stopped) != 3 {
		t.Errorf("stopped %d cats, want 3", len(stopped))
	}
	if err == nil || !strings.Contains(err.Error(), "keystroke 0 through the pass-through: no echo within 300ms") || ctx.Err() != nil {
		t.Fatalf("the run returned %v (after %v), want the keystroke deadline's error", err, took)
	}
	if _, err := os.Stat(ownInstance(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the instance outlived the failed run: %v", err)
	}
	checkFiles(t, "after the failed run (global)", dir, fakeGlobal)
}

// One real run of the section, tiny. It traces the whole machine's syscalls (in an instance
// of its own), so it runs only when asked: MUXBENCH_ECHOTRACE_TEST=1, as root with tracefs.
// Every segment row has figures in its columns from windows that had every point, the report
// counts lost events, and the instance is gone afterwards.
func TestEchotraceRun(t *testing.T) {
	if os.Getenv("MUXBENCH_ECHOTRACE_TEST") != "1" {
		t.Skip("traces the whole machine with ftrace: set MUXBENCH_ECHOTRACE_TEST=1 to run it (root, tracefs)")
	}
	bin := testGatewayBin(t)
	dir := t.TempDir()
	cfg, err := parseFlags([]string{"-only", "echotrace", "-echo-idle-n", "20", "-echo-n", "20", "-idle-pause", "5ms",
		"-gateway", bin, "-json", filepath.Join(dir, "r.json"), "-echotrace-out", filepath.Join(dir, "trace.txt")})
	if err != nil {
		t.Fatal(err)
	}
	globals := globalTracefs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx, cfg, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if after := globalTracefs(t); !maps.Equal(after, globals) {
		t.Errorf("the global tracefs settings changed: before %v, after %v", globals, after)
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
	if _, ok := rep.Details.Echotrace["lost events"]; !ok {
		t.Errorf("no lost events in the details: %v", slices.Sorted(maps.Keys(rep.Details.Echotrace)))
	}
	own, err := instanceName(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, root := range defaultTracefsRoots {
		if _, err := os.Stat(filepath.Join(root, "instances", own)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the instance in %s outlived the run: %v", root, err)
		}
	}
}

// globalTracefs reads the global tracing settings echotrace must leave alone, from the first
// tracefs root that has them.
func globalTracefs(t *testing.T) map[string]string {
	t.Helper()
	for _, root := range defaultTracefsRoots {
		got := map[string]string{}
		for _, name := range []string{"tracing_on", "trace_clock", "buffer_size_kb", "set_event", "current_tracer", "options/record-tgid"} {
			b, err := os.ReadFile(filepath.Join(root, name))
			if err != nil {
				break
			}
			got[name] = string(b)
		}
		if len(got) == 6 {
			return got
		}
	}
	t.Fatal("no tracefs root with the global settings")
	return nil
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
