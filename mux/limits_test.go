package mux

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestLimiter(rate, burst float64) (*RateLimiter, *fakeClock) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := NewRateLimiter(rate, burst)
	l.now = clk.now
	return l, clk
}

func TestRateLimiterBucket(t *testing.T) {
	type step struct {
		advance time.Duration
		key     string
		n       float64
		want    bool
	}
	cases := []struct {
		name        string
		rate, burst float64
		steps       []step
	}{
		{"burst then refuse", 10, 20, []step{
			{0, "a", 20, true}, {0, "a", 1, false}, {100 * time.Millisecond, "a", 1, true}, {0, "a", 1, false},
		}},
		{"refusal takes nothing", 1, 10, []step{
			{0, "a", 8, true}, {0, "a", 5, false}, {0, "a", 2, true}, {0, "a", 1, false},
		}},
		{"keys are independent", 1, 5, []step{
			{0, "a", 5, true}, {0, "a", 1, false}, {0, "b", 5, true}, {0, "b", 1, false},
		}},
		{"refill stops at burst", 100, 10, []step{
			{0, "a", 10, true}, {time.Hour, "a", 10, true}, {0, "a", 1, false},
		}},
		{"larger than burst never", 1000, 10, []step{
			{0, "a", 11, false}, {time.Hour, "a", 11, false}, {0, "a", 10, true},
		}},
		{"zero is free", 1, 1, []step{
			{0, "a", 1, true}, {0, "a", 0, true}, {0, "a", 1, false},
		}},
		{"fractional rate", 0.5, 1, []step{
			{0, "a", 1, true}, {time.Second, "a", 1, false}, {time.Second, "a", 1, true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, clk := newTestLimiter(tc.rate, tc.burst)
			for i, s := range tc.steps {
				clk.advance(s.advance)
				if got := l.Allow(s.key, s.n); got != s.want {
					t.Fatalf("step %d: Allow(%q, %v) got %v, want %v", i, s.key, s.n, got, s.want)
				}
			}
		})
	}
}

func TestRateLimiterNilAllowsEverything(t *testing.T) {
	var l *RateLimiter
	if got := l.Allow("x", 1e12); !got {
		t.Errorf("nil limiter: got %v, want true", got)
	}
	if got := NewRateLimiter(0, 10); got != nil {
		t.Errorf("NewRateLimiter(0, 10): got %v, want nil", got)
	}
	if got, want := l.Rate(), 0.0; got != want {
		t.Errorf("nil Rate: got %v, want %v", got, want)
	}
}

func TestRateLimiterClockBackRefillsNothing(t *testing.T) {
	l, clk := newTestLimiter(10, 10)
	if !l.Allow("a", 10) {
		t.Fatal("first burst refused")
	}
	clk.advance(-time.Hour)
	if got := l.Allow("a", 1); got {
		t.Errorf("after the clock went back: got %v, want false", got)
	}
}

func TestRateLimiterForgetsFullBuckets(t *testing.T) {
	l, clk := newTestLimiter(10, 10) // refills in 1s
	for _, k := range []string{"a", "b", "c"} {
		l.Allow(k, 5)
	}
	if got, want := l.keys(), 3; got != want {
		t.Fatalf("keys: got %d, want %d", got, want)
	}
	clk.advance(2 * time.Second)
	l.Allow("d", 1) // sweeps a, b and c, which are full again
	if got, want := l.keys(), 1; got != want {
		t.Errorf("keys after a refill time: got %d, want %d", got, want)
	}
	// A forgotten key starts full, exactly as it would have been.
	if got := l.Allow("a", 10); !got {
		t.Errorf("forgotten key: got %v, want true", got)
	}
}

func TestRateLimiterConcurrentNeverOverspends(t *testing.T) {
	l, _ := newTestLimiter(1, 1000) // the fake clock never moves: exactly 1000 tokens exist
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 8 {
		wg.Go(func() {
			for range 500 {
				if l.Allow("k", 1) {
					mu.Lock()
					granted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if granted != 1000 {
		t.Errorf("granted %d tokens, want 1000", granted)
	}
}
