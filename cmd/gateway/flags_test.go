package main

import (
	"bufio"
	"errors"
	"flag"
	"io"
	"regexp"
	"slices"
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

// TestHelpGroupsEveryFlag: --help lists every flag exactly once, in a group, the groups in the
// order common (listen, token, shell, TLS first), sessions, limits, operations, cluster.
func TestHelpGroupsEveryFlag(t *testing.T) {
	var help strings.Builder
	if _, err := parse([]string{"--help"}, func(string) string { return "" }, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: got %v, want flag.ErrHelp", err)
	}
	listed := map[string]int{}
	var titles []string
	flagLine := regexp.MustCompile(`^  --([a-z-]+)\b`)
	for line := range strings.SplitSeq(help.String(), "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			listed[m[1]]++
		} else if strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " ") {
			titles = append(titles, line)
		}
	}
	grouped := map[string]bool{}
	for _, g := range flagGroups {
		for _, n := range g.names {
			if grouped[n] {
				t.Errorf("--%s is in two groups", n)
			}
			grouped[n] = true
		}
	}
	registered := 0
	(&config{}).flagSet().VisitAll(func(f *flag.Flag) {
		registered++
		if !grouped[f.Name] {
			t.Errorf("--%s is in no group of --help", f.Name)
		}
		if listed[f.Name] != 1 {
			t.Errorf("--%s listed %d times in --help, want once", f.Name, listed[f.Name])
		}
	})
	if registered != len(grouped) {
		t.Errorf("%d flags registered, %d grouped: a group names a flag that does not exist", registered, len(grouped))
	}
	want := []string{"Common:", "Sessions:", "Limits:", "Operations:", "Recordings:", "Cluster (several gateways serving one set of sessions):", "Examples:"}
	if !slices.Equal(titles, want) {
		t.Errorf("--help's sections: got %q, want %q", titles, want)
	}
	if got := flagGroups[0].names[:7]; !slices.Equal(got, []string{"listen", "token", "new-token", "tokens", "shell", "tls-cert", "tls-key"}) {
		t.Errorf("the common group starts %q, want listen, token, shell and TLS first", got)
	}
}
