package reaper

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelmetric "go.opentelemetry.io/otel/metric"

	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/session"
)

// Options configure a Reaper.
type Options struct {
	Registry *session.Registry // required
	// Grace is how long a session may stay unwatched. Default: 15 minutes.
	Grace time.Duration
	// Interval is the time between sweeps. Default: 30 seconds.
	Interval time.Duration
	// Now is the clock. Default: the registry's clock.
	Now func() time.Time
	// KillTimeout bounds one teardown. Default: 30 seconds.
	KillTimeout time.Duration
	Logger      *slog.Logger
	// OnReap is called after each teardown; it must not block.
	OnReap func(v Victim, res session.KillResult)
	// Telemetry receives the reaper.sweep spans and the reap metrics. Default: otel.Noop().
	Telemetry *otel.Telemetry
}

// Victim is a session selected for reaping.
type Victim struct {
	ID      string
	Session *session.Session
	Reason  session.Reason
}

// Result counts one sweep.
type Result struct {
	Selected int // victims in the snapshot
	Claimed  int // victims claimed and torn down
	Lost     int // victims a reattach (or a kill, a lease, a replacement) saved in between
}

// Reaper sweeps a registry. Its methods are safe for concurrent use.
type Reaper struct {
	opts Options

	// mu guards done.
	mu   sync.Mutex
	done chan struct{} // non-nil once the loop started; closed when it ends

	// testHookAfterSelect runs in Sweep between selection and the claims.
	testHookAfterSelect func([]Victim)
}

// New returns a reaper; Start runs it.
func New(opts Options) *Reaper {
	if opts.Grace <= 0 {
		opts.Grace = 15 * time.Minute
	}
	if opts.Interval <= 0 {
		opts.Interval = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = opts.Registry.Now
	}
	if opts.KillTimeout <= 0 {
		opts.KillTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Telemetry == nil {
		opts.Telemetry = otel.Noop()
	}
	return &Reaper{opts: opts}
}

// Start runs the sweep loop until ctx ends. A second Start while a loop runs does nothing and
// returns false.
func (r *Reaper) Start(ctx context.Context) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		select {
		case <-r.done:
		default:
			return false
		}
	}
	done := make(chan struct{})
	r.done = done
	go r.loop(ctx, done)
	return true
}

// Done is closed when the loop has ended (nil before Start).
func (r *Reaper) Done() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
}

// loop sweeps every Interval until ctx ends; it is the only goroutine Start creates.
func (r *Reaper) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Sweep(ctx)
		}
	}
}

// Select returns the victims at now, from a snapshot, without claiming anything.
func (r *Reaper) Select(now time.Time) []Victim {
	var out []Victim
	for _, s := range r.opts.Registry.Snapshot() {
		if reason, ok := s.ReapReason(now, r.opts.Grace); ok {
			out = append(out, Victim{ID: s.ID(), Session: s, Reason: reason})
		}
	}
	return out
}

// Claim re-checks v at now under the registry and session locks; see session.Registry.Claim.
func (r *Reaper) Claim(v Victim, now time.Time) (session.Reason, bool) {
	return r.opts.Registry.Claim(v.ID, v.Session, now, r.opts.Grace)
}

// Sweep selects, claims and tears down. Teardowns run in parallel with no lock held; Sweep
// returns when they have finished.
func (r *Reaper) Sweep(ctx context.Context) (res Result) {
	tel := r.opts.Telemetry
	ctx, span := tel.Tracer.Start(ctx, otel.SpanReaperSweep)
	defer func() {
		span.SetAttributes(attribute.Int(otel.AttrSelected, res.Selected),
			attribute.Int(otel.AttrClaimed, res.Claimed), attribute.Int(otel.AttrLostReattach, res.Lost))
		span.End()
	}()
	now := r.opts.Now()
	victims := r.Select(now)
	if h := r.testHookAfterSelect; h != nil {
		h(victims)
	}
	res = Result{Selected: len(victims)}
	var wg sync.WaitGroup
	for _, v := range victims {
		reason, ok := r.Claim(v, now)
		if !ok {
			res.Lost++
			tel.Instruments.ClaimsLost.Add(ctx, 1)
			continue
		}
		res.Claimed++
		v.Reason = reason
		wg.Go(func() {
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.KillTimeout)
			defer cancel()
			kr := r.opts.Registry.Teardown(kctx, v.Session)
			tel.Instruments.Reaps.Add(kctx, 1, otelmetric.WithAttributes(attribute.String(otel.AttrReason, string(reason))))
			if why := reapError(kctx, kr); why != "" {
				tel.Instruments.ReaperErrors.Add(kctx, 1, otelmetric.WithAttributes(attribute.String(otel.AttrReason, why)))
			}
			r.opts.Logger.Info("reaped session", "session", v.ID, "reason", string(reason),
				"duration", kr.Duration, "signals", kr.Signals, "escapees", kr.Escapees)
			if r.opts.OnReap != nil {
				r.opts.OnReap(v, kr)
			}
		})
	}
	wg.Wait()
	return res
}

// reapError names what went wrong with a reap's teardown (a survivor, a check that could not be
// made, the kill's time running out), or "" when nothing did.
func reapError(ctx context.Context, kr session.KillResult) string {
	switch {
	case kr.Survivors > 0:
		return otel.ReaperErrSurvivors
	case kr.Unverified > 0:
		return otel.ReaperErrUnverified
	case ctx.Err() != nil:
		return otel.ReaperErrTimeout
	}
	return ""
}
