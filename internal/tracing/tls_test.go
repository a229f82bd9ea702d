package tracing

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/tlsconf"
	"github.com/tidemark/tidemark/internal/tlsconf/tlstest"
)

// TestOTLPOverMutualTLSWithRotation exports over OTLP/HTTP to a backend that requires a client certificate, using the
// shared `tls:` block: a span exported with the first certificate, the certificate file replaced by one with a new
// name, and the same provider's next export (a new connection) presenting the new one, with no restart. A backend whose certificate
// the CA bundle does not sign gets no span (the export fails, counted).
func TestOTLPOverMutualTLSWithRotation(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	server := ca.Issue(t, "otlp backend", time.Hour, "127.0.0.1")
	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	tlstest.WriteFile(t, caFile, ca.PEM)
	first := ca.Issue(t, "tidemark-a", time.Hour)
	tlstest.WriteFile(t, certFile, first.CertPEM)
	tlstest.WriteFile(t, keyFile, first.KeyPEM)

	clients := make(chan string, 16) // the client certificate name of each export the backend received
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" && r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			clients <- r.TLS.PeerCertificates[0].Subject.CommonName
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{server.TLS(t)}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	srv.Config.SetKeepAlivesEnabled(false) // every export a new connection, so a new handshake
	srv.StartTLS()
	defer srv.Close()

	cfg := Config{Enabled: true, Protocol: "http", Endpoint: srv.Listener.Addr().String(), Compression: "none",
		Timeout: 5 * time.Second, TLS: tlsconf.Config{Enabled: true, CAFile: caFile, CertFile: certFile, KeyFile: keyFile}}
	provider := func(cfg Config) *Provider {
		t.Helper()
		p, err := NewProvider(cfg, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.TracerProvider.Shutdown(context.Background()) })
		return p
	}
	export := func(p *Provider) (string, float64) {
		t.Helper()
		endSpans(p.TracerProvider, 1)
		if err := p.TracerProvider.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		select { // ForceFlush returned after the backend answered, so a span it received is in the channel
		case cn := <-clients:
			return cn, testutil.ToFloat64(p.q.failed)
		default:
			return "", testutil.ToFloat64(p.q.failed)
		}
	}
	p := provider(cfg)
	if cn, failed := export(p); cn != "tidemark-a" || failed != 0 {
		t.Fatalf("first export: backend saw client %q, %v failed; want tidemark-a, 0", cn, failed)
	}

	// Rotate the client certificate in place; the same running provider presents the new one at its next handshake.
	second := ca.Issue(t, "tidemark-b", time.Hour)
	tlstest.WriteFile(t, certFile, second.CertPEM)
	tlstest.WriteFile(t, keyFile, second.KeyPEM)
	if cn, failed := export(p); cn != "tidemark-b" || failed != 0 {
		t.Fatalf("after rotation: backend saw client %q, %v failed; want tidemark-b, 0", cn, failed)
	}

	// A CA bundle that does not sign the backend's certificate: nothing reaches it, the span is counted failed.
	other := tlstest.NewCA(t, "other CA")
	otherFile := filepath.Join(dir, "other.pem")
	tlstest.WriteFile(t, otherFile, other.PEM)
	bad := cfg
	bad.Timeout = time.Second
	bad.TLS.CAFile = otherFile
	if cn, failed := export(provider(bad)); cn != "" || failed != 1 {
		t.Fatalf("untrusted backend: backend saw client %q, %v failed; want none, 1", cn, failed)
	}
}
