package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/muxterm/muxterm/gateway"
	"github.com/muxterm/muxterm/internal/upgrade"
	"github.com/muxterm/muxterm/otel"
)

// The steps of run, in the order it takes them, up to serve.

// loadPrincipals loads the principals (principal default's token, from --token or generated,
// and --tokens) and refuses a --cluster-token that is one of their tokens.
func loadPrincipals(c *config, log *slog.Logger) (map[string]gateway.Principal, error) {
	tokens, err := gateway.LoadPrincipals(c.token, c.sec.tokensFile, log)
	if err != nil {
		return nil, err
	}
	if _, clash := tokens[c.cl.token]; c.cl.on() && clash {
		// The cluster token acts for any principal: it must be no principal's own.
		return nil, errors.New("--cluster-token must differ from every principal's token")
	}
	return tokens, nil
}

// atReturn has f run when run returns, whichever way, before what was registered earlier: a
// defer of run's, registered by a step.
func (s *server) atReturn(f func()) { s.cleanups = append(s.cleanups, f) }

// cleanup runs what atReturn registered, the latest first, each as a defer (one that panics
// does not keep the others from running); run defers it.
func (s *server) cleanup() {
	for _, f := range s.cleanups {
		defer f()
	}
}

// listen opens the main listener, or takes the one an upgrade in place handed over (hl, which
// the next upgrade hands on), starts telemetry (s.tel; run's return flushes it, within 5 s) and
// the connection guard (s.guard), and returns the listener to serve: hl behind the guard, with
// TLS if --tls-cert is set (useTLS). Once hl listens, a failure closes it.
func (s *server) listen(ctx context.Context, ho *upgrade.State) (
	hl *gateway.HandoverListener, ln net.Listener, useTLS bool, err error) {
	c, log := s.c, s.log
	if hl, err = upgrade.ListenOrInherit(ho, "main", c.listen); err != nil {
		return nil, nil, false, err
	}
	ho.Mark("listener")
	tel, err := otel.Setup(ctx, otel.Options{ServiceVersion: version,
		Prometheus: c.metrics || c.metricsAddr != ""})
	if err != nil {
		hl.Close()
		return nil, nil, false, err
	}
	s.tel = tel
	s.atReturn(func() {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(fctx); err != nil {
			log.Warn("telemetry flush", "err", err)
		}
	})
	ho.Mark("telemetry")
	s.guard = gateway.NewConnGuard(gateway.GuardOptions{MaxPending: c.sec.maxPending,
		MaxPendingPerAddr: c.sec.maxPendingPerAddr, TLS: c.sec.tlsCert != "", Logger: log,
		Telemetry: tel})
	if limit, reserve := s.guard.Reserve(); limit > 0 {
		log.Debug("descriptor reserve", "limit", limit, "reserve", reserve)
	}
	if ln, useTLS, err = c.sec.secureListener(s.guard.Listener(hl), log); err != nil {
		hl.Close()
		return nil, nil, false, err
	}
	return hl, ln, useTLS, nil
}
