package cluster

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/muxterm/muxterm/internal/record"
	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

const id3 = "00112233445566778899aabbccddeeff"

// writeRecording makes a real recording of session id for owner in dir, with output, and
// returns its file, its content and what its header says.
func writeRecording(t *testing.T, dir, id, owner string, output string) (string, []byte, session.RecordingInfo) {
	t.Helper()
	path := session.RecordingPath(dir, id)
	rec, err := record.Create(path, record.Header{Width: 80, Height: 24, Command: "sh", Title: "rec-" + id[:4],
		Muxterm: &record.Origin{Session: id, Owner: owner}}, time.Now(), record.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec.Output([]byte(output))
	rec.Marker("exit 0")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f, info, err := session.OpenRecordingFile(path, id)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, data, info
}

func uploadNow(t *testing.T, n *Node, path string, info session.RecordingInfo) {
	t.Helper()
	n.RecordingEnded(path, info)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.flushUploads(ctx); err != nil {
		t.Fatal(err)
	}
}

// readAll reads recording id through n in pages of page bytes.
func readAll(t *testing.T, n *Node, principal string, admin bool, id string, page int) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []byte
	for {
		res, err := n.ReadRecording(ctx, principal, admin, proto.RecordingReadParams{Recording: id, Offset: int64(len(out)), Length: page})
		if err != nil {
			return out, err
		}
		out = append(out, res.Data...)
		if res.EOF {
			return out, nil
		}
	}
}

// TestRecordingStore: a recording node a uploads is listed and read by node b (which records
// nothing) for its owner and an admin only; another principal's and a random id read alike
// (mux.ErrNotRemote: unknown_session); an object a NATS client without the cluster token
// planted, or whose content it replaced, is neither listed nor played.
func TestRecordingStore(t *testing.T) {
	e := startServer(t)
	a, err := New(Config{NATS: e.ClientURL(), Name: "a", URL: "ws://127.0.0.1:1/ws", Token: "t", TTL: testTTL, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	a.SetRecordings(record.Retention{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := startNode(t, e, "b")
	defer b.Close()

	if rs, err := b.Recordings(ctx, "alice", false, ""); err != nil || len(rs) != 0 {
		t.Fatalf("b's list before any upload: %+v, %v; want none", rs, err)
	}
	dir := t.TempDir()
	path, want, info := writeRecording(t, dir, id1, "alice", strings.Repeat("hello from a\r\n", 100))
	uploadNow(t, a, path, info)

	rs, err := b.Recordings(ctx, "alice", false, "")
	if err != nil || len(rs) != 1 {
		t.Fatalf("alice's list through b: %+v, %v; want the one stored recording", rs, err)
	}
	if r := rs[0]; r.Recording != id1 || r.Bytes != int64(len(want)) || r.Cols != 80 || r.Rows != 24 ||
		r.Name != info.Name || r.Started != info.Started.UnixMilli() || r.Active {
		t.Fatalf("stored recording's facts: %+v, want those of %+v (%d bytes)", r, info, len(want))
	}
	if rs, _ := b.Recordings(ctx, "bob", false, ""); len(rs) != 0 {
		t.Fatalf("bob's list: %+v, want none", rs)
	}
	if rs, _ := b.Recordings(ctx, "root", true, id1); len(rs) != 1 {
		t.Fatalf("an admin's list of %s: %+v, want it", id1, rs)
	}
	got, err := readAll(t, b, "alice", false, id1, 100)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("alice reads through b in 100-byte pages: %d bytes, %v; want the file's %d exactly", len(got), err, len(want))
	}
	if got, err := readAll(t, b, "root", true, id1, proto.MaxRecordingRead); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("an admin reads through b: %d bytes, %v", len(got), err)
	}
	for _, c := range []struct{ who, id string }{{"bob", id1}, {"alice", id3}} {
		if _, err := b.ReadRecording(ctx, c.who, false, proto.RecordingReadParams{Recording: c.id, Length: 10}); !errors.Is(err, mux.ErrNotRemote) {
			t.Fatalf("%s reads %s: %v, want mux.ErrNotRemote (unknown_session)", c.who, c.id, err)
		}
	}

	// A NATS client without the cluster token: a planted object, and id1's content replaced
	// under its own (signed) metadata.
	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, RecordingsBucket)
	if err != nil {
		t.Fatal(err)
	}
	oi, err := obs.GetInfo(ctx, id1)
	if err != nil {
		t.Fatal(err)
	}
	planted := map[string]string{}
	for k, v := range oi.Metadata {
		planted[k] = v
	}
	planted[metaOwner] = "alice"
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: id3, Metadata: planted}, bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if rs, _ := b.Recordings(ctx, "alice", false, ""); len(rs) != 1 || rs[0].Recording != id1 {
		t.Fatalf("alice's list with a planted object: %+v, want only %s", rs, id1)
	}
	if _, err := b.ReadRecording(ctx, "alice", false, proto.RecordingReadParams{Recording: id3, Length: 10}); !errors.Is(err, mux.ErrNotRemote) {
		t.Fatalf("read of the planted object: %v, want mux.ErrNotRemote", err)
	}
	altered := bytes.Replace(want, []byte("hello"), []byte("HELLO"), 1)
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: id1, Metadata: oi.Metadata}, bytes.NewReader(altered)); err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(t, b, "alice", false, id1, 100); err == nil || bytes.Contains(got, []byte("HELLO")) {
		t.Fatalf("read of altered content: %q, %v; want an error and none of it", got, err)
	}
}

