package procfs

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseStatCommWithSpacesAndParens(t *testing.T) {
	line := "4242 (a) b (c)) S 17 4242 4242 34816 4242 4194304 100 0 0 0 7 3 0 0 20 0 1 0 123456 1000 200 18446744073709551615\n"
	s, err := ParseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := Stat{PID: 4242, Comm: "a) b (c)", State: 'S', PPID: 17, PGRP: 4242, Session: 4242, Utime: 7, Stime: 3, StartTime: 123456}
	if s != want {
		t.Fatalf("got %+v, want %+v", s, want)
	}
}

func TestParseStatMalformed(t *testing.T) {
	for _, in := range []string{"", "12 comm S 1", "12 (x) S 1 2", "x (c) S 1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0", "12 (c) S one 1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"} {
		if _, err := ParseStat([]byte(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestReadStatOfSelfAndChild(t *testing.T) {
	self, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.PID != os.Getpid() || self.PPID != os.Getppid() || self.Zombie() {
		t.Fatalf("self: %+v (pid %d, ppid %d)", self, os.Getpid(), os.Getppid())
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Wait for the exit without reaping (WNOWAIT): the child stays a zombie of this process.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	c, err := ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Zombie() {
		t.Fatalf("exited child: state %c, want Z", c.State)
	}
	if c.PPID != os.Getpid() || c.StartTime < self.StartTime {
		t.Fatalf("child: %+v, self start %d", c, self.StartTime)
	}
	_ = cmd.Wait()
	if _, err := ReadStat(pid); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("reaped child: got %v, want ErrNotExist", err)
	}
}

func TestPidsAndFDs(t *testing.T) {
	pids, err := Pids()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, os.Getpid()) || !slices.Contains(pids, 1) {
		t.Fatalf("Pids: %d pids, want this one (%d) and 1 among them", len(pids), os.Getpid())
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fds, err := FDs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(int(f.Fd()))
	if !slices.Contains(fds, want) {
		t.Fatalf("FDs: %v, want %s (an open %s) among them", fds, want, os.DevNull)
	}
	if target, err := os.Readlink("/proc/self/fd/" + want); err != nil || target != os.DevNull {
		t.Fatalf("fd %s: links to %q (%v), want %s", want, target, err, os.DevNull)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := FDs(cmd.Process.Pid); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("FDs of a reaped child: got %v, want ErrNotExist", err)
	}
}
