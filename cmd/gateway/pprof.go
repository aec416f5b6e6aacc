package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"
)

// servePprof serves the runtime's profiles on addr, which must be a loopback address. The
// endpoint has no token, so it also refuses any Host that is not a loopback name with its own
// port (a DNS-rebinding page cannot read it), and it leaves out /cmdline, which would show the
// gateway's arguments (a --token among them). It returns a function that closes the listener.
func servePprof(addr string, idle time.Duration, stdout io.Writer) (func(), error) {
	ta, err := pprofAddr(addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenTCP("tcp", ta)
	if err != nil {
		return nil, fmt.Errorf("pprof listen %s: %w", addr, err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	m := http.NewServeMux()
	m.HandleFunc("GET /debug/pprof/", pprof.Index)
	m.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	m.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol) // go tool pprof symbolizes with a POST
	m.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host, port) || fromWebPage(r) {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		m.ServeHTTP(w, r)
	})
	srv := newServer(h, idle)
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(stdout, "muxterm: pprof on http://%s/debug/pprof/\n", ln.Addr())
	return func() { srv.Close() }, nil
}

// pprofAddr resolves --pprof-listen and refuses an address that is not loopback, before anything
// listens.
func pprofAddr(addr string) (*net.TCPAddr, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-listen %s: %w", addr, err)
	}
	if ta.IP == nil || !ta.IP.IsLoopback() {
		return nil, fmt.Errorf("--pprof-listen %s: not a loopback address", addr)
	}
	return ta, nil
}

// fromWebPage reports whether a browser sent r on behalf of a web page: such a request carries an
// Origin, or a Sec-Fetch-Site other than "none" (typed into the address bar). A page cannot read
// the answer, but an <img src=…/trace?seconds=60> would still make the gateway spend CPU.
// go tool pprof and curl send neither header.
func fromWebPage(r *http.Request) bool {
	if r.Header.Get("Origin") != "" {
		return true
	}
	site := r.Header.Get("Sec-Fetch-Site")
	return site != "" && site != "none"
}

// loopbackHost reports whether a request's Host names this loopback listener: localhost or a
// loopback IP, with the listener's port.
func loopbackHost(host, port string) bool {
	h, p, err := net.SplitHostPort(host)
	if err != nil || p != port {
		return false
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
