package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/muxterm/muxterm/cluster"
	"github.com/muxterm/muxterm/gateway"
	"github.com/muxterm/muxterm/internal/upgrade"
	"github.com/muxterm/muxterm/otel"
)

// clusterConfig holds the flags of several gateway nodes (docs/scaling.md). Without --cluster
// or --cluster-embedded none of it is used and nothing NATS-related starts.
type clusterConfig struct {
	url       string
	embedded  bool
	routes    listFlag
	listen    string
	store     string
	node      string
	nodeURL   string
	token     string
	ca        string
	ttl       time.Duration
	replicas  int
	placement string
}

func (c *clusterConfig) register(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&c.url, "cluster", "", "join the NATS (JetStream) cluster at this `url` (nats://host:port, comma-separated for several)")
	fs.BoolVar(&c.embedded, "cluster-embedded", false, "run a NATS server with JetStream inside this gateway and join the cluster through it")
	fs.Var(&c.routes, "cluster-routes", "route `url` of another node's embedded NATS server, nats-route://host:port (repeatable, or comma-separated)")
	fs.StringVar(&c.listen, "cluster-listen", "127.0.0.1:4222,127.0.0.1:6222", "the embedded NATS server's client and route `addresses` (host:port,host:port; the route address only with --cluster-routes)")
	fs.StringVar(&c.store, "cluster-store", "", "`directory` of the embedded server's JetStream data")
	fs.StringVar(&c.node, "node-name", sanitizeNode(host), "this node's `name` in the cluster (A-Z a-z 0-9 _ -, unique)")
	fs.StringVar(&c.nodeURL, "node-url", "", "`url` at which other nodes reach this node's /ws")
	fs.StringVar(&c.token, "cluster-token", "", "node-to-node `token` relays present to the owner of a session (the same on every node; MUXTERM_CLUSTER_TOKEN keeps it out of ps)")
	fs.StringVar(&c.ca, "cluster-ca", "", "PEM `file` of the CA certificates a relay trusts when it dials another node's wss:// node URL (a private CA; default: the system roots)")
	fs.DurationVar(&c.ttl, "cluster-ttl", cluster.DefaultTTL, "a node not heard from for 3/4 of this is lost (noticed within 0.8 of it): its relayed channels close with node_lost")
	fs.IntVar(&c.replicas, "cluster-replicas", cluster.DefaultReplicas, "replicas of the session directory (at most the JetStream servers; 1 for an embedded node without routes)")
	fs.StringVar(&c.placement, "placement", string(cluster.PlaceLocal), "where session.open runs: `local` (this node) or least-sessions (the live node with the fewest)")
}

var clusterDefaultText = map[string]string{
	"node-name":     "the host name",
	"node-url":      "ws://<--listen>/ws (wss with TLS)",
	"cluster-store": "$TMPDIR/muxterm-nats-<node name>",
}

