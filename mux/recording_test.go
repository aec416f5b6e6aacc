package mux

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// TestRecordingsMergeTheCluster: recording.list merges the local recordings with the rest of
// the cluster's, each id once (the local view wins), oldest first; recording.read answers a
// local recording here, another from the Remote, and what neither holds with unknown_session.
func TestRecordingsMergeTheCluster(t *testing.T) {
	const otherID = "ffeeddccbbaa99887766554433221100"
	rem := &fakeRemote{read: map[string][]byte{otherID: []byte("elsewhere\n")}}
	s := newServerWith(t, session.Options{Record: session.RecordOptions{Dir: t.TempDir(), All: true}},
		ServerOptions{Remote: rem, Node: "a"}, nil)
	c := s.dial(t)
	ctx := testCtx(t)
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"/bin/sh", "-c", "printf here"}})
	if err != nil {
		t.Fatal(err)
	}
	id := ch.Session()
	var local proto.RecordingInfo
	// Ended: listed as not active, which says its last event, the exit marker, is in the file.
	testutil.WaitFor(t, 10*time.Second, "the local recording ended", func() bool {
		rs, err := c.Recordings(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 || rs[0].Active {
			return false
		}
		local = rs[0]
		return true
	})
	var b bytes.Buffer
	if _, err := c.ExportRecording(ctx, id, &b); err != nil || !bytes.HasSuffix(b.Bytes(), []byte("\"m\", \"exit 0\"]\n")) || int64(b.Len()) != local.Bytes {
		t.Fatalf("the recording listed as ended (%d bytes): %d bytes read, %v, ending %q", local.Bytes, b.Len(), err, b.Bytes()[max(0, b.Len()-40):])
	}
	rem.mu.Lock()
	rem.recs = []proto.RecordingInfo{
		{Recording: id, Session: id, Started: local.Started, Bytes: 1}, // the same, as the store has it
		{Recording: otherID, Session: otherID, Started: local.Started - 1000, Bytes: 10},
	}
	rem.mu.Unlock()
	rs, err := c.Recordings(ctx, "")
	if err != nil || len(rs) != 2 || rs[0].Recording != otherID || rs[1] != local {
		t.Fatalf("merged list: %+v, %v; want %s then the local %+v", rs, err, otherID, local)
	}
	var buf bytes.Buffer
	if _, err := c.ExportRecording(ctx, otherID, &buf); err != nil || buf.String() != "elsewhere\n" {
		t.Fatalf("read of the cluster's recording: %q, %v", buf.String(), err)
	}
	buf.Reset()
	if _, err := c.ExportRecording(ctx, id, &buf); err != nil || int64(buf.Len()) != local.Bytes || !bytes.Contains(buf.Bytes(), []byte("here")) {
		t.Fatalf("read of the local recording: %d bytes, %v; want its %d", buf.Len(), err, local.Bytes)
	}
	_, err = c.ReadRecording(ctx, "0123456789abcdef0123456789abcde0", 0, 10)
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Kind() != proto.KindUnknownSession {
		t.Fatalf("read of a recording nobody holds: %v, want unknown_session", err)
	}
}
