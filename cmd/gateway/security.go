package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/muxterm/muxterm/gateway"
	"github.com/muxterm/muxterm/mux"
)

// securityConfig holds the flags of docs/security.md. Like every flag, each has a MUXTERM_*
// environment twin (parse sets them generically).
type securityConfig struct {
	tokensFile     string
	tlsCert        string
	tlsKey         string
	insecureListen bool
	maxSockets     int
	maxInputRate   byteSize // bytes per second per session; 0: unlimited
	maxInputBurst  byteSize // bucket size; 0: the larger of one second and one input frame
	maxOpenRate    float64  // session.open per second per principal; 0: unlimited
	maxOpenBurst   int
	// HTTP connections before an upgrade (gateway/conns.go)
	httpIdle          time.Duration
	maxPending        int
	maxPendingPerAddr int
}

// Defaults of the rate limits (README, Configuration).
const (
	defaultMaxInputRate = 1 << 20
	defaultMaxOpenRate  = 10
	defaultMaxOpenBurst = 20
)

func (s *securityConfig) register(fs *flag.FlagSet) {
	s.maxInputRate = defaultMaxInputRate
	fs.StringVar(&s.tokensFile, "tokens", "", "`file` of \"principal role token [view-of=owner]\" lines (mode 600); see docs/security.md")
	fs.StringVar(&s.tlsCert, "tls-cert", "", "PEM certificate chain `file`: serve https and wss")
	fs.StringVar(&s.tlsKey, "tls-key", "", "PEM private key `file` of --tls-cert")
	fs.BoolVar(&s.insecureListen, "insecure-listen", false, "allow a non-loopback --listen without TLS (tokens and keystrokes cross the network in clear text)")
	fs.IntVar(&s.maxSockets, "max-sockets", gateway.DefaultMaxSockets, "sockets per principal")
	fs.Var(&s.maxInputRate, "max-input-rate", "input `bytes` per second per session (suffixes KiB, MiB; 0: unlimited)")
	fs.Var(&s.maxInputBurst, "max-input-burst", "input burst per session, `bytes` (suffixes KiB, MiB)")
	fs.Float64Var(&s.maxOpenRate, "max-open-rate", defaultMaxOpenRate, "session.open per second per principal (0: unlimited)")
	fs.IntVar(&s.maxOpenBurst, "max-open-burst", defaultMaxOpenBurst, "session.open burst per principal")
	fs.DurationVar(&s.httpIdle, "http-idle-timeout", 30*time.Second, "close a keep-alive HTTP connection idle for this long")
	fs.IntVar(&s.maxPending, "max-pending-conns", gateway.DefaultMaxPending, "HTTP connections not yet upgraded to WebSockets, in all")
	fs.IntVar(&s.maxPendingPerAddr, "max-pending-per-addr", gateway.DefaultMaxPendingPerAddr, "HTTP connections not yet upgraded to WebSockets, per remote IP address")
}

// check validates the flags once they are parsed.
func (s *securityConfig) check() error {
	if (s.tlsCert == "") != (s.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if s.httpIdle <= 0 {
		return errors.New("--http-idle-timeout must be positive")
	}
	if s.maxPending < 1 || s.maxPendingPerAddr < 1 {
		return errors.New("--max-pending-conns and --max-pending-per-addr must be at least 1")
	}
	if s.maxSockets < 1 {
		return errors.New("--max-sockets must be at least 1")
	}
	if s.maxOpenRate < 0 || s.maxOpenRate != s.maxOpenRate {
		return errors.New("--max-open-rate must be 0 (unlimited) or positive")
	}
	if s.maxOpenRate > 0 && s.maxOpenBurst < 1 {
		return errors.New("--max-open-burst must be at least 1")
	}
	if s.maxInputRate > 0 {
		if s.maxInputBurst == 0 {
			s.maxInputBurst = max(s.maxInputRate, mux.DefaultMaxInputBytes)
		}
		if s.maxInputBurst < mux.DefaultMaxInputBytes {
			return fmt.Errorf("--max-input-burst must be at least one input frame (%d bytes)", mux.DefaultMaxInputBytes)
		}
	}
	return nil
}

// rateLimiters returns the shared limiters of every socket (nil: unlimited).
func (s *securityConfig) rateLimiters() (input, open *mux.RateLimiter) {
	return mux.NewRateLimiter(float64(s.maxInputRate), float64(s.maxInputBurst)),
		mux.NewRateLimiter(s.maxOpenRate, float64(s.maxOpenBurst))
}

// secureListener serves TLS on ln when a certificate is configured, and refuses a listener
// that is not on a loopback address without TLS unless --insecure-listen says so, with a loud
// warning. It reports whether the result serves TLS. On error the caller closes ln.
func (s *securityConfig) secureListener(ln net.Listener, log *slog.Logger) (net.Listener, bool, error) {
	if s.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(s.tlsCert, s.tlsKey)
		if err != nil {
			return nil, false, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		// HTTP/1.1 only: a WebSocket upgrade needs it.
		conf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"}}
		return tls.NewListener(ln, conf), true, nil
	}
	if loopbackListener(ln) {
		return ln, false, nil
	}
	if !s.insecureListen {
		return nil, false, fmt.Errorf("listen %s: not a loopback address: give --tls-cert and --tls-key "+
			"(or terminate TLS in a reverse proxy on this host and listen on 127.0.0.1), "+
			"or accept clear text with --insecure-listen", ln.Addr())
	}
	log.Warn("INSECURE: listening on a non-loopback address without TLS (--insecure-listen): "+
		"tokens, cookies and every keystroke cross the network in clear text; anyone on the path can take over the shells",
		"listen", ln.Addr().String())
	return ln, false, nil
}

// loopbackListener reports whether ln accepts only loopback connections.
func loopbackListener(ln net.Listener) bool {
	a, ok := ln.Addr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}