func sanitizeNode(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 128 && (r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 || b.Len() > 64 {
		return "node"
	}
	return b.String()
}

func (c *clusterConfig) on() bool { return c.url != "" || c.embedded }

// check validates the flags once they are parsed.
func (c *clusterConfig) check() error {
	if !c.on() {
		return nil
	}
	if c.url != "" && c.embedded {
		return errors.New("--cluster and --cluster-embedded exclude each other")
	}
	if err := cluster.ValidNodeName(c.node); err != nil {
		return fmt.Errorf("--node-name: %w", err)
	}
	if err := gateway.ValidToken(c.token); err != nil {
		return fmt.Errorf("--cluster-token (required with a cluster): %w", err)
	}
	if c.ttl < 100*time.Millisecond {
		return errors.New("--cluster-ttl must be at least 100ms")
	}
	if c.placement != string(cluster.PlaceLocal) && c.placement != string(cluster.PlaceLeastSessions) {
		return fmt.Errorf("--placement %q: want local or least-sessions", c.placement)
	}
	if c.replicas < 1 || c.replicas > 5 {
		return errors.New("--cluster-replicas must be between 1 and 5")
	}
	if c.embedded {
		if _, _, ok := strings.Cut(c.listen, ","); !ok {
			return errors.New("--cluster-listen: want the client and route addresses, host:port,host:port")
		}
	}
	return nil
}

// embeddedShutdownWait bounds the wait for the embedded server to stop.
const embeddedShutdownWait = 2 * time.Second

// joined is a started cluster membership; close ends it (the node, then the embedded server).
type joined struct {
	node *cluster.Node
	emb  *cluster.Embedded
	once sync.Once
}

// close ends the membership within ctx: the node's last directory writes and the embedded
// server's shutdown are abandoned at its end (the process is exiting; a restart sweeps).
func (j *joined) close(ctx context.Context) {
	if j == nil {
		return
	}
	j.once.Do(func() {
		j.node.CloseWithin(ctx)
		if j.emb == nil {
			return
		}
		done := make(chan struct{})
		go func() {
			j.emb.Shutdown()
			close(done)
		}()
		// A server whose routes all went at once (every node stopping) can take seconds to step
		// down; JetStream's file store survives an exit as it survives a crash.
		wait := time.NewTimer(embeddedShutdownWait)
		defer wait.Stop()
		select {
		case <-done:
		case <-ctx.Done():
		case <-wait.C:
		}
	})
}

// newNode makes the node (not started) so the registry can be built with its Observer.
func (c *clusterConfig) newNode(addr string, tls bool, sessions func() int, in *otel.Instruments, log *slog.Logger) (*cluster.Node, error) {
	url := c.nodeURL
	if url == "" {
		scheme := "ws"
		if tls {
			scheme = "wss"
		}
		url = scheme + "://" + addr + "/ws"
	}
	replicas := c.replicas
	if c.embedded && len(c.routes) == 0 {
		replicas = 1 // a lone embedded server
	}
	relayTLS, err := c.relayTLS()
	if err != nil {
		return nil, err
	}
	return cluster.New(cluster.Config{Name: c.node, URL: url, Token: c.token, RelayTLS: relayTLS, TTL: c.ttl,
		Replicas: replicas, Placement: cluster.Placement(c.placement), Sessions: sessions, Logger: log,
		OnUnverified: func(kind string) {
			in.ClusterUnverified.Add(context.Background(), 1, metric.WithAttributes(attribute.String(otel.AttrClusterKind, kind)))
		}})
}

// start runs the embedded server if asked, then starts node. ho, an upgrade in place's
// handover (nil without one): its sessions keep their directory entries through the start.
// ctx ends the start at any moment (a signal), with what it started stopped.
func (c *clusterConfig) start(ctx context.Context, node *cluster.Node, ho *upgrade.State, log *slog.Logger) (*joined, error) {
	j := &joined{node: node}
	if ho != nil && ho.Sessions != nil {
		ids := make([]string, 0, len(ho.Sessions.Sessions))
		for _, s := range ho.Sessions.Sessions {
			ids = append(ids, s.ID)
		}
		node.KeepOnStart(ids)
	}
	natsURL := c.url
	if c.embedded {
		client, route, _ := strings.Cut(c.listen, ",")
		store := c.store
		if store == "" {
			store = filepath.Join(os.TempDir(), "muxterm-nats-"+c.node)
		}
		var routes []string
		for _, r := range c.routes {
			for item := range strings.SplitSeq(r, ",") {
				if item = strings.TrimSpace(item); item != "" {
					routes = append(routes, item)
				}
			}
		}
		emb, err := cluster.StartEmbedded(ctx, cluster.EmbeddedConfig{Name: c.node, ClientListen: strings.TrimSpace(client),
			RouteListen: strings.TrimSpace(route), Routes: strings.Join(routes, ","), StoreDir: store, Logger: log,
			Secret: c.token})
		if err != nil {
			return nil, err
		}
		j.emb = emb
		natsURL = emb.ClientURL()
		if c.token != "" {
			node.SetNATSAuth(cluster.EmbeddedCredentials(c.token, "client"))
		}
	}
	node.SetNATS(natsURL)
	if err := node.Start(ctx); err != nil {
		if j.emb != nil {
			j.emb.Shutdown()
		}
		return nil, err
	}
	return j, nil
}

// relayTLS is the relays' TLS configuration from --cluster-ca: only its CAs are trusted (nil
// without the flag: the system roots).
func (c *clusterConfig) relayTLS() (*tls.Config, error) {
	if c.ca == "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.ca)
	if err != nil {
		return nil, fmt.Errorf("--cluster-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--cluster-ca %s: no PEM certificate in it", c.ca)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
