package main

import (
	"slices"
	"testing"
)

func TestUpgradeTimelineFields(t *testing.T) {
	line := `time=2026-12-01T07:46:31Z level=INFO msg="upgrade timeline" stop=21.63ms quiesce=10.68ms exec=9.3ms decode=6.65ms serve=0s adopt=27.89ms no_accept=27.22ms adopted=1.07674s`
	if got := upgradeTimelineRE.FindString("noise\n" + line + "\nmore"); got != line[len(`time=2026-12-01T07:46:31Z level=INFO `):] {
		t.Fatalf("timeline line %q", got)
	}
	for key, want := range map[string]float64{"no_accept": 27.22, "adopted": 1076.74, "serve": 0, "exec": 9.3, "missing": -1} {
		if got := durationField(line, key); got != want {
			t.Errorf("durationField(%s) = %v, want %v", key, got, want)
		}
	}
}

func TestUpgradeFlags(t *testing.T) {
	c, err := parseFlags([]string{"-only", "upgrade", "-upgrade-sessions", "200"})
	if err != nil {
		t.Fatal(err)
	}
	if c.UpgradeSessions != 200 || !slices.Equal(c.Only, []string{"upgrade"}) {
		t.Fatalf("parsed %d sessions, sections %v", c.UpgradeSessions, c.Only)
	}
	if _, err := parseFlags([]string{"-upgrade-sessions", "7"}); err == nil {
		t.Fatal("-upgrade-sessions below the streaming sessions was accepted")
	}
}
