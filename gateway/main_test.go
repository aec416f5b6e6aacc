package gateway

import (
	"testing"

	"muxterm/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m, leakcheck.Options{}) }
