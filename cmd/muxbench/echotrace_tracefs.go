package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/muxterm/muxterm/internal/procfs"
)

// defaultTracefsRoots are where tracefs is looked for, in order.
var defaultTracefsRoots = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// The instance's ring buffer: echotraceBufferTotalKB shared by the CPUs, at most
// echotraceBufferMaxKB each.
const (
	echotraceBufferTotalKB = 256 << 10
	echotraceBufferMaxKB   = 64 << 10
)

// echotraceBufferKB is the ring buffer's size per CPU for a machine of cpus CPUs.
func echotraceBufferKB(cpus int) int {
	return min(echotraceBufferTotalKB/max(cpus, 1), echotraceBufferMaxKB)
}

// echotraceInstancePrefix names muxbench's tracefs instances: instances/muxbench-<pid>-<start
// time in clock ticks since boot>.
const echotraceInstancePrefix = "muxbench-"

// tracefsOps makes and removes an instance directory; tests replace them to stand a directory
// of plain files in for tracefs.
type tracefsOps struct {
	mkdir func(dir string) error // nil: os.Mkdir (tracefs fills the new instance)
	rmdir func(dir string) error // nil: os.Remove (tracefs frees the instance and its buffer)
}

func (o tracefsOps) mk(dir string) error {
	if o.mkdir != nil {
		return o.mkdir(dir)
	}
	return os.Mkdir(dir, 0o700)
}

func (o tracefsOps) rm(dir string) error {
	if o.rmdir != nil {
		return o.rmdir(dir)
	}
	return os.Remove(dir)
}

// tracefs is this process's own instance of tracefs (instances/muxbench-<pid>-<start>), with its own
// ring buffer, events, clock and options: the global trace and its settings are never touched,
// so whoever else traces is not disturbed.
type tracefs struct {
	root string // the tracefs mount
	dir  string // the instance: root/instances/muxbench-<pid>-<start>
	ops  tracefsOps
}

// openTracefs makes this process's instance in the first of roots that is a tracefs with
// writable instances, after removing the instances of muxbench processes no longer alive.
// The caller removes it with close.
func openTracefs(roots []string, ops tracefsOps) (*tracefs, error) {
	var tried []string
	for _, root := range roots {
		inst := filepath.Join(root, "instances")
		if _, err := os.Stat(filepath.Join(root, "tracing_on")); err != nil {
			tried = append(tried, err.Error())
			continue
		}
		if err := sweepTracefsInstances(inst, ops); err != nil {
			tried = append(tried, err.Error())
			continue
		}
		name, err := instanceName(os.Getpid())
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(inst, name)
		if err := ops.mk(dir); err != nil {
			tried = append(tried, err.Error())
			continue
		}
		return &tracefs{root: root, dir: dir, ops: ops}, nil
	}
	return nil, fmt.Errorf("echotrace needs root and a tracefs with writable instances (mount -t tracefs nodev /sys/kernel/tracing): %s", strings.Join(tried, "; "))
}

// sweepTracefsInstances removes the instances muxbench processes that are no longer alive
// left under inst (a process that died before it could: killed, or a crash).
func sweepTracefsInstances(inst string, ops tracefsOps) error {
	entries, err := os.ReadDir(inst)
	if err != nil {
		return fmt.Errorf("tracefs: %w", err)
	}
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), echotraceInstancePrefix)
		if !e.IsDir() || !ok || instanceLive(rest) {
			continue
		}
		if err := ops.rm(filepath.Join(inst, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("tracefs: remove the stale instance %s: %w", e.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// instanceName names the instance of process pid: its pid and start time, so that a pid reused
// by another process does not keep a dead run's instance (the cgroup sweep's rule).
func instanceName(pid int) (string, error) {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return "", fmt.Errorf("echotrace: %w", err)
	}
	return fmt.Sprintf("%s%d-%d", echotraceInstancePrefix, pid, st.StartTime), nil
}

// instanceLive reports whether the process an instance's name (after the prefix) names runs,
// or whether the name is not one of muxbench's (then it is not ours to remove).
func instanceLive(rest string) bool {
	p, start, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(p)
	if !ok || err != nil || pid <= 0 {
		return true
	}
	name, err := instanceName(pid)
	return err == nil && name == echotraceInstancePrefix+p+"-"+start
}

// close removes the instance, and its ring buffer with it.
func (t *tracefs) close() error {
	if err := t.ops.rm(t.dir); err != nil {
		return fmt.Errorf("tracefs: remove the instance %s: %w", t.dir, err)
	}
	return nil
}

// write writes s to the instance's file name, truncating (for set_event and trace: clearing)
// or appending.
func (t *tracefs) write(name, s string, appendTo bool) error {
	flag := os.O_WRONLY | os.O_TRUNC
	if appendTo {
		flag = os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(filepath.Join(t.dir, name), flag, 0)
	if err != nil {
		return fmt.Errorf("tracefs: %w", err)
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("tracefs: write %q to %s: %w", s, name, err)
	}
	return nil
}

// setup readies the instance, tracing off (a new instance traces at once): the mono clock
// (one clock for every CPU, so that events of different CPUs are ordered), the tgid in each
// line, a ring buffer of bufKB per CPU, the events, and an empty buffer.
func (t *tracefs) setup(events []string, bufKB int) error {
	for _, w := range []struct{ name, s string }{
		{"tracing_on", "0"}, {"trace_clock", "mono"}, {"options/record-tgid", "1"},
		{"buffer_size_kb", fmt.Sprint(bufKB)}, {"set_event", ""},
	} {
		if err := t.write(w.name, w.s, false); err != nil {
			return err
		}
	}
	for _, ev := range events {
		if err := t.write("set_event", ev+"\n", true); err != nil {
			return err
		}
	}
	return t.write("trace", "", false)
}

// overruns sums, over the instance's CPUs, the events the ring buffer lost: overwritten
// before they were read ("overrun", "commit overrun") or dropped ("dropped events").
func (t *tracefs) overruns() (int64, error) {
	stats, err := filepath.Glob(filepath.Join(t.dir, "per_cpu", "cpu*", "stats"))
	if err != nil || len(stats) == 0 {
		return 0, fmt.Errorf("tracefs: no per_cpu/cpu*/stats in %s (%v)", t.dir, err)
	}
	var n int64
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, fmt.Errorf("tracefs: %w", err)
		}
		for line := range strings.Lines(string(b)) {
			k, v, ok := strings.Cut(line, ":")
			if !ok || (k != "overrun" && k != "commit overrun" && k != "dropped events") {
				continue
			}
			c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("tracefs: %s: %q: %w", path, line, err)
			}
			n += c
		}
	}
	return n, nil
}
