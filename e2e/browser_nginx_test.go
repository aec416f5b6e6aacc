//go:build e2e

package e2e

// The UI behind a real reverse proxy: Debian's nginx terminates TLS (a test CA's certificate,
// which Chromium is told to trust by its key) and forwards /term/ (WebSocket upgrade included)
// to a gateway started with --base-path /term/.

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muxterm/muxterm/internal/testutil"
)

// nginxConf is the configuration docs/operations.md shows, with the test's ports and paths:
// TLS, the sub-path, the WebSocket upgrade, and Host passed on as the browser sent it.
const nginxConf = `daemon off;
master_process off;
pid {{dir}}/nginx.pid;
error_log {{dir}}/error.log;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path {{dir}}/body;
    proxy_temp_path {{dir}}/proxy;
    fastcgi_temp_path {{dir}}/fastcgi;
    uwsgi_temp_path {{dir}}/uwsgi;
    scgi_temp_path {{dir}}/scgi;

    map $http_upgrade $connection_upgrade {
        default upgrade;
        ''      close;
    }

    server {
        listen {{listen}} ssl;
        ssl_certificate     {{cert}};
        ssl_certificate_key {{key}};

        location /term/ {
            proxy_pass http://{{gateway}};
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_read_timeout 1h;
            proxy_buffering off;
        }
    }
}
`

func nginxPath(t *testing.T) string {
	t.Helper()
	return browserTool(t, "nginx", "nginx", "/usr/sbin/nginx")
}

// startNginx runs nginx on listen (host:port) with TLS from cert and key, forwarding /term/ to
// gateway (host:port), and stops it when the test ends.
func startNginx(t *testing.T, listen, gateway, cert, key string) {
	t.Helper()
	bin := nginxPath(t)
	dir := t.TempDir()
	conf := strings.NewReplacer("{{dir}}", dir, "{{listen}}", listen, "{{gateway}}", gateway, "{{cert}}", cert, "{{key}}", key).Replace(nginxConf)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", path)
	cmd.Stderr = os.Stderr
	startKilledAtEnd(t, cmd)
	testutil.WaitFor(t, 10*time.Second, "nginx to listen on "+listen, func() bool {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// spkiOf is the base64 SHA-256 of the PEM certificate's public key, as Chromium's
// --ignore-certificate-errors-spki-list takes it.
func spkiOf(t *testing.T, certPath string) string {
	t.Helper()
	b, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", certPath)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// TestBrowserBehindNginx: nginx (TLS, /term/ → a gateway with --base-path /term/): the sign-in
// URL, the UI, /auth/check and the WebSocket all work through it, a reload resumes the session,
// and the gateway serves nothing outside its base path.
func TestBrowserBehindNginx(t *testing.T) {
	nginxPath(t)
	pre, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	front := pre.Addr().String()
	pre.Close()
	origin := "https://" + front
	g := startGateway(t, "--base-path", "/term/", "--allow-origin", origin)
	// The sign-in line follows the listening line the harness waits for: wait for it too.
	g.waitLog(t, "/term/auth?token=", 1, 10*time.Second)
	cert, key, _ := selfSigned(t)
	startNginx(t, front, strings.TrimPrefix(g.Base, "http://"), cert, key)

	for path, want := range map[string]int{"/ws": 404, "/auth/check": 404, "/": 404, "/term/healthz": 200, "/term/auth/check": 401} {
		r, err := http.Get(g.Base + path)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != want {
			t.Errorf("GET %s straight at the gateway: %d, want %d", path, r.StatusCode, want)
		}
	}

	b := startBrowser(t, browserOpts{flags: map[string]any{"ignore-certificate-errors-spki-list": spkiOf(t, cert)}})
	b.open(origin + "/term/auth?token=" + g.Token)
	b.waitJS("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1", 20*time.Second)
	b.waitPrompt()
	if href := eval[string](b, "location.href"); href != origin+"/term/" {
		t.Errorf("after signing in the page is at %s, want %s/term/", href, origin)
	}
	b.echo("through-''nginx")
	session := eval[[]tabInfo](b, "window.muxterm.tabs()")[0].Session
	b.reload()
	b.waitJS(fmt.Sprintf("window.muxterm !== undefined && window.muxterm.state() === 'connected' && window.muxterm.tabs().length === 1 && window.muxterm.tabs()[0].session === %q && window.muxterm.tabs()[0].channel > 0", session), 20*time.Second)
	b.waitText("\nthrough-nginx", 10*time.Second)
	if n := eval[int](b, "fetch('auth/check').then((r) => r.status)"); n != 204 {
		t.Errorf("auth/check through nginx with the cookie: %d, want 204", n)
	}
	b.screenshot("behind-nginx")
}
