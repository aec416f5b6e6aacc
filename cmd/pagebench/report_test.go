package main

import (
	"strings"
	"testing"
	"time"
)

// TestReportRatiosArePerRepetition: a ratio is the median of muxterm/ttyd taken repetition by
// repetition, counts of discards are summed, and every row reaches the Markdown table.
func TestReportRatiosArePerRepetition(t *testing.T) {
	var all []measurement
	for rep, pair := range [][2]float64{{10, 20}, {30, 10}, {20, 20}} {
		for i, s := range []string{"muxterm", "ttyd"} {
			for _, r := range renderers {
				all = append(all, measurement{Server: s, Renderer: r, Rep: rep + 1,
					Idle: []float64{pair[i]}, Bulk: keyResult{KeyMS: pair[i] * 100}, Discards: i})
			}
		}
	}
	rep := buildReport(config{Reps: 3, SeqN: 3000000}, all, time.Unix(0, 0))
	idle := rep.Rows[0]
	if got := idle.Cells["muxterm/dom"].Value; got != 20 {
		t.Errorf("muxterm's median from idle: got %v, want 20", got)
	}
	// Per repetition 0.5, 3 and 1: the median is 1 (the ratio of the medians would be 20/20 too,
	// so check the values).
	if r := idle.Ratio["muxterm/webgl"]; r == nil || r.Value != 1 || len(r.Values) != 3 || r.Values[0] != 0.5 || r.Values[1] != 3 {
		t.Errorf("ratio from idle: got %+v, want the values 0.5, 3, 1 and their median 1", r)
	}
	var discards *Row
	for i := range rep.Rows {
		if strings.HasPrefix(rep.Rows[i].Name, "output discarded") {
			discards = &rep.Rows[i]
		}
	}
	if discards == nil || discards.Cells["ttyd/dom"].Value != 3 || discards.Cells["muxterm/dom"].Value != 0 || len(discards.Ratio) != 0 {
		t.Fatalf("discards row: got %+v, want the sums 0 and 3 and no ratio", discards)
	}
	var md strings.Builder
	writeMarkdown(&md, rep)
	for _, want := range []string{"| key to glyph, from idle, p50 | 20 ms | 20 ms | 1.00× |", "`seq 1 3000000` from Enter", "(sum of 3 runs) | 0 warnings | 3 warnings |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, md.String())
		}
	}
}
