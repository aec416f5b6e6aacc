package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestNormBasePath(t *testing.T) {
	for in, want := range map[string]string{"": "/", "/": "/", "term": "/term/", "/term": "/term/", "/term/": "/term/", "/a/b.c-d_~/": "/a/b.c-d_~/"} {
		if got, err := NormBasePath(in); err != nil || got != want {
			t.Errorf("NormBasePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"/a//b/", "/../", "/./x/", "/a b/", "/a?b/", "/%2e%2e/", "/a#/"} {
		if got, err := NormBasePath(in); err == nil {
			t.Errorf("NormBasePath(%q) = %q, want an error", in, got)
		}
	}
}

func TestUnderBase(t *testing.T) {
	var seen string
	h := underBase("/term/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.URL.Path
		w.WriteHeader(http.StatusTeapot)
	}))
	for _, c := range []struct {
		path string
		code int
		seen string
	}{
		{"/term/ws", http.StatusTeapot, "/ws"},
		{"/term/", http.StatusTeapot, "/"},
		{"/term", http.StatusPermanentRedirect, ""},
		{"/termx/ws", http.StatusNotFound, ""},
		{"/ws", http.StatusNotFound, ""},
		{"/", http.StatusNotFound, ""},
	} {
		seen = ""
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, c.path, nil))
		if w.Code != c.code || seen != c.seen {
			t.Errorf("GET %s: %d, routed as %q; want %d, %q", c.path, w.Code, seen, c.code, c.seen)
		}
	}
}
