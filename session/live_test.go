package session

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
)

// TestAttachEndUnderResumeHold: the replay boundary the protocol reports as live
// (AttachInfo.End) is the ring's end when the attach takes effect, also while a resume hold
// keeps the reader paused and the program is blocked in write: what the program had written
// into the PTY and the gateway had not read yet comes after it (no terminal has seen it), and
// the reattaching viewer still reads the whole stream, without a gap.
func TestAttachEndUnderResumeHold(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.ScrollbackBytes = 128 << 10
	opts.ResumeHold = time.Hour // never expires within the test
	r := NewRegistry(opts, nil)
	s, v := openT(t, r, "alice", func() {}, "/bin/sh", "-c", bigScript)
	// The opener reads nothing, and its socket drops: a hold at offset 0.
	v.CloseHolding(0)
	testutil.WaitFor(t, 10*time.Second, "reader paused", func() bool { return isPaused(s) })
	testutil.WaitFor(t, 10*time.Second, "program blocked in write", func() bool { return blockedInWrite(s.Pid()) })
	end := s.Info().End // stable: a paused reader ingests nothing

	wake, wakeFn := testutil.WakeChan()
	v2, info, err := r.Attach(s.ID(), "alice", 0, wakeFn)
	if err != nil {
		t.Fatal(err)
	}
	if info.End != end || info.Offset != 0 || info.Lost != 0 {
		t.Fatalf("attach under the hold: got %+v, want offset 0, nothing lost, end %d (the paused ring's end)", info, end)
	}
	c := collect(t, v2, wake, nil)
	if err := c.waitEnd(t, 30*time.Second); err != io.EOF {
		t.Fatalf("viewer end: got %v, want %v", err, io.EOF)
	}
	var want bytes.Buffer
	for i := range 131072 {
		fmt.Fprintf(&want, "%07d\n", i)
	}
	got, gaps, _ := c.result()
	if len(gaps) != 0 || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("reattached viewer: got %d bytes and gaps %v, want the %d bytes of the program, no gap", len(got), gaps, want.Len())
	}
	if end >= int64(want.Len()) {
		t.Errorf("end at the attach %d: want the program to have printed more after it", end)
	}
}
