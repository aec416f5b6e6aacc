package gateway

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	otelmetric "go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"github.com/muxterm/muxterm/mux"
	"github.com/muxterm/muxterm/otel"
	"github.com/muxterm/muxterm/proto"
	"github.com/muxterm/muxterm/session"
)

// routeOf names a request's route for span names: the fixed routes by their path, everything
// else (the UI's files, 404s) as "/*", so scanners cannot mint span names.
func routeOf(p string) string {
	switch p {
	case "/", "/healthz", "/readyz", "/auth", "/auth/check", "/metrics":
		return p
	}
	return "/*"
}

// CookieName is the browser's auth cookie, as named by a gateway whose listen address has no
// port; a gateway that listens on a port names it CookieName_<port> (CookieNameFor), so two
// gateways on one host, whose cookies the browser scopes to the host and not the port, keep
// one cookie each.
const CookieName = "muxterm_token"

// HeaderShare, on /auth/check's answer to a share link's token, says what the link grants:
// read-only or read-write.
const HeaderShare = "Muxterm-Share"

// HeaderShareToken carries a share link's token to GET /auth/check from the link's page, in
// place of the cookie or Authorization (which a proxy in front may use for its own auth).
const HeaderShareToken = "Muxterm-Share-Token"

// CookieNameFor is the auth cookie's name of a gateway listening on listenAddr (host:port).
func CookieNameFor(listenAddr string) string {
	if _, port, err := net.SplitHostPort(listenAddr); err == nil && port != "" {
		return CookieName + "_" + port
	}
	return CookieName
}

// Principal is an authenticated identity.
type Principal struct {
	Name     string
	ReadOnly bool
	// ViewOf names the principal whose sessions a read-only principal lists and attaches to
	// (tokens.go); empty for a read-write principal, which sees its own.
	ViewOf string
	// Admin may read /metrics: the --token principal and the tokens file's admin lines.
	Admin bool
	// share is the link a share token names (shares.go): the socket sees only its session.
	share *share
	// relayLease is the lease a relay's socket asked for (proto.HeaderRelayLease); 0: none.
	relayLease time.Duration
}

// Options configure a Gateway.
type Options struct {
	Registry *session.Registry // required
	// Tokens maps each accepted token to its principal. At least one is required.
	Tokens map[string]Principal
	// AllowOrigins are extra origins (scheme://host[:port]) allowed to open sockets with the
	// cookie, besides the gateway's own.
	AllowOrigins []string
	// AllowHosts are extra Host header values accepted, besides loopback names and the
	// listen address.
	AllowHosts []string
	// ListenAddr is the address served (host:port), for the Host and same-origin checks.
	ListenAddr string
	// BasePath is the URL path every route is served under ("/term/" behind a reverse proxy
	// at a sub-path: /term/ws, /term/auth, the UI at /term/), as NormBasePath returns it;
	// empty is "/". The auth cookie's Path is this path.
	BasePath string
	// TLS says the gateway serves https (the origin scheme).
	TLS bool
	// AllowCmd lists the commands session.open may run besides the shell ("*": any).
	AllowCmd []string
	// MaxSockets bounds the sockets one principal holds at once (default DefaultMaxSockets);
	// the upgrade beyond it is refused with 429 (limits.go).
	MaxSockets int
	// Mux carries the per-socket knobs (window, limits, keepalive); Registry, Principal,
	// ReadOnly and AllowCmd are filled in per socket.
	Mux mux.ServerOptions
	// Frontend is the built UI (index.html at its root); nil serves none.
	Frontend fs.FS
	Logger   *slog.Logger
	Version  string
	// Telemetry receives spans and metrics. Default: otel.Noop().
	Telemetry *otel.Telemetry
	// ClusterToken, when set, is the node-to-node credential of a cluster: a socket that
	// presents it acts for the principal its Muxterm-On-Behalf-Of header names (read-only with
	// Muxterm-Read-Only: 1), and is not relayed further. Remote serves the sessions other
	// nodes own; Node is this node's name. All three empty: one node.
	ClusterToken string
	Remote       mux.Remote
	Node         string
	// Metrics, when non-nil, is served at GET /metrics to an admin principal, authenticated as
	// for /ws (bearer token, or the cookie from a same-origin page).
	Metrics http.Handler
}

