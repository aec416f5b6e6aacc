package gateway

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// This file checks where a request comes from: its Host (a DNS-rebinding page names a foreign
// one) and a browser's Origin, against the listen address, loopback, --allow-host and
// --allow-origin.

// hostAllowed accepts loopback names, the listen address and AllowHosts, compared without
// case and without default ports: a DNS-rebinding page (Host: evil.example) is refused.
func (g *Gateway) hostAllowed(host string) bool {
	h, port := splitHostPort(strings.ToLower(host))
	if h == "" {
		return false
	}
	_, lport := splitHostPort(g.opts.ListenAddr)
	lhost, _ := splitHostPort(strings.ToLower(g.opts.ListenAddr))
	if port == "" {
		port = g.defaultPort()
	}
	if port == lport {
		if h == "localhost" || h == lhost {
			return true
		}
		if ip := net.ParseIP(h); ip != nil && (ip.IsLoopback() || (lhost != "" && ip.Equal(net.ParseIP(lhost)))) {
			return true
		}
	}
	for _, a := range g.opts.AllowHosts {
		ah, ap := splitHostPort(strings.ToLower(a))
		if ap == "" {
			ap = g.defaultPort()
		}
		if ah == h && ap == port {
			return true
		}
	}
	for _, o := range g.opts.AllowOrigins {
		if u, err := url.Parse(o); err == nil {
			oh, op := splitHostPort(strings.ToLower(u.Host))
			if op == "" {
				op = g.defaultPort()
			}
			if oh == h && op == port {
				return true
			}
		}
	}
	return false
}

func (g *Gateway) defaultPort() string {
	if g.opts.TLS {
		return "443"
	}
	return "80"
}

// originAllowed accepts the gateway's own origin (the scheme it serves plus the Host the
// request names, which hostAllowed vetted) and AllowOrigins, exactly after normalisation.
func (g *Gateway) originAllowed(origin, host string) bool {
	o, err := normOrigin(origin)
	if err != nil {
		return false
	}
	scheme := "http"
	if g.opts.TLS {
		scheme = "https"
	}
	if self, err := normOrigin(scheme + "://" + host); err == nil && o == self {
		return true
	}
	for _, a := range g.opts.AllowOrigins {
		if n, err := normOrigin(a); err == nil && n == o {
			return true
		}
	}
	return false
}

// normOrigin lowercases scheme and host and drops a default port.
func normOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("not an origin: %q", s)
	}
	scheme := strings.ToLower(u.Scheme)
	h, p := splitHostPort(strings.ToLower(u.Host))
	if h == "" || strings.ContainsAny(h, "[]") {
		return "", fmt.Errorf("not an origin: %q", s)
	}
	if (scheme == "http" && p == "80") || (scheme == "https" && p == "443") {
		p = ""
	}
	if p != "" {
		return scheme + "://" + net.JoinHostPort(h, p), nil
	}
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	return scheme + "://" + h, nil
}

// splitHostPort splits host[:port], tolerating a missing port and IPv6 brackets.
func splitHostPort(hp string) (host, port string) {
	if h, p, err := net.SplitHostPort(hp); err == nil {
		return unbracket(h), p
	}
	return unbracket(hp), ""
}

// unbracket removes one balanced pair of IPv6 brackets; any other bracket stays, so the name
// is refused later instead of being repaired into another one.
func unbracket(h string) string {
	if len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']' {
		return h[1 : len(h)-1]
	}
	return h
}
