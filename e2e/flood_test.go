//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/internal/testutil"
)

// TestIdleFloodFromSeveralAddressesCannotStarveAClient: under a descriptor table of 512, 700
// idle connections from 127.0.0.2–.9 (at most 88 per address, under the per-address cap), three
// in four after one keep-alive GET /healthz and the rest having sent nothing, each dialled again
// as soon as the gateway closes it, must not keep a real client out: 18 times in a row, while
// they are there, a client dials, attaches to a session and reads its input echoed within 1 s.
// The gateway makes room by evicting idle connections before the table is full, and when an
// accept fails for want of a descriptor it evicts and accepts again at once rather than leaving
// net/http to back off (up to 1 s a time) with the client waiting in the backlog.
func TestIdleFloodFromSeveralAddressesCannotStarveAClient(t *testing.T) {
	const (
		floodConns = 700
		addrs      = 8 // 127.0.0.2 to 127.0.0.9
		trials     = 18
		within     = time.Second
	)
	g := startGatewayNofile(t, 512, "--allow-cmd", "cat")
	addr := strings.TrimPrefix(g.Base, "http://")

	// The session every trial attaches to, opened before the flood.
	ctx := ctxT(t, 2*time.Minute)
	owner := g.dial(t)
	sess, err := owner.Open(ctx, client.OpenOptions{Cols: 80, Rows: 24, Cmd: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	id := sess.Session()

	// The flood: one goroutine per connection slot dials, maybe sends a request, then waits for
	// the gateway to close the connection and dials again, until stop (at most 60 s and 100
	// dials a slot, with a 100 ms pause between dials so that it cannot spin).
	floodCtx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	var (
		wg              sync.WaitGroup
		dials, answered atomic.Int64
		openNow         atomic.Int64
		connsMu         sync.Mutex
		conns           = map[net.Conn]struct{}{}
	)
	defer func() {
		start := time.Now()
		defer func() { t.Logf("the flood ended in %v", time.Since(start).Round(time.Millisecond)) }()
		stop()
		connsMu.Lock()
		for c := range conns {
			c.Close()
		}
		connsMu.Unlock()
		wg.Wait()
	}()
	slot := func(i int) {
		defer wg.Done()
		d := net.Dialer{Timeout: 5 * time.Second,
			LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%addrs))}}
		for range 100 {
			if floodCtx.Err() != nil {
				return
			}
			c, err := d.DialContext(floodCtx, "tcp", addr)
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			dials.Add(1)
			connsMu.Lock()
			if floodCtx.Err() != nil { // the cleanup closed the others already
				connsMu.Unlock()
				c.Close()
				return
			}
			conns[c] = struct{}{}
			connsMu.Unlock()
			openNow.Add(1)
			br := bufio.NewReader(c)
			if i%4 != 3 { // one in four sends nothing
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
				if resp, err := http.ReadResponse(br, nil); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						answered.Add(1)
					}
				}
				_ = c.SetDeadline(time.Time{})
			}
			_, _ = io.Copy(io.Discard, br) // idle until the gateway (or stop) closes it
			openNow.Add(-1)
			connsMu.Lock()
			delete(conns, c)
			connsMu.Unlock()
			c.Close()
			select {
			case <-floodCtx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	floodStart := time.Now()
	wg.Add(floodConns)
	for i := range floodConns {
		go slot(i)
	}
	// Let the flood fill the table: every slot dialled once and the gateway at its reserve.
	full := func() bool {
		return dials.Load() >= floodConns && strings.Contains(g.Logs(), "file descriptor table nearly full")
	}
	// State nothing signals (the gateway's log): polled, as testutil.WaitFor does.
	testutil.WaitFor(t, 15*time.Second, "the flood to bring the gateway to its descriptor reserve (else the test proves nothing)", full)
	t.Logf("flood: %d dials, %d answered, %d open after %v", dials.Load(), answered.Load(), openNow.Load(),
		time.Since(floodStart).Round(time.Millisecond))

	var took []time.Duration
	var failures []string
	for n := range trials {
		start := time.Now()
		err := echoOnce(ctxT(t, 5*time.Second), g, id, n)
		d := time.Since(start)
		took = append(took, d)
		if err != nil {
			failures = append(failures, fmt.Sprintf("trial %d: %v after %v", n, err, d.Round(time.Millisecond)))
		} else if d > within {
			failures = append(failures, fmt.Sprintf("trial %d: %v", n, d.Round(time.Millisecond)))
		}
		time.Sleep(100 * time.Millisecond)
	}
	slices.Sort(took)
	logs := g.Logs()
	t.Logf("a client dialled, attached and read its echo in p50 %v, max %v (%d of %d within %v) during a flood of %d dials (%d open at the end); the gateway evicted %d idle connections, and net/http backed off %d times after EMFILE",
		took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond),
		trials-len(failures), trials, within, dials.Load(), openNow.Load(), evictions(logs),
		strings.Count(logs, "too many open files; retrying"))
	if len(failures) > 0 {
		t.Errorf("%d of %d clients were not served within %v during the flood:\n%s\n%s",
			len(failures), trials, within, strings.Join(failures, "\n"), tail(logs))
	}
}

// echoOnce dials g as a client, attaches to session id, types a line and reads it echoed.
func echoOnce(ctx context.Context, g *gateway, id string, n int) error {
	c, err := client.Dial(ctx, g.WS, client.DialOptions{Token: g.Token})
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	ch, _, err := c.Attach(ctx, id, nil)
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	want := "[echo " + strconv.Itoa(n) + "]"
	if _, err := ch.WriteContext(ctx, []byte(want+"\n")); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if _, err := ch.ReadUntil(ctx, want); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}

// evictions sums the counts of the gateway's "idle connections evicted" debug lines.
func evictions(logs string) int {
	sum := 0
	for _, m := range regexp.MustCompile(`idle connections evicted.*?count=(\d+)`).FindAllStringSubmatch(logs, -1) {
		n, _ := strconv.Atoi(m[1])
		sum += n
	}
	return sum
}
