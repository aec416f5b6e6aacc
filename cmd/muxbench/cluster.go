package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/cluster"
	"github.com/muxterm/muxterm/internal/freeport"
)

// The cluster section (docs/scaling.md): three gateway processes, each with an embedded NATS
// server routed to the other two, the directory at 3 replicas. Each figure is measured on the
// local path (the client's socket on the node that owns the session) and on the relayed path
// (the socket on another node), alternating within each repetition.

// clusterTTL is the nodes' --cluster-ttl: small, so node loss is measured in seconds.
const clusterTTL = 1500 * time.Millisecond

// Counts per repetition.
const (
	clusterBytes     = 8 << 20 // output read per throughput sample
	clusterEchoN     = 300     // keystrokes per path
	clusterAttachN   = 20      // attaches per path
	clusterPropN     = 50      // opens timed into another node's list
	clusterLossReps  = 3       // node-loss samples per signal (each restarts a node)
	clusterStartWait = 90 * time.Second
)

// benchCluster is the three nodes: a owns the sessions, b relays to it.
type benchCluster struct {
	b     *bench
	args  map[string][]string
	nodes map[string]*gatewayProc
	store string
	token string         // the cluster token
	nats  map[string]int // node → its embedded NATS server's client port
}

// startCluster starts nodes a, b and c at once (each waits for the others' JetStream).
func (b *bench) startCluster(ctx context.Context) (*benchCluster, error) {
	var tok [24]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, fmt.Errorf("cluster token: %w", err)
	}
	store, err := os.MkdirTemp("", "muxbench-cluster-")
	if err != nil {
		return nil, fmt.Errorf("cluster store: %w", err)
	}
	bc := &benchCluster{b: b, args: map[string][]string{}, nodes: map[string]*gatewayProc{}, store: store,
		token: hex.EncodeToString(tok[:]), nats: map[string]int{}}
	names := []string{"a", "b", "c"}
	routes := map[string]int{}
	for _, n := range names {
		if routes[n], err = freePort(); err != nil {
			return nil, err
		}
		if bc.nats[n], err = freePort(); err != nil {
			return nil, err
		}
	}
	for _, n := range names {
		var others []string
		for _, o := range names {
			if o != n {
				others = append(others, fmt.Sprintf("nats-route://127.0.0.1:%d", routes[o]))
			}
		}
		bc.args[n] = []string{"--cluster-embedded", "--node-name", n, "--cluster-token", bc.token,
			"--cluster-listen", fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", bc.nats[n], routes[n]),
			"--cluster-routes", strings.Join(others, ","), "--cluster-store", store + "/" + n,
			"--cluster-ttl", clusterTTL.String()}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, n := range names {
		wg.Go(func() {
			g, err := bc.start(ctx, n)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			bc.nodes[n] = g
		})
	}
	wg.Wait()
	for _, g := range bc.nodes {
		b.gateways = append(b.gateways, g)
	}
	if len(errs) > 0 {
		bc.stop()
		return nil, errors.Join(errs...)
	}
	return bc, nil
}

// start runs node n with its arguments (the same ports and store on a restart).
func (bc *benchCluster) start(ctx context.Context, n string) (*gatewayProc, error) {
	ctx, cancel := context.WithTimeout(ctx, clusterStartWait)
	defer cancel()
	g, err := startGateway(ctx, bc.b.cfg.Gateway, 4096, append(slices.Clone(bc.b.gwArgs), bc.args[n]...)...)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n, err)
	}
	return g, nil
}

// restart starts node n again after it died.
func (bc *benchCluster) restart(ctx context.Context, n string) error {
	old := bc.nodes[n]
	bc.b.gateways = slices.DeleteFunc(bc.b.gateways, func(x *gatewayProc) bool { return x == old })
	g, err := bc.start(ctx, n)
	if err != nil {
		return err
	}
	bc.nodes[n] = g
	bc.b.gateways = append(bc.b.gateways, g)
	return nil
}

func (bc *benchCluster) stop() {
	for _, g := range bc.nodes {
		if err := bc.b.stopGateway(g); err != nil {
			bc.b.report.Errors = append(bc.b.report.Errors, fmt.Sprintf("cluster: %v", err))
		}
	}
	_ = os.RemoveAll(bc.store)
}

