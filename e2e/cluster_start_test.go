//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/muxterm/muxterm/cluster"
	"github.com/muxterm/muxterm/internal/testutil"
)

// TestClusterSingleEmbeddedNode: one gateway with an embedded NATS server and no routes (a
// route address given all the same, as --cluster-listen's default does) starts, and serves
// sessions with a directory of one replica.
func TestClusterSingleEmbeddedNode(t *testing.T) {
	tok, ctok := newToken(), newToken()
	natsPort := freePort(t)
	g, l := spawnGateway(t, tok, []string{"MUXTERM_CLUSTER_TOKEN=" + ctok}, "--token", tok,
		"--cluster-embedded", "--cluster-replicas", "1", "--node-name", "solo",
		"--cluster-listen", fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", natsPort, freePort(t)),
		"--cluster-store", t.TempDir(), "--allow-cmd", "sh")
	start := time.Now()
	g.awaitListening(l, 20*time.Second)
	t.Logf("a single embedded node listening after %v", time.Since(start))
	// Logged on stderr before the listening line on stdout; the two pipes are read apart.
	testutil.WaitFor(t, 5*time.Second, "'cluster joined' in the log", func() bool {
		return strings.Contains(g.Logs(), "cluster joined")
	})
	c := dialAs(t, g, tok)
	ctx := ctxT(t, 20*time.Second)
	s := catSession(ctx, t, c)
	if got := catEchoes(ctx, t, s, "solo-echo"); !strings.Contains(got, "solo-echo") {
		t.Fatalf("echo on the single node: got %q", got)
	}
	if n := listed(t, c, s.Session()); n == "" {
		t.Fatalf("the single node's list: session %s missing", s.Session())
	}

	// Its NATS server refuses a client without the credentials derived from the cluster token
	// (another user of the host cannot write the directory or forge heartbeats), and takes one
	// with them.
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	if nc, err := nats.Connect(natsURL, nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatalf("an unauthenticated NATS client connected to the embedded server")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("an unauthenticated NATS client: got %v, want an authorization violation", err)
	}
	if nc, err := nats.Connect(natsURL, nats.Timeout(5*time.Second), nats.UserInfo("muxterm-client", "wrong")); err == nil {
		nc.Close()
		t.Fatalf("a NATS client with a wrong password connected to the embedded server")
	}
	user, pass := cluster.EmbeddedCredentials(ctok, "client")
	nc, err := nats.Connect(natsURL, nats.Timeout(5*time.Second), nats.UserInfo(user, pass))
	if err != nil {
		t.Fatalf("a NATS client with the cluster's credentials: %v", err)
	}
	nc.Close()
}

// TestClusterSIGTERMDuringStart: SIGTERM ends a node at any moment of its start: before its
// signal handler is set, while its embedded NATS server starts (with routes or alone), and
// while it waits for a directory bucket that cannot be created (its routes lead nowhere, so
// JetStream never forms a cluster). It exits at once, with status 0 once it handles the
// signal.
func TestClusterSIGTERMDuringStart(t *testing.T) {
	nowhere := fmt.Sprintf("nats-route://127.0.0.1:%d", freePort(t))
	for _, tc := range []struct {
		name  string
		alone bool             // no routes
		wait  func(g *gateway) // returns when the moment to signal has come
	}{
		{"at once", false, func(*gateway) {}},
		{"after 20ms", false, func(*gateway) { time.Sleep(20 * time.Millisecond) }},
		{"alone after 20ms", true, func(*gateway) { time.Sleep(20 * time.Millisecond) }},
		{"alone after 150ms", true, func(*gateway) { time.Sleep(150 * time.Millisecond) }},
		{"waiting for the directory", false, func(g *gateway) {
			testutil.WaitFor(t, 20*time.Second, "the node waiting for its directory bucket", func() bool {
				return strings.Contains(g.Logs(), "directory bucket not ready")
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, ctok := newToken(), newToken()
			root := testutil.CgroupRoot(t)
			args := []string{"--token", tok, "--cluster-embedded", "--node-name", "lonely", "--cgroup-root", root,
				"--cluster-listen", fmt.Sprintf("127.0.0.1:0,127.0.0.1:%d", freePort(t)), "--cluster-store", t.TempDir()}
			if !tc.alone {
				args = append(args, "--cluster-routes", nowhere)
			}
			g, _ := spawnGateway(t, tok, []string{"MUXTERM_CLUSTER_TOKEN=" + ctok}, args...)
			tc.wait(g)
			signalled := time.Now()
			if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-g.exited:
			case <-time.After(5 * time.Second):
				t.Fatalf("still running 5s after SIGTERM:\n%s", g.Logs())
			}
			took := time.Since(signalled)
			var ee *exec.ExitError
			switch {
			case g.err == nil:
			case errors.As(g.err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGTERM:
				// Signalled before the Go runtime installed any handler: the default action.
			default:
				t.Fatalf("exit after SIGTERM: got %v, want status 0\n%s", g.err, g.Logs())
			}
			if took > 3*time.Second {
				t.Fatalf("exit took %v after SIGTERM, want at once", took)
			}
			t.Logf("exited %v after SIGTERM (%v)", took.Round(time.Millisecond), g.err)
			// A gateway that stopped (after its cgroups were set up, once its runtime caught the
			// signal) leaves no gw-<pid> directory of its own behind.
			if g.err == nil {
				if left, _ := filepath.Glob(filepath.Join(root, "gw-*")); len(left) > 0 {
					t.Errorf("left behind after SIGTERM: %v", left)
				}
			}
		})
	}
}

// TestClusterRoutePortTaken: a node whose route port another socket holds exits at once, saying
// which port and why, instead of waiting for a listener that never comes (the two other nodes of
// its cluster could then never place the directory's three replicas, and said only that).
func TestClusterRoutePortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	tok, ctok := newToken(), newToken()
	g, l := spawnGateway(t, tok, []string{"MUXTERM_CLUSTER_TOKEN=" + ctok}, "--token", tok,
		"--cluster-embedded", "--node-name", "b", "--cluster-listen", fmt.Sprintf("127.0.0.1:0,127.0.0.1:%d", port),
		"--cluster-routes", fmt.Sprintf("nats-route://127.0.0.1:%d", freePort(t)), "--cluster-store", t.TempDir())
	start := time.Now()
	select {
	case <-g.exited:
	case <-l:
		t.Fatalf("listening with its route port taken:\n%s", g.Logs())
	case <-time.After(5 * time.Second):
		t.Fatalf("still starting 5s later with its route port taken:\n%s", g.Logs())
	}
	want := fmt.Sprintf("muxterm: embedded nats: Error listening on router port: %d - listen tcp 127.0.0.1:%d: bind: address already in use", port, port)
	if g.err == nil || !strings.Contains(g.Logs(), want) {
		t.Fatalf("exit %v after %v, want status 1 and %q in:\n%s", g.err, time.Since(start), want, g.Logs())
	}
	t.Logf("exited after %v: %s", time.Since(start).Round(time.Millisecond), want)
}
