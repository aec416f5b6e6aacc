package child

import (
	"testing"

	"github.com/muxterm/muxterm/internal/leakcheck"
)

// TestMain fails the package if a goroutine (a waiter's), a file descriptor (its epoll fd, a
// pidfd) or a child process outlives the tests.
func TestMain(m *testing.M) {
	leakcheck.Main(m, leakcheck.Options{FDs: true, Children: true})
}