// Gateway serves HTTP. It is safe for concurrent use.
type Gateway struct {
	opts     Options
	log      *slog.Logger
	e        *echo.Echo
	handler  http.Handler // e, under BasePath
	upgrader websocket.Upgrader

	// baseCtx is every socket's parent; cancelled with mux.ErrShutdown by Shutdown (with
	// mux.ErrRestart by Restart, and replaced by Resume). Both are guarded by drainMu.
	baseCtx    context.Context
	cancelBase context.CancelCauseFunc
	// conns counts the sockets being served. Guarded by drainMu: Resume replaces it with a new
	// group, and a socket calls Done on the group enter gave it.
	conns *sync.WaitGroup
	// drainMu orders sockets entering against Shutdown and Restart: a socket counted in conns
	// entered before draining was set, so their conns.Wait never races a conns.Add at zero.
	// Resume, which lets sockets enter again, gives them a new group: a Wait that Restart left
	// behind when its ctx ended keeps waiting on the old one, which only ever counts down.
	drainMu   sync.Mutex
	draining  atomic.Bool // set under drainMu; read lock-free by readyz
	sockets   atomic.Int64
	socketsOf socketLimit // sockets per principal (limits.go)

	tel         *otel.Telemetry
	httpTracing func(http.Handler) http.Handler
	// cookie is the auth cookie's name (CookieNameFor the listen address).
	cookie string
	// shares are the owners' share links (shares.go).
	shares *shareStore
}

// traceHTTP gives every route but /ws a server span (otelhttp: the maintained
// instrumentation; otelecho is deprecated and ends with Echo v4). /ws is skipped: an HTTP
// span is exported only when it ends, which for /ws would be when the socket closes; mux emits
// ws.connection instead. otelhttp wraps the ResponseWriter, so /ws must stay outside it or
// the upgrade loses http.Hijacker.
func (g *Gateway) traceHTTP(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Path() == "/ws" {
			return next(c)
		}
		var err error
		g.httpTracing(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.SetRequest(r)
			c.Response().Writer = w
			err = next(c)
		})).ServeHTTP(c.Response().Writer, c.Request())
		return err
	}
}

// tracerProvider hands otelhttp our tracer.
type tracerProvider struct {
	embedded.TracerProvider
	t trace.Tracer
}

func (p tracerProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return p.t }

// metrics serves Prometheus text to an authenticated admin principal: the counts are
// gateway-wide (every principal's sessions and bytes), so a read-write or read-only principal
// gets 403.
func (g *Gateway) metrics(c echo.Context) error {
	r := c.Request()
	if !g.hostAllowed(r.Host) {
		refuse(c.Response(), http.StatusForbidden, "host not allowed")
		return nil
	}
	tok := ""
	if h := r.Header.Get("Authorization"); bearer(h) {
		_, rest, _ := strings.Cut(h, " ")
		tok = strings.TrimSpace(rest)
	} else if ck, err := r.Cookie(g.cookie); err == nil {
		// SameSite=Strict: sent only by same-site pages, and without CORS a page of another
		// origin cannot read the answer.
		tok = ck.Value
	}
	p, ok := g.principal(tok)
	if !ok {
		refuse(c.Response(), http.StatusUnauthorized, "missing or invalid token")
		return nil
	}
	if !p.Admin {
		refuse(c.Response(), http.StatusForbidden, "metrics are for admin principals")
		return nil
	}
	g.opts.Metrics.ServeHTTP(c.Response(), r)
	return nil
}

