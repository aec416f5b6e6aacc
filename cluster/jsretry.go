package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsAttempt bounds one attempt of a read of the store within its caller's deadline.
const jsAttempt = opTimeout / 2

// jsRetry runs op until it succeeds, fails for good, or ctx ends; ctx must carry a deadline. While
// a stream's leader or JetStream's meta leader is being elected (a store just created, a node
// just started or lost), JetStream answers "no responders" or "JetStream system temporarily
// unavailable" (jsTransient), or a request goes unanswered: each attempt gets at most attempt of
// ctx's time (0: all of it), and those failures are tried again after a backoff (50 ms, doubling
// to 1 s). Any other answer (not found included) is returned at once; the last attempt's error
// when ctx ends.
func jsRetry[T any](ctx context.Context, attempt time.Duration, op func(context.Context) (T, error)) (T, error) {
	backoff := 50 * time.Millisecond
	for {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if attempt > 0 {
			actx, cancel = context.WithTimeout(ctx, attempt)
		}
		v, err := op(actx)
		cancel()
		if err == nil || !jsTransient(err) || ctx.Err() != nil {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// jsTransient reports whether err is a failure jsRetry tries again: no responders, an
// unanswered request, or the API's answer while JetStream's meta layer has no leader (code
// 10008, nats-server's JSClusterNotAvailErr).
func jsTransient(err error) bool {
	var ae *jetstream.APIError
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &ae) && ae.ErrorCode == jetstream.ErrorCode(server.JSClusterNotAvailErr)
}

// listStore lists the store's objects, tried again as jsRetry does.
func listStore(ctx context.Context, obs jetstream.ObjectStore) ([]*jetstream.ObjectInfo, error) {
	return jsRetry(ctx, jsAttempt, func(ctx context.Context) ([]*jetstream.ObjectInfo, error) { return obs.List(ctx) })
}
