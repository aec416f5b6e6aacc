package upgrade

import (
	"testing"

	"github.com/muxterm/muxterm/session"
)

func TestHandoverVersionOverride(t *testing.T) {
	defer func(v string) { stateVersion = v }(stateVersion)
	stateVersion = "7"
	if got := handoverVersion(); got != 7 {
		t.Fatalf("handoverVersion() with stateVersion 7 = %d", got)
	}
	stateVersion = "junk"
	if got := handoverVersion(); got != session.HandoverVersion {
		t.Fatalf("handoverVersion() with a bad override = %d, want %d", got,
			session.HandoverVersion)
	}
}
