package main

import (
	"math"
	"slices"
	"time"
)

// Stat summarises one figure over repetitions: the median and the range.
type Stat struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Values []float64 `json:"values"` // one per repetition, in run order
}

// newStat summarises vs (one value per repetition). It returns nil for no values.
func newStat(vs []float64) *Stat {
	if len(vs) == 0 {
		return nil
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	return &Stat{Median: median(s), Min: s[0], Max: s[len(s)-1], Values: slices.Clone(vs)}
}

// median of sorted values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// quantile returns the nearest-rank q-quantile (0 < q <= 1) of sorted.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// latencies collects durations and reports quantiles in microseconds or milliseconds.
type latencies []time.Duration

func (l latencies) sortedMicros() []float64 {
	out := make([]float64, len(l))
	for i, d := range l {
		out[i] = float64(d.Nanoseconds()) / 1e3
	}
	slices.Sort(out)
	return out
}

// pct holds the latency quantiles of one repetition.
type pct struct {
	P50, P99, P999 float64
	N              int
}

func (l latencies) pct() pct {
	s := l.sortedMicros()
	return pct{P50: quantile(s, 0.50), P99: quantile(s, 0.99), P999: quantile(s, 0.999), N: len(s)}
}

// ratios divides a[i] by b[i] pairwise (the repetitions are interleaved, so pairs ran close
// together in time and share the machine's noise).
func ratios(a, b []float64) []float64 {
	n := min(len(a), len(b))
	out := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		if b[i] != 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}
