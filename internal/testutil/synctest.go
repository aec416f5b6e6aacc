package testutil

import (
	"testing/synctest"
	"time"
)

// Advance moves a synctest bubble's fake clock on by d and returns once every goroutine of the
// bubble is durably blocked again: the timers due within d have run and what they started has
// settled. Call it only inside synctest.Test.
func Advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}
