package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestJSRetry: a read of the store is tried again while JetStream answers "no responders" or an
// attempt runs out of its time, returns at once on any other error, and gives up with the last
// error when its caller's deadline ends.
func TestJSRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	calls := 0
	v, err := jsRetry(ctx, time.Second, func(context.Context) (int, error) {
		calls++
		if calls < 3 {
			return 0, fmt.Errorf("get info: %w", nats.ErrNoResponders)
		}
		return 7, nil
	})
	if v != 7 || err != nil || calls != 3 {
		t.Errorf("two no-responders then an answer: got %d, %v after %d calls; want 7, nil after 3", v, err, calls)
	}

	calls = 0
	_, err = jsRetry(ctx, time.Second, func(actx context.Context) (int, error) {
		calls++
		if calls == 1 {
			<-actx.Done() // an unanswered request: the attempt's own bound ends it
			return 0, actx.Err()
		}
		return 1, nil
	})
	if err != nil || calls != 2 {
		t.Errorf("an attempt that ran out of time: %v after %d calls; want nil after 2", err, calls)
	}

	calls = 0
	_, err = jsRetry(ctx, time.Second, func(context.Context) (int, error) {
		calls++
		return 0, jetstream.ErrObjectNotFound
	})
	if !errors.Is(err, jetstream.ErrObjectNotFound) || calls != 1 {
		t.Errorf("not found: %v after %d calls; want it at once", err, calls)
	}

	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	calls = 0
	_, err = jsRetry(dctx, 0, func(context.Context) (int, error) {
		calls++
		return 0, nats.ErrNoResponders
	})
	if !errors.Is(err, nats.ErrNoResponders) || dctx.Err() == nil || calls < 2 {
		t.Errorf("no responders until the deadline: %v after %d calls (deadline passed: %v); want the last error, after it", err, calls, dctx.Err() != nil)
	}
}
