package gateway

import (
	"testing"

	"github.com/muxterm/muxterm/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m, leakcheck.Options{}) }
