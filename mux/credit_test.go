package mux

import (
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/proto"
)

func TestCredit(t *testing.T) {
	// op is one step against a credit: take or give n, then the expected
	// outcome and the expected available() afterwards.
	type op struct {
		take      bool
		n         int64
		wantPanic bool  // take only
		wantErr   error // give only
		wantAvail int64
	}
	take := func(n, avail int64) op { return op{take: true, n: n, wantAvail: avail} }
	takePanics := func(n, avail int64) op { return op{take: true, n: n, wantPanic: true, wantAvail: avail} }
	give := func(n, avail int64) op { return op{n: n, wantAvail: avail} }
	giveFails := func(n, avail int64) op { return op{n: n, wantErr: errAckOverflow, wantAvail: avail} }

	tests := []struct {
		name   string
		window int64
		ops    []op
	}{
		{"fresh window", 100, nil},
		{"take some", 100, []op{take(30, 70), take(70, 0)}},
		{"take zero", 100, []op{take(0, 100)}},
		{"give back", 100, []op{take(100, 0), give(40, 40), give(60, 100)}},
		{"give zero with nothing in flight", 100, []op{give(0, 100)}},
		{"ack with nothing in flight", 100, []op{giveFails(1, 100)}},
		{"ack more than in flight", 100, []op{take(10, 90), giveFails(11, 90), give(10, 100)}},
		{"negative ack", 100, []op{take(10, 90), giveFails(-1, 90)}},
		{"max u32 ack", 262144, []op{take(262144, 0), giveFails(1<<32-1, 0), give(262144, 262144)}},
		{"take beyond window", 100, []op{takePanics(101, 100)}},
		{"take beyond available", 100, []op{take(60, 40), takePanics(41, 40), take(40, 0)}},
		{"take when full", 100, []op{take(100, 0), takePanics(1, 0)}},
		{"negative take", 100, []op{takePanics(-1, 100)}},
		{"window of one", 1, []op{take(1, 0), give(1, 1), take(1, 0)}},
		{"client that never acks gets exactly the window", 262144, []op{
			take(32768, 229376), take(229376, 0), takePanics(1, 0),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCredit(tt.window)
			if got, want := c.available(), tt.window; got != want {
				t.Fatalf("fresh available() = %v, want %v", got, want)
			}
			for i, o := range tt.ops {
				if o.take {
					panicked := testutil.Panics(func() { c.take(o.n) })
					if panicked != o.wantPanic {
						t.Fatalf("op %d: take(%d) panicked = %v, want %v", i, o.n, panicked, o.wantPanic)
					}
				} else if err := c.give(o.n); err != o.wantErr {
					t.Fatalf("op %d: give(%d) = %v, want %v", i, o.n, err, o.wantErr)
				}
				if got := c.available(); got != o.wantAvail {
					t.Fatalf("op %d: available() = %v, want %v", i, got, o.wantAvail)
				}
				if got, want := c.inflight.Load(), tt.window-o.wantAvail; got != want {
					t.Fatalf("op %d: inflight = %v, want %v", i, got, want)
				}
			}
		})
	}
}

func TestNewCreditRefusesBadWindow(t *testing.T) {
	for _, w := range []int64{0, -1} {
		if !testutil.Panics(func() { newCredit(w) }) {
			t.Errorf("newCredit(%d) did not panic, want a panic", w)
		}
	}
}

// TestCreditConcurrent runs one writer and one acking reader against a
// credit, as the write and read loops do; run it with -race.
func TestCreditConcurrent(t *testing.T) {
	const window, chunk, total = 1 << 10, 7, 200_000
	c := newCredit(window)
	sent := make(chan int64, window) // writer → reader: bytes sent, so acks never exceed them
	var wg sync.WaitGroup
	wg.Go(func() { // the writer: sends whenever there is credit
		defer close(sent)
		for n := int64(0); n < total; {
			k := min(chunk, c.available(), total-n)
			if k == 0 {
				runtime.Gosched() // wait for the reader to give credit back
				continue
			}
			c.take(k)
			sent <- k
			n += k
		}
	})
	wg.Go(func() { // the reader: acks everything that was sent
		for k := range sent {
			if err := c.give(k); err != nil {
				t.Errorf("give(%d) = %v, want nil", k, err)
				return
			}
		}
	})
	wg.Wait()
	if got, want := c.available(), int64(window); got != want {
		t.Errorf("available() after all acks = %v, want %v", got, want)
	}
	if err := c.give(1); !errors.Is(err, errAckOverflow) {
		t.Errorf("give(1) with nothing in flight = %v, want %v", err, errAckOverflow)
	}
}

// TestEverySignalNameMaps: each name the protocol accepts reaches a signal here.
func TestEverySignalNameMaps(t *testing.T) {
	for _, name := range proto.Signals {
		if signals[name] == 0 {
			t.Errorf("signal %s: no platform signal", name)
		}
	}
	if got, want := len(signals), len(proto.Signals); got != want {
		t.Errorf("signals mapped: got %d, want %d", got, want)
	}
}
