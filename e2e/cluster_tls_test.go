//go:build e2e

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/muxterm/muxterm/client"
	"github.com/muxterm/muxterm/proto"
)

// testCA is a private CA made for one test, and a server certificate it signed for 127.0.0.1.
type testCA struct {
	caPath, certPath, keyPath string
	pool                      *x509.CertPool
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	dir := t.TempDir()
	write := func(file, typ string, der []byte) string {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return testCA{caPath: write("ca.pem", "CERTIFICATE", caDER), certPath: write("cert.pem", "CERTIFICATE", der),
		keyPath: write("key.pem", "EC PRIVATE KEY", kb), pool: pool}
}

// TestClusterTLSWithPrivateCA: three nodes serve wss with certificates of a private CA made
// here. a and c trust it (--cluster-ca), so a session of a attached through c echoes over the
// TLS relay; b was given another CA, so its relay to a is refused with an internal_error that
// names the node and --cluster-ca (not node_lost), and b logs why.
func TestClusterTLSWithPrivateCA(t *testing.T) {
	ca, other := newTestCA(t, "muxterm test CA"), newTestCA(t, "another CA")
	serve := []string{"--tls-cert", ca.certPath, "--tls-key", ca.keyPath}
	tc := startClusterWith(t, map[string][]string{
		"a": append(serve, "--cluster-ca", ca.caPath),
		"b": append(serve, "--cluster-ca", other.caPath),
		"c": append(serve, "--cluster-ca", ca.caPath),
	}, "a", "b", "c")
	a, b, c := tc.nodes["a"], tc.nodes["b"], tc.nodes["c"]
	for _, g := range []*gateway{a, b, c} {
		if !strings.HasPrefix(g.WS, "wss://") {
			t.Fatalf("node socket %q: want wss", g.WS)
		}
	}
	dialer := &websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: ca.pool}, HandshakeTimeout: 5 * time.Second}
	dial := func(g *gateway) *client.Client {
		return dialAsWith(t, g, client.DialOptions{Token: tc.alice, Dialer: dialer})
	}
	ca1, cb, cc := dial(a), dial(b), dial(c)
	ctx := ctxT(t, 60*time.Second)

	sa := catSession(ctx, t, ca1)
	waitListed(t, cc, sa.Session(), "a", 10*time.Second)
	relayed, _, err := cc.Attach(ctx, sa.Session(), nil)
	if err != nil {
		t.Fatalf("attach a's session through c (trusts the CA): %v", err)
	}
	if _, err := relayed.ReadUntil(ctx, "READY\n"); err != nil {
		t.Fatalf("relayed replay over TLS: %v", err)
	}
	if got := catEchoes(ctx, t, relayed, "over-tls-relay"); !strings.Contains(got, "over-tls-relay") {
		t.Fatalf("echo through c: %q", got)
	}

	waitListed(t, cb, sa.Session(), "a", 10*time.Second)
	_, _, err = cb.Attach(ctx, sa.Session(), nil)
	if kindOf(t, err) != proto.KindInternal {
		t.Fatalf("attach through b (wrong CA): got %v, want internal_error", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "node a") || !strings.Contains(msg, "--cluster-ca") ||
		!strings.Contains(msg, "not trusted") {
		t.Fatalf("attach through b (wrong CA): %q, want it to name node a, --cluster-ca and the distrust", msg)
	}
	t.Logf("b's refusal: %v", err)
	// The reply may overtake the log line (stderr is read by another goroutine): wait for it.
	b.waitLog(t, "TLS certificate is not trusted", 1, 10*time.Second)
	// The refusal harmed nothing: the session goes on, through c too.
	if got := catEchoes(ctx, t, relayed, "still-here"); !strings.Contains(got, "still-here") {
		t.Fatalf("echo through c after b's refusal: %q", got)
	}
}