// New builds the Echo app.
func New(opts Options) (*Gateway, error) {
	if opts.Registry == nil {
		return nil, errors.New("gateway: no registry")
	}
	if len(opts.Tokens) == 0 {
		return nil, errors.New("gateway: no token")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	for _, o := range opts.AllowOrigins {
		if _, err := normOrigin(o); err != nil {
			return nil, fmt.Errorf("gateway: allow-origin %q: %w", o, err)
		}
	}
	if opts.Telemetry == nil {
		opts.Telemetry = otel.Noop()
	}
	base, err := NormBasePath(opts.BasePath)
	if err != nil {
		return nil, fmt.Errorf("gateway: base path %q: %w", opts.BasePath, err)
	}
	opts.BasePath = base
	g := &Gateway{opts: opts, log: opts.Logger, tel: opts.Telemetry, cookie: CookieNameFor(opts.ListenAddr),
		shares: newShareStore(opts.Registry)}
	g.httpTracing = otelhttp.NewMiddleware("muxterm.http",
		otelhttp.WithTracerProvider(tracerProvider{t: opts.Telemetry.Tracer}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + routeOf(r.URL.Path) }))
	g.baseCtx, g.cancelBase = context.WithCancelCause(context.Background())
	g.conns = new(sync.WaitGroup)
	g.upgrader = websocket.Upgrader{
		Subprotocols:      []string{proto.Subprotocol},
		ReadBufferSize:    16 << 10,
		WriteBufferSize:   64 << 10,
		EnableCompression: false,
		// Origin was checked before the upgrade (checkUpgrade), with the Host check too.
		CheckOrigin: func(*http.Request) bool { return true },
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			refuse(w, status, reason.Error())
		},
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = g.httpError
	e.Pre(g.upgradeOnlyAtWS) // paths.go: no route but GET /ws sees an upgrade
	e.Use(g.traceHTTP)
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	e.GET("/readyz", g.readyz)
	e.GET("/auth", g.auth)
	e.GET("/auth/check", g.authCheck)
	e.GET("/ws", g.serveWS)
	if opts.Metrics != nil {
		e.GET("/metrics", g.metrics)
	}
	if opts.Frontend != nil {
		g.mountFrontend(e, opts.Frontend)
	}
	g.e = e
	g.handler = e
	if base != "/" {
		g.handler = underBase(base, e)
	}
	return g, nil
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.handler.ServeHTTP(w, r) }

// Sockets returns the number of sockets being served.
func (g *Gateway) Sockets() int64 { return g.sockets.Load() }

func (g *Gateway) httpError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	code, msg := http.StatusInternalServerError, "internal error"
	var he *echo.HTTPError
	if errors.As(err, &he) {
		code = he.Code
		msg = fmt.Sprint(he.Message)
	}
	_ = c.String(code, msg+"\n")
}

func (g *Gateway) readyz(c echo.Context) error {
	if g.draining.Load() {
		return c.String(http.StatusServiceUnavailable, "draining\n")
	}
	return c.String(http.StatusOK, "ok\n")
}

func (g *Gateway) serveWS(c echo.Context) error {
	r, w := c.Request(), c.Response()
	if g.draining.Load() {
		refuse(w, http.StatusServiceUnavailable, "shutting down")
		return nil
	}
	p, status, why := g.checkUpgrade(r)
	if status != 0 {
		g.log.Info("websocket refused", "status", status, "reason", why, "remote", r.RemoteAddr)
		g.tel.Instruments.UpgradesRejected.Add(r.Context(), 1,
			otelmetric.WithAttributes(attribute.String(otel.AttrReason, why)))
		refuse(w, status, why)
		return nil
	}
	// A relay's sockets are bounded where its clients' sockets are, on the relaying node.
	// The socket's place is given back when it ends, or earlier, when mux decides to close it
	// for the client's fault (1007, 1008): its close and linger (up to 5 s) then no longer
	// count against the principal.
	release := func() {}
	if p.Name != relayPrincipalName {
		if !g.admitSocket(w, r, p) {
			return nil
		}
		release = sync.OnceFunc(func() { g.socketsOf.release(p.Name) })
		defer release()
	}
	base, conns, ok := g.enter()
	if !ok {
		refuse(w, http.StatusServiceUnavailable, "shutting down")
		return nil
	}
	defer conns.Done()
	ws, err := g.upgrader.Upgrade(w, r, nil)
	if err != nil {
		// The upgrader already answered.
		g.log.Info("websocket upgrade failed", "err", err, "remote", r.RemoteAddr)
		return nil
	}
	g.sockets.Add(1)
	defer g.sockets.Add(-1)
	opts := g.opts.Mux
	opts.Registry = g.opts.Registry
	opts.Principal = p.Owner()
	opts.ReadOnly = p.ReadOnly
	opts.Admin = p.Admin
	opts.AllowCmd = g.allowCmd
	opts.Logger = g.log.With("principal", p.Name, "remote", r.RemoteAddr)
	opts.Version = g.opts.Version
	opts.Telemetry = g.tel
	opts.MaxSockets = g.maxSockets()
	opts.Closing = release
	opts.RelayLease = p.relayLease
	if p.Name != relayPrincipalName && p.share == nil { // a relay's socket is served here, never relayed on
		opts.Remote, opts.Node = g.opts.Remote, g.opts.Node
	}
	if s := p.share; s != nil {
		// The link's revocation or expiry ends the socket (mux.ErrRevoked: close 4003).
		opts.Session = s.session
		ctx, cancel := context.WithCancelCause(base)
		defer cancel(nil)
		if !g.shares.join(s, &cancel) {
			_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(mux.CloseRevoked, mux.ErrRevoked.Error()), time.Now().Add(time.Second))
			ws.Close()
			return nil
		}
		defer g.shares.leave(s, &cancel)
		base = ctx
	} else if !p.ReadOnly {
		opts.Shares = g.shares
	}
	// After a successful upgrade the handler returns nil: Echo must not write to a hijacked
	// connection.
	if err := mux.Serve(base, ws, opts); err != nil {
		opts.Logger.Debug("socket ended", "err", err)
	}
	return nil
}

