package mux

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/session"
)

// While another session on the socket awaits the echo of a keystroke, a streaming channel's
// output goes in frames of at most heldFrame bytes, so that the echo, once read, waits behind
// little: frames of the full 32 KiB before the keystroke, small ones after it. Both sessions
// are the test principal's (one owner: the keystroke holds the stream). It runs alone, as when
// the hold was process-wide; a hold is now per owner in a registry, so it would not hold other
// tests' sessions.
func TestHeldOutputGoesInSmallFrames(t *testing.T) {
	frames := make(chan int, 1<<14) // the stream channel's output frames, by payload size
	var streamID atomic.Uint32      // 0, no channel, until the stream is open
	s := newServerWith(t, session.Options{EchoHold: time.Minute}, ServerOptions{
		testHookOutputFrame: func(ch *channel, n int) {
			if ch.id == streamID.Load() {
				select {
				case frames <- n:
				default:
				}
			}
		}}, nil)
	c := s.dialWith(t, client.DialOptions{ManualAck: true})
	ctx := testCtx(t)
	stream, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"sh", "-c", "stty raw -echo; exec yes"}})
	if err != nil {
		t.Fatal(err)
	}
	streamID.Store(stream.ID)
	// The typist never echoes: the hold lasts as long as the test.
	typist, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"sh", "-c", "stty raw -echo; printf R; exec cat >/dev/null"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := typist.ReadUntil(ctx, "R"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	read, unacked := 0, 0 // the stream's bytes read, and those not acknowledged yet
	// stall takes the rest of the stream's window unacknowledged, so the writer stops for
	// credit while the session's ring goes on filling, and waits for 128 KiB more there; then
	// it empties frames (no frame is written while the writer waits for credit).
	stall := func() {
		for unacked < DefaultWindow {
			n, err := stream.Read(buf[:min(len(buf), DefaultWindow-unacked)])
			if err != nil {
				t.Fatal(err)
			}
			read, unacked = read+n, unacked+n
		}
		testutil.WaitFor(t, 10*time.Second, "128 KiB more of the stream in its ring", func() bool {
			l, err := c.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range l {
				if e.Session == stream.Session() {
					return e.End >= int64(read)+128<<10
				}
			}
			return false
		})
		for len(frames) > 0 {
			<-frames
		}
	}
	// resume acknowledges what was read and reads 64 KiB more, acknowledging it as it comes:
	// the writer serves the backlog, whose frames are then in frames.
	resume := func() {
		if err := stream.Ack(unacked); err != nil {
			t.Fatal(err)
		}
		unacked = 0
		for got := 0; got < 64<<10; {
			n, err := stream.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got, read = got+n, read+n
			if err := stream.Ack(n); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Before the keystroke: a backlog goes in full frames.
	stall()
	resume()
	full := 0
	for len(frames) > 0 {
		if <-frames == 32<<10 {
			full++
		}
	}
	if full == 0 {
		t.Fatal("no frame of 32 KiB from a backlog of 128 KiB before the keystroke")
	}
	// After it: the same backlog goes in small frames.
	stall()
	if _, err := typist.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	// A round trip: the server has taken the keystroke once it answers.
	if _, err := c.List(ctx); err != nil {
		t.Fatal(err)
	}
	resume()
	var sizes []int
	for len(frames) > 0 {
		sizes = append(sizes, <-frames)
	}
	if len(sizes) < 16 {
		t.Fatalf("%d frames for 64 KiB of held output, want at least 16: %v", len(sizes), sizes)
	}
	for _, n := range sizes {
		if n > heldFrame {
			t.Errorf("held output in a frame of %d bytes, want at most %d", n, heldFrame)
		}
	}
}
