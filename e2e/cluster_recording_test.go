//go:build e2e

package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/proto"
)

// startRecordingCluster starts nodes a, b and c, each recording into a directory of its own.
func startRecordingCluster(t *testing.T) (*testCluster, map[string]string) {
	t.Helper()
	dirs := map[string]string{"a": t.TempDir(), "b": t.TempDir(), "c": t.TempDir()}
	extra := map[string][]string{}
	for n, d := range dirs {
		extra[n] = []string{"--record", d}
	}
	return startClusterWith(t, extra, "a", "b", "c"), dirs
}

// A recording made on node a is read through node b: while it is being written (relayed to a),
// once it ended (listed and read byte for byte from the cluster's store), and after a stopped,
// as is the recording of a session a's shutdown ended; an admin reads it too, a read-only
// principal gets forbidden and another principal exactly what a random id gets, through b.
func TestClusterRecordingPlayedThroughAnotherNode(t *testing.T) {
	tc, dirs := startRecordingCluster(t)
	a, b, c := tc.nodes["a"], tc.nodes["b"], tc.nodes["c"]
	ca, cb := dialAs(t, a, tc.alice), dialAs(t, b, tc.alice)
	bobB := dialAs(t, b, tc.bob)
	ctx := ctxT(t, 90*time.Second)

	ch, err := ca.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Name: "clustered",
		Cmd: []string{"sh", "-c", `stty -echo; printf 'recorded on a\n'; read x; printf 'got %s\n' "$x"; exit 0`}})
	if err != nil {
		t.Fatal(err)
	}
	id := ch.Session()
	if _, err := ch.ReadUntil(ctx, "recorded on a"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dirs["a"], id+".cast")

	// Being written on a: b lists it as active and reads it through a.
	waitListed(t, cb, id, "a", 5*time.Second)
	var active proto.RecordingInfo
	testutil.WaitFor(t, 10*time.Second, "the active recording listed through b", func() bool {
		list, err := cb.Recordings(ctx, "")
		if err != nil {
			t.Fatalf("recording.list through b: %v", err)
		}
		for _, r := range list {
			if r.Recording == id && r.Active && r.Bytes > 0 {
				active = r
				return true
			}
		}
		return false
	})
	res, err := cb.ReadRecording(ctx, id, 0, proto.MaxRecordingRead)
	if err != nil {
		t.Fatalf("recording.read of a's active recording through b: %v", err)
	}
	onDisk, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Data) == 0 || !bytes.HasPrefix(onDisk, res.Data) || !strings.Contains(string(res.Data), `"muxterm"`) {
		t.Fatalf("active recording read through b: %q, want a prefix of a's file %q", res.Data, onDisk)
	}
	t.Logf("active recording through b: listed with %d bytes, read %d of a's %d", active.Bytes, len(res.Data), len(onDisk))
	rootB := dialAs(t, b, tc.root)
	if res, err := rootB.ReadRecording(ctx, id, 0, proto.MaxRecordingRead); err != nil || !bytes.HasPrefix(onDisk, res.Data) || len(res.Data) == 0 {
		t.Fatalf("an admin reads alice's active recording through b: %d bytes, %v; want a prefix of a's file", len(res.Data), err)
	}
	carolB := dialAs(t, b, tc.carol)
	if _, err := carolB.Recordings(ctx, ""); kindOf(t, err) != proto.KindForbidden {
		t.Fatalf("a read-only principal lists recordings through b: %v, want forbidden", err)
	}
	if _, err := carolB.ReadRecording(ctx, id, 0, 100); kindOf(t, err) != proto.KindForbidden {
		t.Fatalf("a read-only principal reads a recording through b: %v, want forbidden", err)
	}

	// Its end: stored, and listed through b as ended, with a's file's size.
	if _, err := ch.Write([]byte("bye\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch.Exited():
	case <-ctx.Done():
		t.Fatal("the program did not exit")
	}
	var stored proto.RecordingInfo
	ended := time.Now()
	testutil.WaitFor(t, 20*time.Second, "the ended recording listed through b", func() bool {
		list, err := cb.Recordings(ctx, id)
		if err != nil {
			t.Fatalf("recording.list through b: %v", err)
		}
		if len(list) == 1 && !list[0].Active {
			if st, err := os.Stat(file); err == nil && st.Size() == list[0].Bytes {
				stored = list[0]
				return true
			}
		}
		return false
	})
	t.Logf("exit on a → ended recording listed through b: %v", time.Since(ended))
	if stored.Name != "clustered" || stored.Cols != 80 || stored.Rows != 24 {
		t.Fatalf("stored recording's facts through b: %+v", stored)
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(want), "got bye") {
		t.Fatalf("a's recording lacks the session's end: %q", want)
	}
	export := func(c *client.Client, via string) {
		t.Helper()
		var buf bytes.Buffer
		if _, err := c.ExportRecording(ctx, id, &buf); err != nil {
			t.Fatalf("export through %s: %v", via, err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("export through %s: %d bytes, want a's file's %d bytes exactly (first difference at %d)",
				via, buf.Len(), len(want), firstDiff(buf.Bytes(), want))
		}
	}
	export(cb, "b")
	// a holds it on disk and in the store: listed once, as a sees it.
	if list, err := ca.Recordings(ctx, ""); err != nil || len(list) != 1 || list[0] != stored {
		t.Fatalf("a's own list: %+v, %v; want %s once, as b lists it (%+v)", list, err, id, stored)
	}

	// Another principal: exactly a random id's error, through b; nothing listed.
	fake := randomSessionID()
	_, errOther := bobB.ReadRecording(ctx, id, 0, 100)
	_, errFake := bobB.ReadRecording(ctx, fake, 0, 100)
	if kindOf(t, errOther) != proto.KindUnknownSession || kindOf(t, errFake) != proto.KindUnknownSession ||
		strings.ReplaceAll(errOther.Error(), id, "<id>") != strings.ReplaceAll(errFake.Error(), fake, "<id>") {
		t.Fatalf("bob reads alice's recording through b: %v; a random id: %v; want the same unknown_session", errOther, errFake)
	}
	if list, err := bobB.Recordings(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("bob's recording.list through b: %+v, %v; want none", list, err)
	}
	if list, err := rootB.Recordings(ctx, ""); err != nil || len(list) != 1 || list[0] != stored {
		t.Fatalf("an admin's recording.list through b: %+v, %v; want alice's %+v", list, err, stored)
	}
	export(rootB, "b as an admin")

	// a stops with a session still running: its recording ends with the shutdown and is stored
	// before a leaves; b and c still play both, from the store.
	running := catSession(ctx, t, ca) // its output, READY, read
	a.Stop(15 * time.Second)
	export(cb, "b after a stopped")
	export(dialAs(t, c, tc.alice), "c after a stopped")
	runningFile, err := os.ReadFile(filepath.Join(dirs["a"], running.Session()+".cast"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := cb.Recordings(ctx, running.Session())
	if err != nil || len(list) != 1 || list[0].Active || list[0].Bytes != int64(len(runningFile)) {
		t.Fatalf("the recording a's shutdown ended, listed through b: %+v, %v; want it ended, %d bytes", list, err, len(runningFile))
	}
	var buf bytes.Buffer
	if _, err := cb.ExportRecording(ctx, running.Session(), &buf); err != nil || !bytes.Equal(buf.Bytes(), runningFile) {
		t.Fatalf("the recording a's shutdown ended, through b: %d bytes, %v; want a's file's %d exactly", buf.Len(), err, len(runningFile))
	}
	if !strings.Contains(string(runningFile), "READY") {
		t.Fatalf("a's recording of the running session lacks its output: %q", runningFile)
	}
	if _, err := os.Stat(filepath.Join(dirs["b"], id+".cast")); !os.IsNotExist(err) {
		t.Fatalf("b's own directory holds a's recording (%v): the read must come from the store", err)
	}
}

// A node that crashed with a recorded session running stores that recording when it starts
// again: the cluster then plays it through another node, byte for byte as the crashed node's
// file holds it.
func TestClusterRecordingOfACrashStoredAtRestart(t *testing.T) {
	tc, dirs := startRecordingCluster(t)
	a, b := tc.nodes["a"], tc.nodes["b"]
	ca, cb := dialAs(t, a, tc.alice), dialAs(t, b, tc.alice)
	ctx := ctxT(t, 90*time.Second)

	// One recording ended and stored first: the store exists (its replicas placed on the three).
	first, err := ca.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "echo first"}})
	if err != nil {
		t.Fatal(err)
	}
	// Listed as ended through b is not yet stored (b asks a too): a says when it stored it, in a
	// debug line (the harness starts every gateway with --log-level debug).
	testutil.WaitFor(t, 20*time.Second, "the first recording stored", func() bool {
		for _, l := range strings.Split(a.Logs(), "\n") {
			if strings.Contains(l, `msg="recordings: stored"`) && strings.Contains(l, " recording="+first.Session()+" ") {
				return true
			}
		}
		return false
	})

	ch := catSession(ctx, t, ca)
	id := ch.Session()
	file := filepath.Join(dirs["a"], id+".cast")
	if _, err := ch.Write([]byte("before the crash\r")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the echo in a's recording file", func() bool {
		data, _ := os.ReadFile(file)
		return bytes.Contains(data, []byte("before the crash"))
	})
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}

	restarted := time.Now()
	a = tc.restart("a")
	testutil.WaitFor(t, 30*time.Second, "the crashed session's recording listed through b", func() bool {
		list, err := cb.Recordings(ctx, id)
		if err != nil {
			t.Fatalf("recording.list through b: %v", err)
		}
		return len(list) == 1 && !list[0].Active && list[0].Bytes == int64(len(want))
	})
	t.Logf("a restarted → its crashed session's recording listed through b: %v", time.Since(restarted))
	if logs := a.Logs(); !strings.Contains(logs, "storing those of this node the store lacks") || !strings.Contains(logs, "count=1") {
		t.Fatalf("the restarted node does not say it stored the one recording the store lacked:\n%s", logs)
	}
	var buf bytes.Buffer
	if _, err := cb.ExportRecording(ctx, id, &buf); err != nil || !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("export through b: %d bytes, %v; want a's file's %d exactly", buf.Len(), err, len(want))
	}
}
