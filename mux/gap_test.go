package mux

import (
	"bytes"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/proto"
)

// TestAttachFromBeforeTheRingFollowsTheResumeFormula checks protocol.md §3's rule for an attach
// whose from the ring no longer holds: the result says the loss (offset = from + lost), no
// session.gap repeats it, and the resume formula result.offset + n + g lands exactly on the
// session's end, with the bytes received being the output from result.offset on.
func TestAttachFromBeforeTheRingFollowsTheResumeFormula(t *testing.T) {
	s := newServer(t, ServerOptions{}, nil)
	c := s.dial(t)
	ctx := testCtx(t)
	const lines = 300000 // about 2 MB: twice the 1 MiB ring
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		want.WriteString(strconv.Itoa(i))
		want.WriteByte('\n')
	}
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
		Cmd: []string{"sh", "-c", "stty raw -echo && seq 1 " + strconv.Itoa(lines)}})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.reg.Get(ch.Session(), principal)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Detach(ctx); err != nil { // unwatched: the ring drops its oldest bytes
		t.Fatal(err)
	}
	select {
	case <-sess.Exited():
	case <-ctx.Done():
		t.Fatal("the program did not finish printing")
	}
	testutil.WaitFor(t, 10*time.Second, "the reader to reach the end", func() bool { return sess.Info().End == int64(want.Len()) })

	from := int64(0)
	// A raw replay: the resume formula is about bytes (a paint of the screen has no offsets).
	ch2, res, err := c.AttachWith(ctx, ch.Session(), client.AttachOptions{From: &from, Screen: proto.ScreenNever})
	if err != nil {
		t.Fatal(err)
	}
	if res.Offset <= from || res.Lost != res.Offset-from {
		t.Fatalf("attach from %d: offset %d, lost %d; want offset > from and lost = offset - from", from, res.Offset, res.Lost)
	}
	got, err := io.ReadAll(io.LimitReader(ch2, int64(want.Len())-res.Offset))
	if err != nil {
		t.Fatal(err)
	}
	n, g := int64(len(got)), ch2.Lost()
	if g != 0 {
		t.Errorf("session.gap announced %d bytes: the attach's loss is in the result's lost only", g)
	}
	if resume := res.Offset + n + g; resume != int64(want.Len()) {
		t.Errorf("resume formula: offset %d + n %d + g %d = %d, want the end %d", res.Offset, n, g, resume, want.Len())
	}
	if !bytes.Equal(got, want.Bytes()[res.Offset:]) {
		t.Errorf("the %d bytes received are not the output from offset %d on", n, res.Offset)
	}
}