func (g *Gateway) allowCmd(argv []string) bool {
	for _, a := range g.opts.AllowCmd {
		if a == "*" || a == argv[0] {
			return true
		}
	}
	return false
}

// enter counts a socket in conns unless the gateway is draining, and returns the sockets'
// base context and the group the socket calls Done on when it ends.
func (g *Gateway) enter() (context.Context, *sync.WaitGroup, bool) {
	g.drainMu.Lock()
	defer g.drainMu.Unlock()
	if g.draining.Load() {
		return nil, nil, false
	}
	g.conns.Add(1)
	return g.baseCtx, g.conns, true
}

// ErrSocketsOpen is Shutdown's error when every session was killed but some socket had not
// ended by ctx's deadline: a client that does not read keeps its close frame from being written.
// Nothing of a session is lost with it; the process's exit closes the socket.
var ErrSocketsOpen = errors.New("sockets still open")

// Shutdown refuses new sockets, tells every socket its channels are closed for shutdown and
// closes it with 1001, begins killing every session in parallel, and waits for the sockets to
// end within ctx. The kills are not bounded by ctx: they run to KILL and their end, and
// Registry.Shutdown waits for them (a second call starts nothing). It returns an error wrapping
// ErrSocketsOpen when sockets outlived ctx, else the registry's error if it ended first.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.drainMu.Lock()
	g.draining.Store(true)
	cancel, conns := g.cancelBase, g.conns
	g.drainMu.Unlock()
	g.shares.stop()
	cancel(mux.ErrShutdown)
	regErr := make(chan error, 1)
	// Ends when every kill has ended, which may be after Shutdown returned (ctx ended first):
	// the caller then waits for the kills itself with a second Registry.Shutdown.
	go func() { regErr <- g.opts.Registry.Shutdown(ctx) }()
	done := make(chan struct{})
	// Ends when every socket's handler has returned: when ctx ends first, it outlives this call
	// (the handlers end when their sockets do, at the latest when the process exits).
	go func() {
		conns.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("shutdown: %w: %w", ErrSocketsOpen, ctx.Err())
	}
	select {
	case err := <-regErr:
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return nil // the kills go on; the caller waits for them
		}
		return err
	case <-ctx.Done():
		return nil
	}
}

// mountFrontend serves the embedded UI.
func (g *Gateway) mountFrontend(e *echo.Echo, dist fs.FS) {
	if _, err := fs.Stat(dist, "index.html"); err != nil {
		e.GET("/", func(c echo.Context) error {
			return c.String(http.StatusServiceUnavailable, "frontend not built: run make frontend\n")
		})
		return
	}
	files := http.FileServerFS(dist)
	h := func(c echo.Context) error {
		c.Response().Header().Set("Content-Security-Policy",
			"default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'")
		c.Response().Header().Set("X-Content-Type-Options", "nosniff")
		c.Response().Header().Set("Referrer-Policy", "no-referrer")
		files.ServeHTTP(c.Response(), c.Request())
		return nil
	}
	e.GET("/", h)
	e.GET("/*", h)
}
