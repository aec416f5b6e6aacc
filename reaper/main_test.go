package reaper

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives the tests (a session's reader or waiter, a
// reaper loop, a probe), or if a process the tests started is still our child.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(childCheckedM{m})
}

type childCheckedM struct{ m *testing.M }

func (c childCheckedM) Run() int {
	code := c.m.Run()
	if code != 0 {
		return code
	}
	// Every session's child was reaped by its waitLoop before its test's cleanup returned, so
	// no polling is needed here.
	if kids := children(); len(kids) > 0 {
		fmt.Fprintf(os.Stderr, "processes outlived the tests: got children %v, want none\n", kids)
		return 1
	}
	return 0
}

// children lists the processes, in any state, whose parent is this test binary.
func children() []int {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state ppid ...
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == self {
			out = append(out, pid)
		}
	}
	return out
}
