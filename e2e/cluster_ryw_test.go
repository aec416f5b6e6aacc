//go:build e2e

package e2e

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// TestClusterAttachRightAfterOpen: a session id a client has from session.open is attachable
// through every other node at once (read your writes): 20 opens through a, each attached
// through b and c the instant its result arrives, none answered unknown_session.
func TestClusterAttachRightAfterOpen(t *testing.T) {
	tc := startCluster(t, "a", "b", "c")
	ca, cb, cc := dialAs(t, tc.nodes["a"], tc.alice), dialAs(t, tc.nodes["b"], tc.alice), dialAs(t, tc.nodes["c"], tc.alice)
	ctx := ctxT(t, 90*time.Second)
	misses := 0
	for i := range 20 {
		ch, err := ca.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "exec sleep 600"}})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		for _, c := range []*client.Client{cb, cc} {
			att, _, err := c.Attach(ctx, ch.Session(), nil)
			if err != nil {
				if pe := (*proto.Error)(nil); errors.As(err, &pe) && pe.Kind() == proto.KindUnknownSession {
					misses++
					continue
				}
				t.Fatalf("attach %d: %v", i, err)
			}
			if err := att.Detach(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ca.Kill(ctx, ch.Session()); err != nil {
			t.Fatal(err)
		}
	}
	if misses > 0 {
		t.Errorf("%d of 40 attaches right after their open got unknown_session for a live session", misses)
	}
}

// TestClusterPipeSessionAttachedOnItsNode: a session on pipes is attached through its own node
// only; through another, the attach is refused naming that node (a relay would merge its stderr
// into its output and could not close its stdin), and the session runs on unharmed.
func TestClusterPipeSessionAttachedOnItsNode(t *testing.T) {
	tc := startCluster(t, "a", "b", "c")
	ca, cb := dialAs(t, tc.nodes["a"], tc.alice), dialAs(t, tc.nodes["b"], tc.alice)
	ctx := ctxT(t, 60*time.Second)
	ch, err := ca.Open(ctx, client.OpenOptions{Pipes: true, Cmd: []string{"sh", "-c", "echo out; echo err >&2; exec sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = cb.Attach(ctx, ch.Session(), nil)
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Kind() != proto.KindInvalidRequest || !strings.Contains(pe.Message, "node a") {
		t.Fatalf("attach of a's pipe session through b: %v, want invalid_request naming node a", err)
	}
	again, _, err := dialAs(t, tc.nodes["a"], tc.alice).Attach(ctx, ch.Session(), nil)
	if err != nil {
		t.Fatalf("attach through its own node after the refusal: %v", err)
	}
	if err := again.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Kill(ctx, ch.Session()); err != nil {
		t.Fatal(err)
	}
}
