package cluster

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/muxterm/muxterm/session"
)

// TestDirectoryFigures measures the directory's write rate (one node's publisher, puts then
// deletes, until a second node has seen them all) and the memory a watched entry costs, for
// docs/scaling.md. A measurement: only with MUXTERM_FIGURES=1.
func TestDirectoryFigures(t *testing.T) {
	if os.Getenv("MUXTERM_FIGURES") != "1" {
		t.Skip("a measurement: set MUXTERM_FIGURES=1")
	}
	e := startServer(t)
	a := startNode(t, e, "a")
	defer a.Close()
	b := startNode(t, e, "b")
	defer b.Close()
	const n = 20000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%032x", i+1)
	}
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	for _, id := range ids {
		a.Observe(session.Event{ID: id, Owner: "principal-x", Name: "a session name", Created: time.Now(), Opened: true})
	}
	waitFor(t, "every put seen by b", 2*time.Minute, func() bool { return len(b.Entries()) == n })
	puts := time.Since(start)
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	// Both nodes' views hold every entry (a watches its own too): half the growth is one view.
	perEntry := float64(m1.HeapAlloc-m0.HeapAlloc) / 2 / n
	start = time.Now()
	for _, id := range ids {
		a.Observe(session.Event{ID: id, Owner: "principal-x", Opened: false})
	}
	waitFor(t, "every delete seen by b", 2*time.Minute, func() bool { return len(b.Entries()) == 0 })
	dels := time.Since(start)
	t.Logf("FIGURE directory: %d puts in %v (%.0f/s), %d deletes in %v (%.0f/s), one node's publisher, R1 embedded server; a watched entry ≈ %.0f B of heap",
		n, puts.Round(time.Millisecond), n/puts.Seconds(), n, dels.Round(time.Millisecond), n/dels.Seconds(), perEntry)
}
