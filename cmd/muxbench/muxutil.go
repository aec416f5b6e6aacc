package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/muxterm/muxterm/client"
)

// openSh opens a session running `sh -c script` on c, tagged with the run's id.
func (b *bench) openSh(ctx context.Context, c *client.Client, script string) (*client.Channel, error) {
	return b.openArgv(ctx, c, []string{"sh", "-c", script})
}

func (b *bench) openArgv(ctx context.Context, c *client.Client, argv []string) (*client.Channel, error) {
	ch, err := c.Open(ctx, b.openOptions(argv))
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", argv, err)
	}
	return ch, nil
}

// openOptions opens argv at 80×24, tagged with the run's id.
func (b *bench) openOptions(argv []string) client.OpenOptions {
	return client.OpenOptions{Cmd: argv, Cols: 80, Rows: 24, Env: map[string]string{b.tagKey: b.tagVal}}
}

// shOptions opens `sh -c script`, tagged with the run's id.
func (b *bench) shOptions(script string) client.OpenOptions {
	return b.openOptions([]string{"sh", "-c", script})
}

// killQuiet kills a session, bounded by a few seconds, for cleanup paths.
func killQuiet(c *client.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = c.Kill(ctx, id)
}

// guard unblocks a Read on ch if ctx ends first: it kills the session (its channel then gets
// session.closed and Read returns io.EOF), and if the gateway does not answer, closes the
// socket. Call the returned stop when the reads are done.
func guard(ctx context.Context, c *client.Client, ch *client.Channel) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		kctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.Kill(kctx, ch.Session()); err != nil {
			c.Close()
		}
	})
}

// readAtLeast reads from ch until n bytes arrived, returning how many it read (the last read
// may overshoot). buf is the read buffer.
func readAtLeast(ctx context.Context, c *client.Client, ch *client.Channel, n int64, buf []byte) (int64, error) {
	stop := guard(ctx, c, ch)
	defer stop()
	var got int64
	for got < n {
		m, err := ch.Read(buf)
		got += int64(m)
		if err != nil {
			if ctx.Err() != nil {
				return got, fmt.Errorf("read %d of %d bytes: %w", got, n, ctx.Err())
			}
			return got, fmt.Errorf("read %d of %d bytes: %w", got, n, err)
		}
	}
	return got, nil
}

// readUntilTimeout bounds readUntil: a prompt that has not come in this long is not coming.
const readUntilTimeout = 30 * time.Second

// readUntil reads from ch until the output contains want and returns everything read. If it
// fails, the session has been killed (or the socket closed) to unblock the read.
func readUntil(ctx context.Context, c *client.Client, ch *client.Channel, want string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, readUntilTimeout)
	defer cancel()
	stop := guard(ctx, c, ch)
	defer stop()
	var out []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(out, []byte(want)) {
		n, err := ch.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return out, fmt.Errorf("wait for %q (got %q): %w", want, tail(out), err)
		}
	}
	return out, nil
}

// waitClosed waits for the channel's session.closed (or the socket's end), which follows a
// kill; output still buffered in the channel is dropped with it.
func waitClosed(ch *client.Channel) error {
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-ch.Closed():
		return nil
	case <-t.C:
		return fmt.Errorf("channel %d (session %s): no session.closed within 10s of its kill", ch.ID, ch.Session())
	}
}

func tail(b []byte) string {
	if len(b) > 80 {
		b = b[len(b)-80:]
	}
	return string(b)
}

// tally counts what a flood received. first is closed at the first byte, or when the flood
// ends without one. Safe for concurrent use.
type tally struct {
	first chan struct{}

	mu    sync.Mutex // guards bytes and seen
	bytes int64
	seen  bool
}

func newTally() *tally { return &tally{first: make(chan struct{})} }

// add counts n bytes.
func (t *tally) add(n int64) {
	if n <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.bytes += n
	if !t.seen {
		t.seen = true
		close(t.first)
	}
}

// end marks the flood over; a flood that received nothing releases first's waiters.
func (t *tally) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.seen {
		t.seen = true
		close(t.first)
	}
}

func (t *tally) count() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bytes
}

func (t *tally) self() *tally { return t }

// windowOf gives measureWindow the first-byte channels and counters of floods (any type that
// embeds a *tally).
func windowOf[F interface{ self() *tally }](fl []F) ([]<-chan struct{}, []func() int64) {
	firsts, counts := make([]<-chan struct{}, len(fl)), make([]func() int64, len(fl))
	for i, f := range fl {
		t := f.self()
		firsts[i], counts[i] = t.first, t.count
	}
	return firsts, counts
}

// flood reads ch until it ends, counting bytes.
type flood struct {
	*tally
	ch   *client.Channel
	done chan struct{}
	err  error
}

func startFlood(ch *client.Channel) *flood {
	f := &flood{tally: newTally(), ch: ch, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		defer f.end()
		buf := make([]byte, 64<<10)
		for {
			n, err := ch.Read(buf)
			f.add(int64(n))
			if err != nil {
				if !errors.Is(err, io.EOF) {
					f.err = err
				}
				return
			}
		}
	}()
	return f
}

// parallel runs fn(0..n-1) on at most limit goroutines and returns the first error.
func parallel(ctx context.Context, n, limit int, fn func(i int) error) error {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := 0; i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return errors.Join(first, ctx.Err())
		}
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
