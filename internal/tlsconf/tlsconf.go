// Package tlsconf is the TLS block Tidemark's Kafka and ClickHouse settings share (`tls:` under `kafka` and
// `clickhouse`), and the dialer it builds (Kafka's and ClickHouse's clients both take a dialer).
//
// Certificates rotate without a restart: the CA bundle and the client certificate and key are files that every new
// connection's handshake reads again (a few KiB; handshakes happen once per connection), parsing them only when
// their bytes changed, so an in-place rewrite, a rename and a Kubernetes Secret volume's symlink swap all count. A
// rotation that is half written (a new certificate with the old key) keeps the last good pair until the files agree
// again. Established connections keep the certificate they were opened with: TLS does not change certificates
// mid-connection.
package tlsconf

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// Config is the `tls:` block. The zero value is TLS off.
type Config struct {
	// Enabled turns TLS on. Setting any file below without it is an error (it would silently not be used).
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of the CAs that sign the servers' certificates; empty: the system roots. Re-read when it
	// changes.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate (PEM, leaf first, then intermediates) and its private key (PEM,
	// PKCS #1, PKCS #8 or EC) for mutual TLS; both or neither. Re-read when they change.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the server's certificate must carry, when it is not the host the client dials (brokers
	// advertised by IP, a load balancer in front). Empty: the dialled host.
	ServerName string `yaml:"server_name"`
	// MinVersion is the oldest TLS version accepted: "1.2" (default) or "1.3".
	MinVersion string `yaml:"min_version"`
	// InsecureSkipVerify accepts any server certificate (tests only: it gives up the protection TLS exists for).
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Validate names the bad key under prefix (e.g. "kafka.tls").
func (c *Config) Validate(prefix string) error {
	if !c.Enabled {
		if c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" || c.InsecureSkipVerify {
			return fmt.Errorf("%s: files or options are set but %s.enabled is false", prefix, prefix)
		}
		return nil
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("%s: cert_file and key_file must be set together", prefix)
	}
	if _, err := minVersion(c.MinVersion); err != nil {
		return fmt.Errorf("%s.min_version: %w", prefix, err)
	}
	if c.InsecureSkipVerify && c.CAFile != "" {
		return fmt.Errorf("%s: ca_file and insecure_skip_verify contradict each other", prefix)
	}
	return nil
}

func minVersion(s string) (uint16, error) {
	switch s {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("%q is not one of 1.2, 1.3", s)
}

// Dialer dials TLS connections as a Config says. It does the handshake itself, per connection, because it knows
// the address being dialled: the server name to verify is the configured override, else the dialled host (an IP
// address is checked against the certificate's IP SANs), and it is checked against the CA bundle read at that
// handshake. A Dialer is safe for concurrent use; share one between clients so that they share the file cache.
type Dialer struct {
	base       *tls.Config
	roots      *caPool // nil: the system roots (crypto/tls verifies)
	serverName string
	skipVerify bool
	// Timeout bounds the TCP connect plus the handshake (default 10 s); KeepAlive is the TCP keep-alive period.
	Timeout, KeepAlive time.Duration
}

// NewDialer returns the dialer for c, nil when TLS is off. It reads every file once, so a missing or malformed file
// is an error now rather than at the first handshake; afterwards the files are read again at every handshake.
func (c *Config) NewDialer() (*Dialer, error) {
	if !c.Enabled {
		return nil, nil
	}
	mv, err := minVersion(c.MinVersion)
	if err != nil {
		return nil, err
	}
	d := &Dialer{base: &tls.Config{MinVersion: mv}, serverName: c.ServerName, skipVerify: c.InsecureSkipVerify,
		Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if c.CertFile != "" {
		pair := &keyPair{certPath: c.CertFile, keyPath: c.KeyFile}
		if _, err := pair.get(); err != nil {
			return nil, err
		}
		d.base.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.get() }
	}
	if c.CAFile != "" {
		d.roots = &caPool{path: c.CAFile}
		if _, err := d.roots.get(); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// ClientConfig returns the crypto/tls configuration of one connection to addr (host:port).
func (d *Dialer) ClientConfig(addr string) *tls.Config {
	name := d.serverName
	if name == "" {
		if h, _, err := net.SplitHostPort(addr); err == nil {
			name = h
		} else {
			name = addr
		}
	}
	tc := d.base.Clone()
	tc.ServerName = name
	switch {
	case d.skipVerify:
		tc.InsecureSkipVerify = true //nolint:gosec // the user's explicit choice, for test clusters
	case d.roots != nil:
		// crypto/tls reads RootCAs once per Config; to pick up a rotated bundle the chain is verified here, against
		// the pool as of this handshake, exactly as crypto/tls would (a chain to a root, then the name).
		tc.InsecureSkipVerify = true //nolint:gosec // verification is done by VerifyConnection below
		roots := d.roots
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			pool, err := roots.get()
			if err != nil {
				return err
			}
			return verifyChain(cs, pool, name)
		}
	}
	return tc
}

// DialContext connects to addr and completes the TLS handshake. A failed handshake is a *HandshakeError naming the
// address.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	raw, err := (&net.Dialer{KeepAlive: d.KeepAlive}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, d.ClientConfig(addr))
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, &HandshakeError{Addr: addr, Err: err}
	}
	return conn, nil
}

