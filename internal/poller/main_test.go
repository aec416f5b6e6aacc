package poller

import (
	"testing"

	"github.com/muxterm/muxterm/internal/leakcheck"
)

// TestMain fails the package if a goroutine (a worker) or a file descriptor (an epoll fd, a
// test's pipe) outlives the tests.
func TestMain(m *testing.M) {
	leakcheck.Main(m, leakcheck.Options{FDs: true})
}
