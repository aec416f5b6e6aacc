package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestJSRetry: a read of the store is tried again while JetStream answers "no responders" or
// "temporarily unavailable", or an attempt runs out of its time; it returns at once on any other
// error; and it gives up with the last error when its caller's deadline ends. Fake time
// (synctest): the backoffs and the attempts' bounds pass at once.
func TestJSRetry(t *testing.T) {
	t.Parallel()
	unavailable := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	for _, tc := range []struct {
		name string
		// fail is the error of call n (from 1), nil once it answers; ctx is the attempt's.
		fail      func(ctx context.Context, n int) error
		deadline  time.Duration // the caller's, 0: none
		wantErr   error         // nil: the answer
		wantCalls int           // 0: at least 2
	}{
		{name: "no responders twice, then an answer", wantCalls: 3,
			fail: func(_ context.Context, n int) error {
				if n < 3 {
					return fmt.Errorf("get info: %w", nats.ErrNoResponders)
				}
				return nil
			}},
		{name: "the meta leader being elected, then an answer", wantCalls: 2,
			fail: func(_ context.Context, n int) error {
				if n == 1 {
					return fmt.Errorf("list: %w", unavailable)
				}
				return nil
			}},
		{name: "an unanswered attempt ends at its own bound", wantCalls: 2,
			fail: func(ctx context.Context, n int) error {
				if n == 1 {
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			}},
		{name: "not found is final", wantErr: jetstream.ErrObjectNotFound, wantCalls: 1,
			fail: func(context.Context, int) error { return jetstream.ErrObjectNotFound }},
		{name: "another API error is final", wantCalls: 1,
			wantErr: &jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound},
			fail: func(context.Context, int) error {
				return &jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound}
			}},
		{name: "no responders until the caller's deadline", deadline: 3 * time.Second, wantErr: nats.ErrNoResponders,
			fail: func(context.Context, int) error { return nats.ErrNoResponders }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				if tc.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
					defer cancel()
				}
				calls := 0
				v, err := jsRetry(ctx, time.Second, func(actx context.Context) (int, error) {
					calls++
					if err := tc.fail(actx, calls); err != nil {
						return 0, err
					}
					return 7, nil
				})
				switch {
				case tc.wantErr == nil && (err != nil || v != 7):
					t.Errorf("got %d, %v; want 7, nil", v, err)
				case tc.wantErr != nil && !errors.Is(err, tc.wantErr) && err.Error() != tc.wantErr.Error():
					t.Errorf("got %v; want %v", err, tc.wantErr)
				case tc.wantCalls > 0 && calls != tc.wantCalls, tc.wantCalls == 0 && calls < 2:
					t.Errorf("%d calls; want %d (0: at least 2)", calls, tc.wantCalls)
				}
				if tc.deadline > 0 && ctx.Err() == nil {
					t.Errorf("returned before the caller's deadline")
				}
			})
		})
	}
}
