package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/muxterm/muxterm/session"
)

// TestMetricsOnlyForAdmins: /metrics (gateway-wide counts) answers the --token principal and a
// tokens file's admin lines, and refuses read-write and read-only principals with 403 and no
// metric in the body (docs/security.md, "Metrics").
func TestMetricsOnlyForAdmins(t *testing.T) {
	const tokD = "dddddddddddddddddddddddddddddddd"
	reg := session.NewRegistry(session.Options{Shell: "/bin/sh", KillGrace: 100 * time.Millisecond}, nil)
	defer reg.Shutdown(t.Context())
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "muxterm_sessions 3\n")
	})
	srv := httptest.NewUnstartedServer(nil)
	g, err := New(Options{Registry: reg, Metrics: metrics, ListenAddr: srv.Listener.Addr().String(),
		Tokens: map[string]Principal{
			tokD: {Name: DefaultPrincipal, Admin: true},
			tokO: {Name: "ops", Admin: true},
			tokA: {Name: "alice"},
			tokV: {Name: "carol", ReadOnly: true, ViewOf: "alice"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = g
	srv.Start()
	defer srv.Close()
	for _, tc := range []struct {
		who, tok string
		want     int
	}{
		{"default (--token)", tokD, http.StatusOK},
		{"admin", tokO, http.StatusOK},
		{"read-write", tokA, http.StatusForbidden},
		{"read-only", tokV, http.StatusForbidden},
		{"no token", "", http.StatusUnauthorized},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/metrics", nil)
		if tc.tok != "" {
			req.Header.Set("Authorization", "Bearer "+tc.tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: got %d, want %d", tc.who, resp.StatusCode, tc.want)
		}
		if leaked := strings.Contains(string(body), "muxterm_sessions"); leaked != (tc.want == http.StatusOK) {
			t.Errorf("%s: body %q", tc.who, body)
		}
	}
}
