package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/muxterm/muxterm/internal/procfs"
)

// streamMeter measures the load that typing is timed under: what the streaming terminal's `yes`
// wrote into its PTY (/proc/PID/io's wchar). Over seconds that is what the server took from it:
// the PTY between them holds at most about 68 KiB, full at both ends of the window while the
// program outruns its reader. So the two servers' typing figures can be read against the load
// each carried.
type streamMeter struct {
	pid   int
	start uint64 // the process's start time: a pid reused meanwhile is not it
	at    time.Time
	wchar int64
}

// startStreamMeter finds the `yes` started last under this process (each server is a child of
// pagebench, its shell's `yes` a descendant; one that ends with its page may not be gone yet)
// and reads its count.
func startStreamMeter() (*streamMeter, error) {
	pids, err := procfs.Pids()
	if err != nil {
		return nil, fmt.Errorf("find the streaming yes: %w", err)
	}
	self := os.Getpid()
	var newest procfs.Stat
	for _, pid := range pids {
		st, err := procfs.ReadStat(pid)
		if err == nil && st.Comm == "yes" && !st.Zombie() && descends(st, self) && st.StartTime >= newest.StartTime {
			newest = st
		}
	}
	if newest.PID == 0 {
		return nil, errors.New("find the streaming yes: none runs under pagebench")
	}
	m := &streamMeter{pid: newest.PID, start: newest.StartTime, at: time.Now()}
	if m.wchar, err = wchar(m.pid); err != nil {
		return nil, err
	}
	return m, nil
}

// descends reports whether the process of st is a descendant of pid.
func descends(st procfs.Stat, pid int) bool {
	for range 64 {
		if st.PPID == pid {
			return true
		}
		if st.PPID <= 1 {
			return false
		}
		var err error
		if st, err = procfs.ReadStat(st.PPID); err != nil {
			return false
		}
	}
	return false
}

// rate is what `yes` wrote since the meter started, in MiB/s.
func (m *streamMeter) rate() (float64, error) {
	w, err := wchar(m.pid)
	if err != nil {
		return 0, err
	}
	if st, err := procfs.ReadStat(m.pid); err != nil || st.StartTime != m.start {
		return 0, fmt.Errorf("the streaming yes (pid %d) ended while it was measured", m.pid)
	}
	return float64(w-m.wchar) / (1 << 20) / time.Since(m.at).Seconds(), nil
}

// wchar reads the bytes pid has written (/proc/PID/io).
func wchar(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return 0, fmt.Errorf("read the streaming yes's I/O counts: %w", err)
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("wchar:")); ok {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read /proc/%d/io: %w", pid, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/io has no wchar", pid)
}
