package main

import (
	"bufio"
	"errors"
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"
)

// helpLine is one flag's line in --help: its name, its environment twin and its default.
var helpLine = regexp.MustCompile(`^  --([a-z-]+)(?: \S+)?\s+(MUXTERM_[A-Z_]+)\s+default: (.*)$`)

// TestHelpDefaultsAreAccepted: every default --help shows as a value (not a description such as
// "the host name") is accepted by the flag's environment twin.
func TestHelpDefaultsAreAccepted(t *testing.T) {
	var help strings.Builder
	if _, err := parse([]string{"--help"}, func(string) string { return "" }, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: got %v, want flag.ErrHelp", err)
	}
	described := map[string]bool{}
	for name := range defaultText {
		described[name] = true
	}
	for name := range clusterDefaultText {
		described[name] = true
	}
	checked := 0
	sc := bufio.NewScanner(strings.NewReader(help.String()))
	for sc.Scan() {
		m := helpLine.FindStringSubmatch(sc.Text())
		if m == nil || described[m[1]] || m[3] == "none" {
			continue
		}
		name, twin, def := m[1], m[2], m[3]
		env := map[string]string{twin: def, "MUXTERM_CLUSTER_TOKEN": strings.Repeat("c", 24)}
		_, err := parse(nil, func(k string) string { return env[k] }, io.Discard)
		if err != nil && strings.HasPrefix(err.Error(), twin+":") {
			t.Errorf("--%s: %s=%q (its default in --help) refused: %v", name, twin, def, err)
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("checked %d flags' defaults, want every flag's (the help format changed?)", checked)
	}
}

// TestSwitchesFromEnvironment: a switch's twin takes on and off (the words --help shows) as well
// as strconv.ParseBool's forms.
func TestSwitchesFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want bool
	}{{"on", true}, {"ON", true}, {"off", false}, {"Off", false}, {"true", true}, {"0", false}, {"1", true}} {
		env := map[string]string{"MUXTERM_METRICS": tc.v}
		c, err := parse(nil, func(k string) string { return env[k] }, io.Discard)
		if err != nil {
			t.Fatalf("MUXTERM_METRICS=%q: %v", tc.v, err)
		}
		if c.metrics != tc.want {
			t.Errorf("MUXTERM_METRICS=%q: got %v, want %v", tc.v, c.metrics, tc.want)
		}
	}
	env := map[string]string{"MUXTERM_METRICS": "maybe"}
	if _, err := parse(nil, func(k string) string { return env[k] }, io.Discard); err == nil || !strings.HasPrefix(err.Error(), "MUXTERM_METRICS:") {
		t.Fatalf("MUXTERM_METRICS=maybe: got %v, want an error naming the variable", err)
	}
}
