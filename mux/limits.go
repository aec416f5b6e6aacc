package mux

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/muxterm/muxterm/proto"
)

// This file holds the rate limits that span sockets: input bytes per second per session and
// session.open calls per second per principal (protocol.md §5, data.limit "inputRate" and
// "openRate"). Both are token buckets keyed by a string, shared by every socket of a gateway,
// and both refuse rather than wait: a request over the limit is answered with limit_exceeded
// at once and changes nothing.

// RateLimiter is a set of token buckets, one per key (a session id, a principal). Each bucket
// holds at most Burst tokens and refills at Rate tokens per second; Allow takes n tokens from a
// key's bucket or, if it holds fewer, takes none and refuses. A nil *RateLimiter allows
// everything. It is safe for concurrent use, and no call ever blocks beyond a short critical
// section: there is no waiting for tokens.
type RateLimiter struct {
	// immutable after NewRateLimiter:
	rate  float64          // tokens per second, > 0
	burst float64          // bucket size, >= 1
	fill  time.Duration    // time to refill an empty bucket: a full bucket is forgotten after it
	now   func() time.Time // the clock; time.Now outside tests

	// mu guards buckets and lastSweep. Nothing else is taken under it.
	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

// bucket is one key's tokens as of at. Guarded by RateLimiter.mu.
type bucket struct {
	tokens float64
	at     time.Time
}

// NewRateLimiter returns a limiter of perSecond tokens per second with bursts of up to burst
// tokens per key, or nil (no limit) if perSecond <= 0. A burst below 1 is raised to 1.
func NewRateLimiter(perSecond, burst float64) *RateLimiter {
	if perSecond <= 0 || math.IsNaN(perSecond) || math.IsInf(perSecond, 0) {
		return nil
	}
	burst = max(burst, 1)
	fill := time.Duration(math.Min(burst/perSecond*float64(time.Second), float64(24*time.Hour)))
	return &RateLimiter{rate: perSecond, burst: burst, fill: fill, now: time.Now,
		buckets: make(map[string]*bucket)}
}

// Rate returns the refill rate in tokens per second (0: unlimited).
func (l *RateLimiter) Rate() float64 {
	if l == nil {
		return 0
	}
	return l.rate
}

// Burst returns the bucket size (0: unlimited).
func (l *RateLimiter) Burst() float64 {
	if l == nil {
		return 0
	}
	return l.burst
}

// Allow takes n tokens from key's bucket and reports true, or takes none and reports false if
// the bucket holds fewer than n. A request larger than the burst is never allowed. n <= 0 is
// always allowed and takes nothing.
func (l *RateLimiter) Allow(key string, n float64) bool {
	if l == nil || n <= 0 {
		return true
	}
	if n > l.burst {
		return false
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(now)
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = l.tokensLocked(b, now)
	if now.After(b.at) { // now was read before the lock: never move a bucket's clock back
		b.at = now
	}
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}

// tokensLocked returns b's tokens at now. l.mu must be held.
func (l *RateLimiter) tokensLocked(b *bucket, now time.Time) float64 {
	dt := now.Sub(b.at).Seconds()
	if dt <= 0 {
		return b.tokens // a clock that went back refills nothing
	}
	return math.Min(l.burst, b.tokens+dt*l.rate)
}

// sweepLocked forgets, at most once per refill time, every bucket that is full at now: a full
// bucket behaves exactly like a missing one, so memory stays bounded by the keys active within
// the last refill time. l.mu must be held.
func (l *RateLimiter) sweepLocked(now time.Time) {
	if now.Sub(l.lastSweep) < l.fill {
		return
	}
	l.lastSweep = now
	for k, b := range l.buckets {
		if l.tokensLocked(b, now) >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// keys returns the number of buckets held, for tests.
func (l *RateLimiter) keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// errInputRate is the refusal of an input frame over l (data.limit "inputRate").
func errInputRate(l *RateLimiter) *proto.Error {
	return proto.ErrLimitExceeded("inputRate", fmt.Sprintf(
		"input over %.0f bytes per second (bursts of %.0f) for this session; nothing was written",
		l.Rate(), l.Burst()))
}

// errOpenRate is the refusal of a session.open over l (data.limit "openRate").
func errOpenRate(l *RateLimiter) *proto.Error {
	return proto.ErrLimitExceeded("openRate", fmt.Sprintf(
		"more than %g session.open per second (bursts of %.0f) for this principal; nothing was started",
		l.Rate(), l.Burst()))
}

// withChannel returns a copy of e whose data also names the channel of the frame it answers
// (protocol.md §2: errors about a frame of a known channel carry data.channel).
func withChannel(e *proto.Error, ch uint32) *proto.Error {
	data := make(map[string]any, len(e.Data)+1)
	for k, v := range e.Data {
		data[k] = v
	}
	data["channel"] = ch
	return &proto.Error{Code: e.Code, Message: e.Message, Data: data}
}
