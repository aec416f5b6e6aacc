package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/muxterm/muxterm/internal/procfs"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat (100 on Linux).
const clockTicks = 100

// procSample is what /proc says about one process at one moment.
type procSample struct {
	CPUSeconds float64 // utime + stime
	RSSKiB     int64   // VmRSS
	Threads    int
	FDs        int // entries in /proc/PID/fd
	PTMX       int // fds open on /dev/ptmx (PTY masters)
}

// sampleProc reads /proc/PID/{stat,status,fd}.
func sampleProc(pid int) (procSample, error) {
	var s procSample
	cpu, err := procCPU(pid)
	if err != nil {
		return s, err
	}
	s.CPUSeconds = cpu
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("read status of %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "VmRSS":
			s.RSSKiB, _ = strconv.ParseInt(f[0], 10, 64)
		case "Threads":
			s.Threads, _ = strconv.Atoi(f[0])
		}
	}
	s.FDs, s.PTMX, err = procFDs(pid)
	return s, err
}

// procCPU returns utime+stime of pid in seconds.
func procCPU(pid int) (float64, error) {
	s, err := procfs.ReadStat(pid)
	if err != nil {
		return 0, err
	}
	return float64(s.Utime+s.Stime) / clockTicks, nil
}

// procFDs counts pid's open fds and those on /dev/ptmx.
func procFDs(pid int) (total, ptmx int, err error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("list fds of %d: %w", pid, err)
	}
	for _, e := range ents {
		if t, err := os.Readlink(dir + "/" + e.Name()); err == nil && t == "/dev/ptmx" {
			ptmx++
		}
	}
	return len(ents), ptmx, nil
}

// zombieChildren counts zombie processes whose parent is pid.
func zombieChildren(pid int) int {
	n := 0
	forEachPid(func(p int) {
		s, err := procfs.ReadStat(p)
		if err != nil {
			return
		}
		if s.State == 'Z' && s.PPID == pid {
			n++
		}
	})
	return n
}

// devPtsEntries counts the PTY slaves that exist system-wide (every /dev/pts entry but ptmx).
// Other programs on the machine open PTYs too, so this is context, not a gateway figure.
func devPtsEntries() int {
	ents, err := os.ReadDir("/dev/pts")
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		if e.Name() != "ptmx" {
			n++
		}
	}
	return n
}

func forEachPid(fn func(pid int)) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			fn(pid)
		}
	}
}

// taggedProcs lists the processes whose environment holds tag ("KEY=VALUE"): every process
// this run started, directly or through the gateway, carries it.
func taggedProcs(tag string) []int {
	var pids []int
	want := []byte(tag)
	self := os.Getpid()
	forEachPid(func(pid int) {
		if pid == self {
			return
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			return
		}
		for kv := range bytes.SplitSeq(b, []byte{0}) {
			if bytes.Equal(kv, want) {
				pids = append(pids, pid)
				return
			}
		}
	})
	return pids
}

// sweepTagged SIGKILLs every process still carrying tag and returns how many there were.
func sweepTagged(tag string) int {
	pids := taggedProcs(tag)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(pids)
}

// machineInfo describes the host for the report.
type machineInfo struct {
	CPUs   int    `json:"cpus"`
	Model  string `json:"model"`
	Kernel string `json:"kernel"`
	MemKiB int64  `json:"mem_kib"`
	Go     string `json:"go"`
}

func readMachine() machineInfo {
	var m machineInfo
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "processor":
				m.CPUs++
			case "model name":
				if m.Model == "" {
					m.Model = strings.TrimSpace(v)
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					m.MemKiB, _ = strconv.ParseInt(f[0], 10, 64)
				}
			}
		}
	}
	return m
}
