package main

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestCreatedText(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return now.Add(-d).Format(time.RFC3339Nano) }
	for _, tc := range []struct{ in, want string }{
		{at(1500 * time.Millisecond), "1s ago"},
		{at(59 * time.Second), "59s ago"},
		{at(5*time.Minute + 3*time.Second), "5m ago"},
		{at(23*time.Hour + 59*time.Minute), "23h ago"},
		{at(48 * time.Hour), now.Add(-48 * time.Hour).Local().Format(time.DateTime)},
		{"2026-12-04T11:59:58.123456789Z", "1s ago"},
		{"not a time", "not a time"},
	} {
		if got := createdText(tc.in, now); got != tc.want {
			t.Errorf("createdText(%q): got %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFitTable(t *testing.T) {
	rows := [][]string{
		{"ID", "NAME", "PID", "CMD"},
		{"abcdefghij", "build", "1234", "make test --with a long tail"},
		{"k", "-", "5", "(shell)"},
	}
	full := fitTable(rows, 0, []int{2})
	want := "ID          NAME   PID   CMD\n" +
		"abcdefghij  build  1234  make test --with a long tail\n" +
		"k           -      5     (shell)\n"
	if full != want {
		t.Errorf("unbounded:\n%s\nwant:\n%s", full, want)
	}
	if got := fitTable(rows, 80, []int{2}); got != full {
		t.Errorf("within 80 columns it changed:\n%s", got)
	}
	// 40 columns: PID goes, then the lines are cut with an ellipsis.
	got := fitTable(rows, 40, []int{2})
	for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if n := utf8.RuneCountInString(l); n > 40 {
			t.Errorf("line of %d columns in 40: %q", n, l)
		}
	}
	if strings.Contains(got, "PID") || !strings.Contains(got, "abcdefghij  build  make test --with a l…") {
		t.Errorf("40 columns: got\n%s", got)
	}
}