// freePort is a route port for a node started later: outside the kernel's ephemeral range, so
// that no other socket takes it meanwhile (freeport.Port).
func freePort() (int, error) { return freeport.Port() }

// listedOn reports the node c's list names for id ("" when absent).
func listedOn(ctx context.Context, c *client.Client, id string) (string, error) {
	l, err := c.List(ctx)
	if err != nil {
		return "", fmt.Errorf("list: %w", err)
	}
	for _, s := range l {
		if s.Session == id {
			return s.Node, nil
		}
	}
	return "", nil
}

// waitListed polls c's list until id is on node (or, node "", absent), and returns how long.
func waitListed(ctx context.Context, c *client.Client, id, node string, d time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		got, err := listedOn(ctx, c, id)
		if err != nil {
			return 0, err
		}
		if got == node {
			return time.Since(start), nil
		}
		if time.Since(start) > d {
			return 0, fmt.Errorf("session %s not listed on %q within %v", id, node, d)
		}
	}
}

// readN reads exactly n bytes of ch.
func readN(ctx context.Context, ch *client.Channel, n int, buf []byte) error {
	for got := 0; got < n; {
		k, err := ch.ReadContext(ctx, buf[:min(len(buf), n-got)])
		got += k
		if err != nil {
			return fmt.Errorf("read %d of %d bytes: %w", got, n, err)
		}
	}
	return nil
}

