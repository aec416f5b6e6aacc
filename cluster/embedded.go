package cluster

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig configures the NATS server a gateway runs with --cluster-embedded.
type EmbeddedConfig struct {
	Name string // the server's name: the node's
	// ClientListen and RouteListen are host:port (port 0: any free one).
	ClientListen, RouteListen string
	// Routes are the other servers' route URLs (nats-route://host:port, comma-separated).
	Routes string
	// StoreDir holds JetStream's data; a restarted node finds its state there.
	StoreDir string
}

// Embedded is a NATS server with JetStream inside the gateway.
type Embedded struct {
	s *server.Server
}

// StartEmbedded starts the server and waits until it accepts clients.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	ch, cp, err := hostPort(cfg.ClientListen)
	if err != nil {
		return nil, fmt.Errorf("cluster listen (client): %w", err)
	}
	opts := &server.Options{
		ServerName: cfg.Name, Host: ch, Port: randomIfZero(cp),
		JetStream: true, StoreDir: cfg.StoreDir,
		NoLog: true, NoSigs: true,
	}
	if cfg.RouteListen != "" {
		rh, rp, err := hostPort(cfg.RouteListen)
		if err != nil {
			return nil, fmt.Errorf("cluster listen (routes): %w", err)
		}
		opts.Cluster = server.ClusterOpts{Name: "muxterm", Host: rh, Port: randomIfZero(rp)}
	}
	if r := strings.TrimSpace(cfg.Routes); r != "" {
		opts.Routes = server.RoutesFromStr(r)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready within 10s (client %s, routes %s)", cfg.ClientListen, cfg.RouteListen)
	}
	return &Embedded{s: s}, nil
}

// ClientURL is where the gateway's own NATS client connects.
func (e *Embedded) ClientURL() string { return e.s.ClientURL() }

// Shutdown stops the server and waits for it.
func (e *Embedded) Shutdown() {
	e.s.Shutdown()
	e.s.WaitForShutdown()
}

// randomIfZero: NATS reads port 0 as its default port and -1 as any free one.
func randomIfZero(p int) int {
	if p == 0 {
		return server.RANDOM_PORT
	}
	return p
}

func hostPort(hp string) (string, int, error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("%q: %w", hp, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("%q: bad port", hp)
	}
	return h, n, nil
}
