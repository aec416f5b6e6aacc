package reaper

import (
	"testing"

	"github.com/muxterm/muxterm/internal/leakcheck"
)

// TestMain fails the package if a goroutine outlives the tests (a session's reader or waiter, a
// reaper loop, a probe), or if a process the tests started is still our child. Every
// session's child was reaped by the session package's waiter before its test's cleanup returned.
func TestMain(m *testing.M) {
	leakcheck.Main(m, leakcheck.Options{Children: true})
}
