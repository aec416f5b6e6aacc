//go:build e2e

package e2e

// Retention of recordings by size (--record-max-bytes, internal/record's Prune): enforced when
// the gateway starts, and when the new image of an upgrade in place starts.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/record"
	"github.com/muxterm/muxterm/internal/testutil"
)

// plantRecording writes an ended recording of session id into dir, size bytes long (a header
// naming the session, then output), modified at mod, and returns its path.
func plantRecording(t *testing.T, dir, id string, size int, mod time.Time) string {
	t.Helper()
	h, err := json.Marshal(record.Header{Version: 2, Width: 80, Height: 24, Timestamp: mod.Unix(),
		Muxterm: &record.Origin{Session: id, Owner: "planted"}})
	if err != nil {
		t.Fatal(err)
	}
	head := string(h) + "\n" + `[0.100000, "o", "`
	tail := `"]` + "\n"
	body := head + strings.Repeat("x", size-len(head)-len(tail)) + tail
	p := filepath.Join(dir, id+record.Ext)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	touch(t, p, mod)
	return p
}

// touch sets p's modification time, the age retention goes by.
func touch(t *testing.T, p string, mod time.Time) {
	t.Helper()
	if err := os.Chtimes(p, mod, mod); err != nil {
		t.Fatal(err)
	}
}

// checkExist fails t for each path whose existence is not the one wanted.
func checkExist(t *testing.T, when string, want map[string]bool) {
	t.Helper()
	for p, w := range want {
		if _, err := os.Stat(p); (err == nil) != w {
			t.Errorf("%s: %s exists %v, want %v", when, filepath.Base(p), err == nil, w)
		}
	}
}

// --record-max-bytes at start: ended recordings go oldest first (by modification time) until
// those left are within the bound, and no further; a file that is no recording (not *.cast)
// neither goes nor counts, however big and old; a recording written to in the last minute stays
// even while the total exceeds the bound. The new image of an upgrade in place enforces the
// bound at its start too, and a running session's recording stays (the upgrade's marker was
// just written to it, so the minute's rule keeps it as well: record.TestPrune holds the running
// rule alone).
func TestRecordingMaxBytesAtStart(t *testing.T) {
	const size = 4 << 10
	dir := t.TempDir()
	now := time.Now()
	id := func(c string) string { return strings.Repeat(c, 32) }
	a := plantRecording(t, dir, id("a"), size, now.Add(-4*time.Hour))
	b := plantRecording(t, dir, id("b"), size, now.Add(-3*time.Hour))
	c := plantRecording(t, dir, id("c"), size, now.Add(-2*time.Hour))
	d := plantRecording(t, dir, id("d"), size, now.Add(-time.Hour))
	e := plantRecording(t, dir, id("e"), size, now) // its end was written just now
	notes := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notes, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	touch(t, notes, now.Add(-5*time.Hour))

	// 20 KiB of recordings, a bound of 12 KiB: a and b go, which leaves 16 KiB, then 12 KiB,
	// which does not exceed it. Retention runs before the gateway prints that it listens, which
	// startGateway waits for.
	g := startGateway(t, "--record", dir, "--record-max-bytes", "12KiB")
	checkExist(t, "a bound of 12 KiB", map[string]bool{a: false, b: false, c: true, d: true, e: true, notes: true})
	// Its log line is on stderr, which may be read after the listening line on stdout.
	g.waitLog(t, fmt.Sprintf(`msg="recordings: removed by retention" files=2 bytes=%d`, 2*size), 1, 10*time.Second)
	g.Stop(10 * time.Second)

	// A bound of 1 KiB: c and d go; e, written to within the minute, stays over the bound.
	touch(t, e, time.Now())
	g = startGateway(t, "--record", dir, "--record-max-bytes", "1KiB", "--allow-cmd", "*")
	defer g.Stop(10 * time.Second)
	checkExist(t, "a bound of 1 KiB", map[string]bool{c: false, d: false, e: true, notes: true})

	// A running session whose recording alone exceeds the bound, an ended recording planted
	// meanwhile, and an upgrade in place: its new image removes f, not the running one.
	ctx := ctxT(t, 60*time.Second)
	cl := g.dial(t)
	ch, err := cl.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"/bin/sh", "-c",
		`stty -echo; head -c 2048 /dev/zero | tr '\0' x; printf READY; exec cat >/dev/null`}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.ReadUntil(ctx, "READY"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the running recording over the bound", func() bool {
		l, err := cl.Recordings(ctx, ch.Session())
		return err == nil && len(l) == 1 && l[0].Active && l[0].Bytes > 1<<10
	})
	running := filepath.Join(dir, ch.Session()+record.Ext)
	f := plantRecording(t, dir, id("f"), size, time.Now().Add(-time.Hour))
	touch(t, e, time.Now())
	if err := g.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, "upgrade complete", 1, 60*time.Second) // logged after the new image's retention
	checkExist(t, "after the upgrade in place", map[string]bool{f: false, running: true, e: true, notes: true})
	l, err := g.dial(t).Recordings(ctx, ch.Session())
	if err != nil || len(l) != 1 || !l[0].Active {
		t.Fatalf("recording.list of the running session after the upgrade: %+v, %v; want it, active", l, err)
	}
}
