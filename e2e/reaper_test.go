//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
)

// TestDroppedSocketGraceResumeThenReap: sessions outlive a dropped socket for the grace, a
// reconnect inside it resumes them byte-exact, and once nobody watches them for longer than
// the grace the reaper closes them: shells gone, PTYs closed, list empty. Ordered by events,
// not by the machine's speed: the resume runs on a gateway whose grace (an hour) no slow
// reconnect can reach, the reap on a second one with a short grace, where slowness can only
// make the reap later, which the test allows.
func TestDroppedSocketGraceResumeThenReap(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	t.Run("resume within the grace", func(t *testing.T) {
		g := startGateway(t, "--allow-cmd", "sh", "--idle-grace", "1h", "--reap-interval", "100ms")
		c1 := g.dial(t)
		want := expectedSeq(30000)
		var ids []string
		var pids []int
		var firsts [][]byte
		var offs []int64
		for range 2 {
			ch, err := c1.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24,
				Cmd: []string{"sh", "-c", "stty raw -echo && seq 1 30000 && exec sleep 300"}})
			if err != nil {
				t.Fatal(err)
			}
			first := readN(ctx, t, ch, 5000)
			ids, pids = append(ids, ch.Session()), append(pids, ch.Pid())
			firsts, offs = append(firsts, first), append(offs, ch.Offset())
		}
		c1.Close() // the socket drops

		c2 := g.dial(t)
		listed := sessionsByID(t, ctx, c2)
		for i, id := range ids {
			if _, ok := listed[id]; !ok {
				t.Fatalf("session %s gone after the drop; list: %v", id, slices.Sorted(maps.Keys(listed)))
			}
			if !testutil.Alive(pids[i]) {
				t.Fatalf("shell %d died with the socket", pids[i])
			}
			off := offs[i]
			ch, res, err := c2.Attach(ctx, id, &off)
			if err != nil {
				t.Fatal(err)
			}
			if res.Offset != off || res.Lost != 0 {
				t.Fatalf("attach: got offset %d lost %d, want %d, 0", res.Offset, res.Lost, off)
			}
			rest := readN(ctx, t, ch, len(want)-len(firsts[i]))
			if got := append(firsts[i], rest...); !bytes.Equal(got, want) {
				t.Fatalf("session %d: resumed stream differs", i)
			}
		}
	})
	t.Run("reaped after the grace", func(t *testing.T) {
		const grace = 3 * time.Second
		g := startGateway(t, "--allow-cmd", "sh", "--idle-grace", grace.String(), "--reap-interval", "100ms")
		gwPid := g.cmd.Process.Pid
		c1 := g.dial(t)
		baseFDs := fdCount(t, gwPid)
		var ids []string
		var pids []int
		for range 2 {
			ch, err := c1.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "exec sleep 300"}})
			if err != nil {
				t.Fatal(err)
			}
			ids, pids = append(ids, ch.Session()), append(pids, ch.Pid())
		}
		abandoned := time.Now() // before the drop: the grace cannot have begun earlier
		c1.Close()              // abandoned for good

		c2 := g.dial(t)
		testutil.WaitFor(t, grace+15*time.Second, "the reaper to close the abandoned sessions", func() bool {
			l, err := c2.List(ctx)
			return err == nil && len(l) == 0
		})
		if took := time.Since(abandoned); took < grace {
			t.Errorf("sessions reaped %v after they were abandoned, before the %v grace", took, grace)
		}
		for _, pid := range pids {
			testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("shell %d to be gone", pid), func() bool { return !testutil.Alive(pid) })
		}
		// The PTY masters are closed: the gateway's fds are back where they were with one socket.
		testutil.WaitFor(t, 5*time.Second, "the gateway's fds back to the baseline", func() bool { return fdCount(t, gwPid) <= baseFDs })
		for _, id := range ids {
			_, _, err := c2.Attach(ctx, id, nil)
			if got := rpcErr(t, err).Kind(); got != "session_closed" && got != "unknown_session" {
				t.Errorf("attach to a reaped session: got %q, want session_closed", got)
			}
		}
	})
}
