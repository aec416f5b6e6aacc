//go:build e2e

package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
)

// TestIdleKeepAliveConnectionsCannotStarveTheGateway: under a descriptor table of 256, 500
// connections that each did one GET /healthz and then idle must neither fill the table (a real
// client still dials and opens a session while they are there, and the gateway logs that the
// table is nearly full) nor stay open past the idle timeout.
func TestIdleKeepAliveConnectionsCannotStarveTheGateway(t *testing.T) {
	const idle = 3 * time.Second
	// Caps above the table, so that the descriptor reserve is what bounds them.
	g := startGatewayNofile(t, 256, "--http-idle-timeout", idle.String(), "--allow-cmd", "sh",
		"--max-pending-conns", "2000", "--max-pending-per-addr", "2000")
	addr := strings.TrimPrefix(g.Base, "http://")

	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	served := 0
	flood := time.Now().Add(30 * time.Second)
	for i := range 500 {
		if time.Now().After(flood) {
			t.Fatalf("after 30 s only %d of 500 connections were answered: the gateway stopped accepting\n%s", served, tail(g.Logs()))
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			continue // evicted or refused: closed, which is what bounds them
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			served++
		}
		_ = c.SetDeadline(time.Time{})
	}
	if served < 100 {
		t.Errorf("only %d of 500 keep-alive requests were answered 200", served)
	}

	// A real client, while the idle connections are there.
	start := time.Now()
	ctx := ctxT(t, 20*time.Second)
	c, err := client.Dial(ctx, g.WS, client.DialOptions{Token: g.Token})
	if err != nil {
		t.Fatalf("a real client could not dial among idle keep-alive connections: %v\n%s", err, tail(g.Logs()))
	}
	defer c.Close()
	ch, err := c.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"sh", "-c", "echo fd-ok; exec sleep 30"}})
	if err != nil {
		t.Fatalf("open among idle keep-alive connections: %v", err)
	}
	if _, err := ch.ReadUntil(ctx, "fd-ok"); err != nil {
		t.Fatalf("read: %v", err)
	}
	if _, err := c.Kill(ctx, ch.Session()); err != nil {
		t.Fatalf("kill: %v", err)
	}
	t.Logf("dial, open, read and kill took %v among %d answered idle connections", time.Since(start), served)
	if !strings.Contains(g.Logs(), "file descriptor table nearly full") {
		t.Errorf("the gateway did not log that its descriptor table was nearly full")
	}

	// Every idle connection is closed by the gateway within the idle timeout (plus slack).
	deadline := time.Now().Add(idle + 5*time.Second)
	open := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		_, err := io.Copy(io.Discard, c)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			open++
		}
	}
	if open > 0 {
		t.Errorf("%d of %d idle keep-alive connections still open %v after the idle timeout", open, len(conns), 5*time.Second)
	}
}

// tail returns the last 40 lines of s.
func tail(s string) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}
