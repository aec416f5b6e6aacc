package session

import "time"

// Telemetry receives the session package's measurements. Implementations must not block.
type Telemetry interface {
	// BytesOut counts bytes the reader added to a ring.
	BytesOut(n int)
	// Paused records how long a reader was held by backpressure.
	Paused(d time.Duration)
}

type noTelemetry struct{}

func (noTelemetry) BytesOut(int)         {}
func (noTelemetry) Paused(time.Duration) {}
