package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/tlsconf/tlstest"
)

// server is a TLS listener that requires a client certificate from any of clientCAs and reports each client's CN.
type server struct {
	addr string
	cns  chan string
}

func newServer(t *testing.T, leaf *tlstest.Leaf, clientCAs ...*tlstest.CA) *server {
	t.Helper()
	pool := x509.NewCertPool()
	for _, ca := range clientCAs {
		pool.AddCert(ca.Cert)
	}
	cert := leaf.TLS(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	s := &server{addr: ln.Addr().String(), cns: make(chan string, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.Handshake() == nil {
				s.cns <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
			}
			_ = c.Close()
		}
	}()
	return s
}

// dial handshakes with the server and returns the client CN the server saw.
func (s *server) dial(t *testing.T, d *Dialer) (string, error) {
	t.Helper()
	c, err := d.Dial("tcp", s.addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return <-s.cns, nil
}

// TestRotation rotates the CA bundle and the client certificate under one *tls.Config, as a running client holds it.
func TestRotation(t *testing.T) {
	ca1, ca2 := tlstest.NewCA(t, "ca-1"), tlstest.NewCA(t, "ca-2")
	srv := newServer(t, ca1.Issue(t, "broker", time.Hour, "127.0.0.1"), ca1, ca2)
	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	a, b := ca1.Issue(t, "client-a", time.Hour), ca2.Issue(t, "client-b", time.Hour)
	tlstest.WriteFile(t, caFile, ca2.PEM) // the wrong CA: the server's certificate is from ca-1
	tlstest.WriteFile(t, certFile, a.CertPEM)
	tlstest.WriteFile(t, keyFile, a.KeyPEM)
	tc, err := (&Config{Enabled: true, CAFile: caFile, CertFile: certFile, KeyFile: keyFile}).NewDialer()
	if err != nil {
		t.Fatal(err)
	}

	_, err = srv.dial(t, tc)
	var cve *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	if !errors.As(err, &cve) || !errors.As(err, &ua) {
		t.Fatalf("untrusted server: got %v, want a certificate verification error (unknown authority)", err)
	}

	tlstest.WriteFile(t, caFile, ca1.PEM) // CA rotated to the right one
	if cn, err := srv.dial(t, tc); err != nil || cn != "client-a" {
		t.Fatalf("after CA rotation: cn %q, err %v", cn, err)
	}

	tlstest.WriteFile(t, certFile, b.CertPEM) // client certificate rotated
	tlstest.WriteFile(t, keyFile, b.KeyPEM)
	if cn, err := srv.dial(t, tc); err != nil || cn != "client-b" {
		t.Fatalf("after certificate rotation: cn %q, err %v", cn, err)
	}

	// Half a rotation: a's certificate with b's key. The last good pair (b) stays in use.
	if err := os.WriteFile(certFile, a.CertPEM, 0o600); err != nil { // in place, not renamed
		t.Fatal(err)
	}
	if cn, err := srv.dial(t, tc); err != nil || cn != "client-b" {
		t.Fatalf("half rotation: cn %q, err %v (want the previous pair kept)", cn, err)
	}
	if err := os.WriteFile(keyFile, a.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if cn, err := srv.dial(t, tc); err != nil || cn != "client-a" {
		t.Fatalf("rotation completed in place: cn %q, err %v", cn, err)
	}
}

func TestServerNameAndExpiry(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	client := ca.Issue(t, "c", time.Hour)
	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key")
	tlstest.WriteFile(t, caFile, ca.PEM)
	tlstest.WriteFile(t, certFile, client.CertPEM)
	tlstest.WriteFile(t, keyFile, client.KeyPEM)
	named := newServer(t, ca.Issue(t, "broker", time.Hour, "kafka.internal"), ca)
	expired := newServer(t, ca.Issue(t, "broker", -time.Minute, "127.0.0.1"), ca)

	base := Config{Enabled: true, CAFile: caFile, CertFile: certFile, KeyFile: keyFile}
	tc, _ := base.NewDialer()
	var he x509.HostnameError
	if _, err := named.dial(t, tc); !errors.As(err, &he) {
		t.Fatalf("certificate for kafka.internal dialled as 127.0.0.1: got %v, want a hostname error", err)
	}
	over := base
	over.ServerName = "kafka.internal"
	tc, _ = over.NewDialer()
	if _, err := named.dial(t, tc); err != nil {
		t.Fatalf("with server_name: %v", err)
	}
	tc, _ = base.NewDialer()
	var inv x509.CertificateInvalidError
	if _, err := expired.dial(t, tc); !errors.As(err, &inv) || inv.Reason != x509.Expired {
		t.Fatalf("expired server certificate: got %v, want x509 Expired", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		err  string
	}{
		{name: "off", c: Config{}},
		{name: "files without enabled", c: Config{CAFile: "x"}, err: "kafka.tls: files or options are set but kafka.tls.enabled is false"},
		{name: "cert without key", c: Config{Enabled: true, CertFile: "c"}, err: "kafka.tls: cert_file and key_file must be set together"},
		{name: "bad version", c: Config{Enabled: true, MinVersion: "1.1"}, err: `kafka.tls.min_version: "1.1" is not one of 1.2, 1.3`},
		{name: "ca and skip", c: Config{Enabled: true, CAFile: "x", InsecureSkipVerify: true}, err: "kafka.tls: ca_file and insecure_skip_verify contradict each other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate("kafka.tls")
			if (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
				t.Fatalf("got %v, want %q", err, tc.err)
			}
		})
	}
	_, err := (&Config{Enabled: true, CAFile: filepath.Join(t.TempDir(), "missing.pem")}).NewDialer()
	if err == nil || !strings.Contains(err.Error(), "ca_file") {
		t.Fatalf("missing CA file: got %v", err)
	}
}
