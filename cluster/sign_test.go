package cluster

import (
	"testing"
	"time"
)

// TestSignerEntriesAndHeartbeats: a signed entry or heartbeat verifies under the same cluster
// token only; one moved to another key, changed in any field, or signed with the NATS password
// (what a NATS operator holds) does not.
func TestSignerEntriesAndHeartbeats(t *testing.T) {
	s := newSigner("cluster-token")
	e := s.signEntry("s.a.id1", Entry{Principal: "alice", Name: "n", Created: time.Unix(1, 5).UTC(), State: "running", Boot: "1-2"})
	if !s.entryOK("s.a.id1", e) {
		t.Fatal("a signed entry does not verify")
	}
	if s.entryOK("s.b.id1", e) || s.entryOK("s.a.id2", e) {
		t.Error("an entry verifies under another key")
	}
	changed := e
	changed.Principal = "bob"
	if s.entryOK("s.a.id1", changed) {
		t.Error("an entry with another principal verifies")
	}
	_, pass := EmbeddedCredentials("cluster-token", "client")
	if s.entryOK("s.a.id1", newSigner(pass).signEntry("s.a.id1", e)) {
		t.Error("an entry signed with the NATS password verifies")
	}
	if newSigner("other").entryOK("s.a.id1", e) {
		t.Error("an entry verifies under another cluster token")
	}
	hb := s.signHeartbeat(heartbeat{Node: "a", URL: "ws://127.0.0.1:1/ws", Boot: "1-2", Sessions: 3})
	if !s.heartbeatOK(hb) {
		t.Fatal("a signed heartbeat does not verify")
	}
	hb.URL = "ws://127.0.0.1:2/ws"
	if s.heartbeatOK(hb) {
		t.Error("a heartbeat with another URL verifies")
	}
	if s.heartbeatOK(heartbeat{Node: "a", URL: "ws://127.0.0.1:1/ws", Boot: "1-2", Sessions: 3}) {
		t.Error("an unsigned heartbeat verifies")
	}
}
