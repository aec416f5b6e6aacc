package main

import (
	"testing"

	"github.com/muxterm/muxterm/internal/leakcheck"
)

// TestMain fails the package on a leaked goroutine, file descriptor or child process.
func TestMain(m *testing.M) {
	leakcheck.Main(m, leakcheck.Options{FDs: true, Children: true})
}
