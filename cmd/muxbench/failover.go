package main

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/cluster"
)

// The cluster-failover section: three nodes as the cluster section starts them; each of
// clusterFailoverKills rounds SIGKILLs the node that leads the directory's stream (the worst
// case: the bucket cannot be written until a new leader is elected), then times, on each of
// the two survivors, a session opened there until it is listed by and attached through the
// other survivor, from the kill. The victim is restarted, and the next round waits until the
// directory's three replicas are current again.
const (
	clusterFailoverKills = 20
	clusterFailoverBound = 30 * time.Second // a sample that takes longer fails the section
)

func (b *bench) runClusterFailover(ctx context.Context) error {
	bc, err := b.startCluster(ctx)
	if err != nil {
		return err
	}
	defer bc.stop()
	var samples latencies
	for round := range clusterFailoverKills {
		took, err := bc.failoverRound(ctx, round)
		if err != nil {
			return fmt.Errorf("failover round %d: %w", round, err)
		}
		samples = append(samples, took...)
	}
	s := samples.sortedMicros()
	sec := "cluster"
	b.addRow(newRow(sec, fmt.Sprintf("failover p50: directory leader SIGKILLed → a survivor's new session listed and attached through the other (%d kills, 2 each)", clusterFailoverKills),
		"ms", []float64{quantile(s, 0.5) / 1e3}, nil, nil, nil, fmt.Sprintf("TTL %v", clusterTTL)))
	b.addRow(newRow(sec, fmt.Sprintf("failover p99 (%d samples)", len(s)), "ms", []float64{quantile(s, 0.99) / 1e3}, nil, nil,
		&Target{Desc: "≤ 2 s", Of: "value", Op: "<=", Value: 2000}, fmt.Sprintf("max %.1f ms", s[len(s)-1]/1e3)))
	return nil
}

// failoverRound kills the directory's leader, takes one sample on each survivor, and
// restarts the victim.
func (bc *benchCluster) failoverRound(ctx context.Context, round int) ([]time.Duration, error) {
	victim, err := bc.settledLeader(ctx)
	if err != nil {
		return nil, err
	}
	var surv []string
	for _, n := range []string{"a", "b", "c"} {
		if n != victim {
			surv = append(surv, n)
		}
	}
	clients := map[string]*client.Client{}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for _, n := range surv {
		c, err := bc.nodes[n].dial(ctx)
		if err != nil {
			return nil, err
		}
		clients[n] = c
	}
	g := bc.nodes[victim]
	if err := g.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return nil, err
	}
	killed := time.Now()
	<-g.exited
	var took []time.Duration
	for i, from := range surv {
		through := surv[1-i]
		d, err := failoverSample(ctx, bc.b, clients[from], clients[through], from, killed)
		if err != nil {
			return nil, fmt.Errorf("%s killed: open on %s, attach through %s: %w", victim, from, through, err)
		}
		took = append(took, d)
	}
	bc.b.logf("   cluster failover %d: %s (directory leader) SIGKILLed; new sessions listed and attached across the survivors after %v and %v",
		round, victim, took[0].Round(time.Millisecond), took[1].Round(time.Millisecond))
	return took, bc.restart(ctx, victim)
}

// failoverSample opens a session through cf (on node from), waits until ct's list names it
// and attaches it through ct, and returns the time from killed.
func failoverSample(ctx context.Context, b *bench, cf, ct *client.Client, from string, killed time.Time) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, clusterFailoverBound)
	defer cancel()
	ch, err := b.openSh(ctx, cf, "exec sleep 3600")
	if err != nil {
		return 0, err
	}
	defer func() { _, _ = cf.Kill(context.WithoutCancel(ctx), ch.Session()) }()
	if _, err := waitListed(ctx, ct, ch.Session(), from, clusterFailoverBound); err != nil {
		return 0, err
	}
	att, _, err := ct.Attach(ctx, ch.Session(), nil)
	if err != nil {
		return 0, err
	}
	d := time.Since(killed)
	return d, att.Detach(ctx)
}

// settledLeader waits until the directory's stream has a leader and every replica is current,
// and returns the leader's node.
func (bc *benchCluster) settledLeader(ctx context.Context) (string, error) {
	user, pass := cluster.EmbeddedCredentials(bc.token, "client")
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", bc.nats["a"]), nats.UserInfo(user, pass), nats.Timeout(5*time.Second))
	if err != nil {
		return "", fmt.Errorf("NATS client: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, clusterStartWait)
	defer cancel()
	for {
		if leader, ok := streamSettled(ctx, js); ok {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return "", errors.New("the directory's replicas did not settle")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func streamSettled(ctx context.Context, js jetstream.JetStream) (string, bool) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(rctx, "KV_"+cluster.DirectoryBucket)
	if err != nil {
		return "", false
	}
	info, err := s.Info(rctx)
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
		return "", false
	}
	for _, r := range info.Cluster.Replicas {
		if !r.Current || r.Offline {
			return "", false
		}
	}
	return info.Cluster.Leader, true
}
