package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig configures the NATS server a gateway runs with --cluster-embedded.
type EmbeddedConfig struct {
	Name string // the server's name: the node's
	// ClientListen and RouteListen are host:port (port 0: any free one). RouteListen is used
	// only with Routes: a server without routes is a cluster of one and listens for none.
	ClientListen, RouteListen string
	// Routes are the other servers' route URLs (nats-route://host:port, comma-separated).
	Routes string
	// StoreDir holds JetStream's data; a restarted node finds its state there.
	StoreDir string
	// Logger receives the server's notices, warnings and errors at debug level (its fatal
	// error at error level; its own debug log is not asked for: raft chatter); nil: none.
	Logger *slog.Logger
	// Secret, when set (the cluster token), is what the server's credentials derive from
	// (EmbeddedCredentials): clients and routes without them are refused, so another user of
	// the host cannot write the directory or forge heartbeats. Empty: no authentication.
	Secret string
}

// EmbeddedCredentials derives from secret the user and password an embedded server asks of
// its clients (purpose "client") and of the other servers' routes (purpose "route"). Every
// node of a cluster has the same secret, so each derives the same credentials, and the secret
// itself never crosses the wire.
func EmbeddedCredentials(secret, purpose string) (user, password string) {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("muxterm embedded nats " + purpose))
	return "muxterm-" + purpose, hex.EncodeToString(m.Sum(nil))
}

// readyPoll is how long one check of the server's listeners waits (ReadyForConnections).
const readyPoll = 25 * time.Millisecond

// Embedded is a NATS server with JetStream inside the gateway.
type Embedded struct {
	s *server.Server
}

// StartEmbedded starts the server and waits until it accepts clients. It returns early, with
// the server shut down, when ctx ends or the server stops by itself (its fatal error).
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	ch, cp, err := hostPort(cfg.ClientListen)
	if err != nil {
		return nil, fmt.Errorf("cluster listen (client): %w", err)
	}
	opts := &server.Options{
		ServerName: cfg.Name, Host: ch, Port: randomIfZero(cp),
		JetStream: true, StoreDir: cfg.StoreDir,
		NoSigs: true,
	}
	if routes := splitRoutes(cfg.Routes); len(routes) > 0 {
		// JetStream refuses a cluster block without routes ("JetStream cluster requires
		// configured routes"), so a lone server has none.
		rh, rp, err := hostPort(cfg.RouteListen)
		if err != nil {
			return nil, fmt.Errorf("cluster listen (routes): %w", err)
		}
		opts.Cluster = server.ClusterOpts{Name: "muxterm", Host: rh, Port: randomIfZero(rp)}
		opts.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		if cfg.Secret != "" {
			u, p := EmbeddedCredentials(cfg.Secret, "route")
			opts.Cluster.Username, opts.Cluster.Password = u, p
			for _, r := range opts.Routes {
				r.User = url.UserPassword(u, p)
			}
		}
	}
	if cfg.Secret != "" {
		opts.Username, opts.Password = EmbeddedCredentials(cfg.Secret, "client")
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	fatal := make(chan string, 1)
	s.SetLogger(&natsLogger{log: cfg.Logger, fatal: fatal}, false, false)
	go s.Start()
	// Each check waits up to readyPoll: ctx and a fatal error are seen within it.
	for !s.ReadyForConnections(readyPoll) {
		select {
		case msg := <-fatal:
			s.Shutdown()
			s.WaitForShutdown()
			return nil, fmt.Errorf("embedded nats: %s", msg)
		case <-ctx.Done():
			s.Shutdown()
			s.WaitForShutdown()
			return nil, fmt.Errorf("embedded nats: not ready (client %s, routes %s): %w", cfg.ClientListen, cfg.RouteListen, ctx.Err())
		default:
		}
	}
	return &Embedded{s: s}, nil
}

func splitRoutes(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// ClientURL is where the gateway's own NATS client connects.
func (e *Embedded) ClientURL() string { return e.s.ClientURL() }

// Shutdown stops the server and waits for it.
func (e *Embedded) Shutdown() {
	e.s.Shutdown()
	e.s.WaitForShutdown()
}

// natsLogger passes the embedded server's notices, warnings and errors to the gateway's log at
// debug level, and its fatal error (after which the server does not start: JetStream refused its
// configuration, a port in use) to StartEmbedded.
type natsLogger struct {
	log   *slog.Logger // nil: none
	once  sync.Once
	fatal chan<- string // capacity 1: the first fatal error
}

func (l *natsLogger) debug(level, format string, v ...any) {
	if l.log != nil && l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("embedded nats: "+fmt.Sprintf(format, v...), "nats_level", level)
	}
}

func (l *natsLogger) Noticef(format string, v ...any) { l.debug("info", format, v...) }
func (l *natsLogger) Warnf(format string, v ...any)   { l.debug("warn", format, v...) }
func (l *natsLogger) Errorf(format string, v ...any)  { l.debug("error", format, v...) }
func (l *natsLogger) Debugf(string, ...any)           {}
func (l *natsLogger) Tracef(string, ...any)           {}
func (l *natsLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if l.log != nil {
		l.log.Error("embedded nats: " + msg)
	}
	l.once.Do(func() { l.fatal <- msg })
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