// TestRecordingStoreRetention: past the retention's bytes the oldest stored recordings go,
// after the upload that passed it; the bucket's TTL is the retention's age.
func TestRecordingStoreRetention(t *testing.T) {
	e := startServer(t)
	dir := t.TempDir()
	p1, d1, i1 := writeRecording(t, dir, id1, "alice", strings.Repeat("one\r\n", 200))
	p2, d2, i2 := writeRecording(t, dir, id2, "alice", strings.Repeat("two\r\n", 200))
	p3, _, i3 := writeRecording(t, dir, id3, "alice", strings.Repeat("six\r\n", 200))
	a, err := New(Config{NATS: e.ClientURL(), Name: "a", URL: "ws://127.0.0.1:1/ws", Token: "t", TTL: testTTL, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Room for two of the three.
	a.SetRecordings(record.Retention{MaxAge: time.Hour, MaxBytes: int64(len(d1) + len(d2))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	uploadNow(t, a, p1, i1)
	uploadNow(t, a, p2, i2)
	if rs, _ := a.Recordings(ctx, "alice", false, ""); len(rs) != 2 {
		t.Fatalf("two within the bound: %+v", rs)
	}
	uploadNow(t, a, p3, i3)
	rs, err := a.Recordings(ctx, "alice", false, "")
	if err != nil || len(rs) != 2 || rs[0].Recording == id1 || rs[1].Recording == id1 {
		t.Fatalf("after the third upload: %+v, %v; want the two newest", rs, err)
	}
	st, err := a.recs.store.Status(ctx)
	if err != nil || st.TTL() != time.Hour {
		t.Fatalf("bucket's TTL: %v, %v; want 1h", st, err)
	}
	if _, err := os.Stat(filepath.Join(dir, id1+record.Ext)); err != nil {
		t.Fatalf("the local file of a recording removed from the store: %v; want it kept", err)
	}
}

// syncBuffer is a log's destination that the node's goroutines write while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRecordingUploadRetriesThenGoesOn: an upload that keeps failing (a file that is a symbolic
// link, never followed) is tried uploadAttempts times and logged as an error; the next
// recording in the queue is stored all the same.
func TestRecordingUploadRetriesThenGoesOn(t *testing.T) {
	e := startServer(t)
	dir := t.TempDir()
	p1, _, i1 := writeRecording(t, dir, id1, "alice", "one\r\n")
	link := filepath.Join(dir, id2+record.Ext)
	if err := os.Symlink(p1, link); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	a, err := New(Config{NATS: e.ClientURL(), Name: "a", URL: "ws://127.0.0.1:1/ws", Token: "t", TTL: testTTL, Replicas: 1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a.SetRecordings(record.Retention{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	linked := i1
	linked.ID = id2
	a.RecordingEnded(link, linked)
	uploadNow(t, a, p1, i1)
	rs, err := a.Recordings(ctx, "alice", false, "")
	if err != nil || len(rs) != 1 || rs[0].Recording != id1 {
		t.Fatalf("after a failing upload and a good one: %+v, %v; want only %s", rs, err, id1)
	}
	out := logs.String()
	if n := strings.Count(out, "upload failed; retrying"); n != uploadAttempts-1 {
		t.Fatalf("%d retries logged, want %d:\n%s", n, uploadAttempts-1, out)
	}
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "recording="+id2) {
		t.Fatalf("the abandoned upload is not logged as an error naming it:\n%s", out)
	}
}