func (b *bench) runCluster(ctx context.Context) error {
	bc, err := b.startCluster(ctx)
	if err != nil {
		return err
	}
	defer bc.stop()
	a, bn := bc.nodes["a"], bc.nodes["b"]
	ca, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer func() { ca.Close() }()
	cb, err := bn.dial(ctx)
	if err != nil {
		return err
	}
	defer cb.Close()
	type path struct {
		name string
		c    *client.Client
	}
	paths := []path{{"local", ca}, {"relayed", cb}}
	buf := make([]byte, 32<<10)
	var thrL, thrR, thrRatio, echoL, echoR, echoDiff, attL, attR, propP50, propP99 []float64
	for rep := range b.cfg.Reps {
		// Throughput: 8 MiB from a session on a, read on a and through b.
		got := map[string]float64{}
		for _, p := range order(paths, rep) {
			open, err := b.openSh(ctx, ca, fmt.Sprintf("stty raw -echo; echo READY; read x; exec head -c %d /dev/zero", clusterBytes))
			if err != nil {
				return err
			}
			if _, err := open.ReadUntil(ctx, "READY\n"); err != nil {
				return fmt.Errorf("throughput session: %w", err)
			}
			id := open.Session()
			if p.c == cb {
				if _, err := waitListed(ctx, cb, id, "a", 10*time.Second); err != nil {
					return err
				}
			}
			ch, res, err := p.c.Attach(ctx, id, nil)
			if err != nil {
				return fmt.Errorf("%s attach: %w", p.name, err)
			}
			if err := open.Detach(ctx); err != nil {
				return err
			}
			if err := readN(ctx, ch, int(res.End-res.Offset), buf); err != nil { // the replay: READY
				return err
			}
			start := time.Now()
			if _, err := ch.Write([]byte("\n")); err != nil {
				return err
			}
			if err := readN(ctx, ch, clusterBytes, buf); err != nil {
				return fmt.Errorf("%s throughput: %w", p.name, err)
			}
			got[p.name] = float64(clusterBytes) / (1 << 20) / time.Since(start).Seconds()
			if _, err := p.c.Kill(ctx, id); err != nil {
				return fmt.Errorf("kill: %w", err)
			}
		}
		thrL, thrR = append(thrL, got["local"]), append(thrR, got["relayed"])
		thrRatio = append(thrRatio, got["relayed"]/got["local"])

		// Echo: one byte typed on one path, timed there; both paths read every echo.
		cat, err := b.openSh(ctx, ca, "stty raw -echo; echo READY; exec cat")
		if err != nil {
			return err
		}
		if _, err := cat.ReadUntil(ctx, "READY\n"); err != nil {
			return err
		}
		if _, err := waitListed(ctx, cb, cat.Session(), "a", 10*time.Second); err != nil {
			return err
		}
		var chans [2]*client.Channel
		for i, p := range paths {
			if chans[i], _, err = p.c.Attach(ctx, cat.Session(), nil); err != nil {
				return fmt.Errorf("%s attach: %w", p.name, err)
			}
			if _, err := chans[i].ReadUntil(ctx, "READY\n"); err != nil {
				return err
			}
		}
		if err := cat.Detach(ctx); err != nil {
			return err
		}
		var lat [2]latencies
		for i := range 2 * clusterEchoN {
			typist := (i + rep) % 2
			k := []byte{byte('a' + i%26)}
			start := time.Now()
			if _, err := chans[typist].Write(k); err != nil {
				return err
			}
			if n, err := chans[typist].ReadContext(ctx, buf[:1]); err != nil || n != 1 || buf[0] != k[0] {
				return fmt.Errorf("echo %d: %v %q", i, err, buf[:n])
			}
			lat[typist] = append(lat[typist], time.Since(start))
			if _, err := chans[1-typist].ReadContext(ctx, buf[:1]); err != nil {
				return fmt.Errorf("echo %d on the other path: %w", i, err)
			}
		}
		l50, r50 := quantile(lat[0].sortedMicros(), 0.5)/1e3, quantile(lat[1].sortedMicros(), 0.5)/1e3
		echoL, echoR, echoDiff = append(echoL, l50), append(echoR, r50), append(echoDiff, r50-l50)

		// Attach: local versus through a relay (which dials the owner), alternating.
		var att [2]latencies
		for i := range 2 * clusterAttachN {
			which := (i + rep) % 2
			start := time.Now()
			ch, _, err := paths[which].c.Attach(ctx, cat.Session(), nil)
			if err != nil {
				return fmt.Errorf("%s attach: %w", paths[which].name, err)
			}
			att[which] = append(att[which], time.Since(start))
			if err := ch.Detach(ctx); err != nil {
				return err
			}
		}
		attL = append(attL, quantile(att[0].sortedMicros(), 0.5)/1e3)
		attR = append(attR, quantile(att[1].sortedMicros(), 0.5)/1e3)
		if _, err := ca.Kill(ctx, cat.Session()); err != nil {
			return err
		}

		// Directory propagation: open on a, poll b's list until it is there.
		var prop latencies
		for range clusterPropN {
			ch, err := b.openSh(ctx, ca, "exec sleep 3600")
			if err != nil {
				return err
			}
			d, err := waitListed(ctx, cb, ch.Session(), "a", 30*time.Second)
			if err != nil {
				return err
			}
			prop = append(prop, d)
			if _, err := ca.Kill(ctx, ch.Session()); err != nil {
				return err
			}
		}
		s := prop.sortedMicros()
		propP50, propP99 = append(propP50, quantile(s, 0.5)/1e3), append(propP99, quantile(s, 0.99)/1e3)
		b.logf("   cluster rep %d: throughput local %.0f relayed %.0f MiB/s; echo p50 local %.3f relayed %.3f ms; attach p50 local %.3f relayed %.3f ms; propagation p50 %.2f p99 %.2f ms",
			rep, got["local"], got["relayed"], l50, r50, attL[rep], attR[rep], propP50[rep], propP99[rep])
	}
	sec := "cluster"
	b.addRow(newRow(sec, "output throughput, local (8 MiB)", "MiB/s", thrL, nil, nil, nil, "socket on the owner node"))
	b.addRow(newRow(sec, "output throughput, relayed (8 MiB)", "MiB/s", thrR, nil, nil, nil, "socket on another node"))
	b.addRow(newRow(sec, "relayed / local throughput", "ratio", thrRatio, nil, nil,
		&Target{Desc: "≥ 80% of local", Of: "value", Op: ">=", Value: 0.8}, "per repetition"))
	b.addRow(newRow(sec, "echo p50, local (300 keystrokes)", "ms", echoL, nil, nil, nil, ""))
	b.addRow(newRow(sec, "echo p50, relayed (300 keystrokes)", "ms", echoR, nil, nil, nil, ""))
	b.addRow(newRow(sec, "echo p50, relayed − local", "ms", echoDiff, nil, nil,
		&Target{Desc: "≤ local + 0.5 ms", Of: "value", Op: "<=", Value: 0.5}, "per repetition"))
	b.addRow(newRow(sec, "session.attach p50, local (20)", "ms", attL, nil, nil, nil, ""))
	b.addRow(newRow(sec, "session.attach p50, relayed (20)", "ms", attR, nil, nil, nil, "dials the owner: one WebSocket upgrade"))
	b.addRow(newRow(sec, "directory propagation p50 (open on a → in b's list, 50)", "ms", propP50, nil, nil, nil, ""))
	b.addRow(newRow(sec, "directory propagation p99 (50)", "ms", propP99, nil, nil, nil, ""))

	// Cost per node: node a idle (an embedded NATS server inside), then with 100 idle shells.
	var rssIdle, thrIdle, rssPer []float64
	for range b.cfg.Reps {
		before, err := a.sample()
		if err != nil {
			return err
		}
		var ids []string
		for range 100 {
			ch, err := b.openSh(ctx, ca, "exec sleep 3600")
			if err != nil {
				return err
			}
			ids = append(ids, ch.Session())
		}
		after, err := a.sample()
		if err != nil {
			return err
		}
		for _, id := range ids {
			if _, err := ca.Kill(ctx, id); err != nil {
				return err
			}
		}
		rssIdle, thrIdle = append(rssIdle, float64(before.RSSKiB)/1024), append(thrIdle, float64(before.Threads))
		rssPer = append(rssPer, float64(after.RSSKiB-before.RSSKiB)/100)
	}
	b.addRow(newRow(sec, "node RSS with no session (embedded NATS server inside)", "MiB", rssIdle, nil, nil, nil, "sampled before each 100 opens"))
	b.addRow(newRow(sec, "node threads with no session", "threads", thrIdle, nil, nil, nil, ""))
	b.addRow(newRow(sec, "node RSS per idle session (100 opened)", "KiB", rssPer, nil, nil, nil, ""))

	// Node loss against the TTL: SIGSTOP freezes a (its sockets stay open, its heartbeats
	// stop), so only the TTL can tell; SIGKILL breaks its sockets at once. Each sample
	// restarts a.
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
		var detect, gone []float64
		for range clusterLossReps {
			d, g, err := bc.nodeLoss(ctx, cb, sig)
			if err != nil {
				return fmt.Errorf("node loss by %v: %w", sig, err)
			}
			detect, gone = append(detect, d), append(gone, g)
		}
		name := map[syscall.Signal]string{syscall.SIGSTOP: "SIGSTOP (only the heartbeat can tell)", syscall.SIGKILL: "SIGKILL (its sockets break)"}[sig]
		b.addRow(newRow(sec, "node loss by "+name+": relayed channel node_lost", "TTL", detect, nil, nil,
			&Target{Desc: "within the TTL", Of: "value", Op: "<=", Value: 1}, fmt.Sprintf("TTL %v", clusterTTL)))
		b.addRow(newRow(sec, "node loss by "+name+": gone from b's list", "TTL", gone, nil, nil, nil, fmt.Sprintf("TTL %v", clusterTTL)))
	}
	return nil
}

