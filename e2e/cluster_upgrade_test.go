//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
)

// TestClusterUpgradeInPlace: node a upgrades in place (SIGUSR2, the same binary) while a client
// on b follows a's session through a relay. The relay's socket to a closes with 1012; the relay
// redials a and resumes from the offset it had received, so the client on b keeps its channel
// and reads the sequence byte for byte across the upgrade; b's list shows a's session at every
// poll throughout (a keeps its directory entries across the exec); a's pid is the same.
func TestClusterUpgradeInPlace(t *testing.T) {
	const ttl = 10 * time.Second // an upgrade must take less than 3/4 of it (docs/scaling.md)
	extra := []string{"--cluster-ttl", ttl.String()}
	tc := startClusterWith(t, map[string][]string{"a": extra, "b": extra, "c": extra}, "a", "b", "c")
	a, b := tc.nodes["a"], tc.nodes["b"]
	ca, cb := dialAs(t, a, tc.alice), dialAs(t, b, tc.alice)
	ctx := ctxT(t, 120*time.Second)

	seq, err := ca.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Name: "seq", Cmd: []string{"sh", "-c",
		`stty raw -echo; i=0; while :; do i=$((i+1)); echo $i; [ $((i % 25)) -eq 0 ] && sleep 0.02; done`}})
	if err != nil {
		t.Fatal(err)
	}
	id := seq.Session()
	ca.Close() // a's own client goes: only the relay watches
	waitListed(t, cb, id, "a", 10*time.Second)
	zero := int64(0)
	relayed, res, err := cb.Attach(ctx, id, &zero)
	if err != nil {
		t.Fatalf("attach a's session through b: %v", err)
	}
	if res.Offset != 0 {
		t.Fatalf("attach from 0: offset %d", res.Offset)
	}
	st := &stream{id: id}
	st.follow(relayed)
	st.waitGrowth(t, 20000, 20*time.Second)

	// b's list, polled throughout the upgrade: a's session must be in every answer.
	stopPoll := make(chan struct{})
	var polls, missing int
	var firstMissing string
	var pollWG sync.WaitGroup
	pollWG.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopPoll:
				return
			case <-tick.C:
			}
			l, err := cb.List(ctx)
			if err != nil {
				missing++
				firstMissing = fmt.Sprint(err)
				continue
			}
			polls++
			found := false
			for _, s := range l {
				found = found || s.Session == id && s.Node == "a"
			}
			if !found {
				missing++
				if firstMissing == "" {
					firstMissing = fmt.Sprintf("poll %d: %v", polls, l)
				}
			}
		}
	})

	pid := a.cmd.Process.Pid
	mark := st.len()
	signalled := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	a.waitLog(t, "upgrade complete", 1, 60*time.Second)
	took := time.Since(signalled)
	st.waitGrowth(t, st.len()+20000, 30*time.Second)
	close(stopPoll)
	pollWG.Wait()
	select {
	case err := <-st.ended:
		t.Fatalf("the relayed channel on b ended across a's upgrade: %v (reason %q)", err, relayed.Reason())
	default:
	}
	st.checkExact(t)
	if a.cmd.Process.Pid != pid || !testutil.Alive(pid) {
		t.Fatalf("a's pid changed or died: %d, want %d", a.cmd.Process.Pid, pid)
	}
	if missing > 0 || polls == 0 {
		t.Fatalf("b's list lacked a's session in %d of %d polls during the upgrade (first: %s)", missing, polls+missing, firstMissing)
	}
	t.Logf("a upgraded in %v (SIGUSR2 to its log's upgrade complete); the relayed stream went from %d to %d bytes byte-exact; a's session in all %d of b's lists", took.Round(time.Millisecond), mark, st.len(), polls)
	if !strings.Contains(b.Logs(), "relay: owner restarting; resuming") {
		t.Fatalf("b's log does not show the relay resuming:\n%s", b.Logs())
	}
}
