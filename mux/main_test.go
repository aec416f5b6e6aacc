package mux

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package on a leaked goroutine or file descriptor.
func TestMain(m *testing.M) {
	// Let the runtime create its poller fds before the baseline.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before := openFDs()
	code := m.Run()
	if code == 0 {
		// Readers close their PTY masters when their reads end, just after the kills return.
		deadline := time.Now().Add(5 * time.Second)
		for openFDs() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if after := openFDs(); after > before {
			fmt.Fprintf(os.Stderr, "leaked file descriptors: %d before, %d after: %v\n", before, after, fdNames())
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

func fdNames() []string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, e.Name()+"="+l)
	}
	return out
}