// nodeLoss opens a session on a, attaches it through b, signals a and times b's node_lost
// and the session leaving b's list, in TTLs; then a is killed (if stopped) and restarted.
func (bc *benchCluster) nodeLoss(ctx context.Context, cb *client.Client, sig syscall.Signal) (detect, gone float64, err error) {
	a := bc.nodes["a"]
	ca, err := a.dial(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer ca.Close()
	s, err := bc.b.openSh(ctx, ca, "stty raw -echo; echo READY; exec cat")
	if err != nil {
		return 0, 0, err
	}
	if _, err := s.ReadUntil(ctx, "READY\n"); err != nil {
		return 0, 0, err
	}
	if _, err := waitListed(ctx, cb, s.Session(), "a", 10*time.Second); err != nil {
		return 0, 0, err
	}
	r, _, err := cb.Attach(ctx, s.Session(), nil)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := a.cmd.Process.Signal(sig); err != nil {
		return 0, 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*clusterTTL)
	err = r.Wait(wctx)
	cancel()
	if err != nil || r.Reason() != cluster.ReasonNodeLost {
		return 0, 0, fmt.Errorf("relayed channel not closed with node_lost: %v %q", err, r.Reason())
	}
	took := time.Since(start)
	if _, err := waitListed(ctx, cb, s.Session(), "", 5*clusterTTL); err != nil {
		return 0, 0, err
	}
	listGone := time.Since(start)
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	if err := bc.restart(ctx, "a"); err != nil {
		return 0, 0, err
	}
	return took.Seconds() / clusterTTL.Seconds(), listGone.Seconds() / clusterTTL.Seconds(), nil
}
