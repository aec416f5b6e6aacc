package main

import (
	"net/http"
	"testing"
)

func TestLoopbackHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"127.0.0.1:6060", true},
		{"127.0.0.2:6060", true},
		{"[::1]:6060", true},
		{"localhost:6060", true},
		{"LOCALHOST:6060", true},
		{"localhost.:6060", false}, // not the name a local tool uses; a rebinding page could
		{"[::1%lo]:6060", false},
		{"127.0.0.1", false}, // no port: the listener's port is never implied
		{"127.0.0.1:6061", false},
		{"evil.example:6060", false},
		{"10.0.0.1:6060", false},
		{"", false},
	} {
		if got := loopbackHost(tc.host, "6060"); got != tc.want {
			t.Errorf("loopbackHost(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
}

func TestFromWebPage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    bool
	}{
		{"go tool pprof or curl", nil, false},
		{"typed into the address bar", map[string]string{"Sec-Fetch-Site": "none"}, false},
		{"an img on another site", map[string]string{"Sec-Fetch-Site": "cross-site"}, true},
		{"a page on another loopback port", map[string]string{"Sec-Fetch-Site": "same-site"}, true},
		{"fetch with an Origin", map[string]string{"Origin": "http://evil.example"}, true},
	} {
		r, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:6060/debug/pprof/", nil)
		for k, v := range tc.headers {
			r.Header.Set(k, v)
		}
		if got := fromWebPage(r); got != tc.want {
			t.Errorf("%s: fromWebPage = %v, want %v", tc.name, got, tc.want)
		}
	}
}