// Dial is DialContext without a context (golang.org/x/net/proxy.Dialer, which sarama's Net.Proxy.Dialer takes).
func (d *Dialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

// HandshakeError is a TLS handshake that failed: the server's certificate was not trusted (errors.As finds a
// *tls.CertificateVerificationError), the server refused the client's certificate (a TLS alert), or the peer does
// not speak TLS (tls.RecordHeaderError, or io.EOF when it hung up).
type HandshakeError struct {
	Addr string
	Err  error
}

func (e *HandshakeError) Error() string { return "tls handshake with " + e.Addr + ": " + e.Err.Error() }
func (e *HandshakeError) Unwrap() error { return e.Err }

// verifyChain verifies the server's chain against roots and its name (the configured override, else the name the
// client dialled), returning crypto/tls's own error type so callers can tell it apart.
func verifyChain(cs tls.ConnectionState, roots *x509.CertPool, override string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: server sent no certificate")
	}
	name := override
	if name == "" {
		name = cs.ServerName
	}
	opts := x509.VerifyOptions{Roots: roots, DNSName: name, Intermediates: x509.NewCertPool()}
	for _, ic := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(ic)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}

// keyPair is a client certificate re-read when either file changes.
type keyPair struct {
	certPath, keyPath string

	mu              sync.Mutex // guards the fields below
	certPEM, keyPEM []byte     // the bytes current was parsed from
	current         *tls.Certificate
}

// get returns the current certificate, re-reading both files first and parsing them again if their bytes changed.
// If the new files do not form a valid pair (a rotation half done) or cannot be read, the previous certificate is
// kept (and the files read again at the next handshake); only without a previous one is that an error.
func (p *keyPair) get() (*tls.Certificate, error) {
	certPEM, cerr := os.ReadFile(p.certPath)
	keyPEM, kerr := os.ReadFile(p.keyPath)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := errors.Join(cerr, kerr); err != nil {
		if p.current != nil {
			return p.current, nil
		}
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	if p.current != nil && bytes.Equal(certPEM, p.certPEM) && bytes.Equal(keyPEM, p.keyPEM) {
		return p.current, nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if p.current != nil {
			return p.current, nil
		}
		return nil, fmt.Errorf("client certificate %s / key %s: %w", p.certPath, p.keyPath, err)
	}
	p.current, p.certPEM, p.keyPEM = &pair, certPEM, keyPEM
	return p.current, nil
}

// caPool is a CA bundle re-read when its file changes.
type caPool struct {
	path string

	mu      sync.Mutex // guards the fields below
	pem     []byte     // the bytes current was parsed from
	current *x509.CertPool
}

// get returns the current pool, re-reading the file and parsing it again if its bytes changed; a bundle that cannot
// be read or holds no certificate keeps the previous pool (an error only without one).
func (c *caPool) get() (*x509.CertPool, error) {
	pem, err := os.ReadFile(c.path)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.current != nil {
			return c.current, nil
		}
		return nil, fmt.Errorf("ca_file: %w", err)
	}
	if c.current != nil && bytes.Equal(pem, c.pem) {
		return c.current, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		if c.current != nil {
			return c.current, nil
		}
		return nil, fmt.Errorf("ca_file %s: no PEM certificate found", c.path)
	}
	c.current, c.pem = pool, pem
	return c.current, nil
}
