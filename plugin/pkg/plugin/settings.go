package plugin

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"

	"github.com/tidemark/tidemark/internal/secret"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/store/query"
)

// Settings are a datasource's decoded settings: jsonData plus the secure fields (secureJsonData: the password, the
// CA certificate, the client certificate and its key). Grafana encrypts secure fields and never sends them to the
// browser; this plugin never logs them or puts them in a message (the password and key are secret.String, which
// prints as "[redacted]").
type Settings struct {
	Address              string        // host:port of ClickHouse's native protocol
	Database             string        // default "tidemark"
	Username             string        // default "default"
	Password             secret.String // secure
	TLSEnabled           bool          // connect with TLS
	TLSSkipVerify        bool          // accept any server certificate
	TLSServerName        string        // name the server certificate must carry, when not the address's host
	TLSCACert            string        // secure; PEM; empty: system roots
	TLSClientCert        string        // secure; PEM; with TLSClientKey: mutual TLS
	TLSClientKey         secret.String // secure; PEM
	QueryTimeout         time.Duration // max_execution_time; default 30 s, 1 s..10 min
	TracingDatasourceUID string        // slowest-message trace links target; empty: no internal link
	TraceURL             string        // URL of a trace in a tracing UI, with ${__value.raw} for the id; empty: no external link
}

type jsonSettings struct {
	Address              string          `json:"address"`
	Database             string          `json:"database"`
	Username             string          `json:"username"`
	TLSEnabled           bool            `json:"tlsEnabled"`
	TLSSkipVerify        bool            `json:"tlsSkipVerify"`
	TLSServerName        string          `json:"tlsServerName"`
	QueryTimeoutSeconds  json.RawMessage `json:"queryTimeoutSeconds"`
	TracingDatasourceUID string          `json:"tracingDatasourceUid"`
	TraceURL             string          `json:"traceUrl"`
}

// TraceIDPlaceholder is what a Trace URL holds where the trace id goes: Grafana's data-link variable for the
// cell's raw value.
const TraceIDPlaceholder = "${__value.raw}"

// Defaults and bounds of the settings.
const (
	DefaultDatabase     = "tidemark"
	DefaultUser         = "default"
	DefaultQueryTimeout = 30 * time.Second
	MaxQueryTimeout     = 10 * time.Minute
)

// LoadSettings decodes and validates a datasource's settings. Its errors are written for the person filling in the
// datasource form: they name the field as the form labels it and say what a valid value looks like.
func LoadSettings(s backend.DataSourceInstanceSettings) (Settings, error) {
	var js jsonSettings
	if len(s.JSONData) > 0 {
		if err := json.Unmarshal(s.JSONData, &js); err != nil {
			return Settings{}, fmt.Errorf("datasource settings are not valid JSON: %v", err)
		}
	}
	out := Settings{
		Address:              strings.TrimSpace(js.Address),
		Database:             strings.TrimSpace(js.Database),
		Username:             strings.TrimSpace(js.Username),
		Password:             secret.String(s.DecryptedSecureJSONData["password"]),
		TLSEnabled:           js.TLSEnabled,
		TLSSkipVerify:        js.TLSSkipVerify,
		TLSServerName:        strings.TrimSpace(js.TLSServerName),
		TLSCACert:            strings.TrimSpace(s.DecryptedSecureJSONData["tlsCACert"]),
		TLSClientCert:        strings.TrimSpace(s.DecryptedSecureJSONData["tlsClientCert"]),
		TLSClientKey:         secret.String(strings.TrimSpace(s.DecryptedSecureJSONData["tlsClientKey"])),
		QueryTimeout:         DefaultQueryTimeout,
		TracingDatasourceUID: strings.TrimSpace(js.TracingDatasourceUID),
		TraceURL:             strings.TrimSpace(js.TraceURL),
	}
	if out.Database == "" {
		out.Database = DefaultDatabase
	}
	if out.Username == "" {
		out.Username = DefaultUser
	}
	if err := out.parseTimeout(js.QueryTimeoutSeconds); err != nil {
		return Settings{}, err
	}
	if err := out.validate(); err != nil {
		return Settings{}, err
	}
	return out, nil
}

// parseTimeout accepts a number or a numeric string (provisioning files often quote numbers).
func (s *Settings) parseTimeout(raw json.RawMessage) error {
	txt := strings.Trim(strings.TrimSpace(string(raw)), `"`)
	if txt == "" || txt == "null" {
		return nil
	}
	secs, err := strconv.ParseFloat(txt, 64)
	if err != nil || secs < 1 || secs > MaxQueryTimeout.Seconds() {
		return fmt.Errorf("Query timeout %q: enter whole seconds from 1 to %d", txt, int(MaxQueryTimeout.Seconds()))
	}
	s.QueryTimeout = time.Duration(secs) * time.Second
	return nil
}

func (s *Settings) validate() error {
	if s.Address == "" {
		return errors.New("Address is missing: enter host:port of ClickHouse's native protocol, e.g. clickhouse:9000")
	}
	if strings.Contains(s.Address, "://") {
		return fmt.Errorf("Address %q: enter host:port of ClickHouse's native protocol (e.g. clickhouse:9000), not a URL", s.Address)
	}
	host, port, err := net.SplitHostPort(s.Address)
	if err != nil || host == "" {
		return fmt.Errorf("Address %q: enter host:port, e.g. clickhouse:9000", s.Address)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("Address %q: port %q is not a number from 1 to 65535", s.Address, port)
	}
	if !store.ValidIdentifier(s.Database) {
		return fmt.Errorf("Database %q: use letters, digits and '_', not starting with a digit", s.Database)
	}
	if s.TraceURL != "" {
		u, err := url.Parse(s.TraceURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("Trace URL %q: enter an http(s) URL, e.g. http://jaeger:16686/trace/${__value.raw}", s.TraceURL)
		}
		if !strings.Contains(s.TraceURL, TraceIDPlaceholder) {
			return fmt.Errorf("Trace URL %q: put %s where the trace id goes, e.g. http://jaeger:16686/trace/%s",
				s.TraceURL, TraceIDPlaceholder, TraceIDPlaceholder)
		}
	}
	if s.TLSCACert != "" {
		if !s.TLSEnabled {
			return errors.New("CA certificate is set but TLS is off: turn on TLS or remove the certificate")
		}
		if !x509.NewCertPool().AppendCertsFromPEM([]byte(s.TLSCACert)) {
			return errors.New("CA certificate: no PEM certificate found (paste the -----BEGIN CERTIFICATE----- block)")
		}
	}
	if s.TLSClientCert != "" || s.TLSClientKey != "" {
		if !s.TLSEnabled {
			return errors.New("Client certificate is set but TLS is off: turn on TLS or remove the certificate and key")
		}
		if s.TLSClientCert == "" || s.TLSClientKey == "" {
			return errors.New("Client certificate and Client key go together: set both, or neither")
		}
		// The parse error is not repeated: it could quote part of the key.
		if _, err := tls.X509KeyPair([]byte(s.TLSClientCert), []byte(s.TLSClientKey.Reveal())); err != nil {
			return errors.New("Client certificate / Client key: not a PEM certificate and its matching private key " +
				"(paste the -----BEGIN CERTIFICATE----- and -----BEGIN PRIVATE KEY----- blocks)")
		}
	}
	if s.TLSServerName != "" && !s.TLSEnabled {
		return errors.New("Server name is set but TLS is off: turn on TLS or clear it")
	}
	return nil
}

// tlsConfig returns the TLS settings, nil when TLS is off.
func (s Settings) tlsConfig() *tls.Config {
	if !s.TLSEnabled {
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: s.TLSSkipVerify, //nolint:gosec // the user's explicit choice
		ServerName: s.TLSServerName}
	if s.TLSCACert != "" {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(s.TLSCACert))
		cfg.RootCAs = pool
	}
	if s.TLSClientCert != "" {
		if pair, err := tls.X509KeyPair([]byte(s.TLSClientCert), []byte(s.TLSClientKey.Reveal())); err == nil { // validated
			cfg.Certificates = []tls.Certificate{pair}
		}
	}
	return cfg
}

// readerConfig is the connection the read queries use.
func (s Settings) readerConfig() query.Config {
	return query.Config{
		Addr:             []string{s.Address},
		Database:         s.Database,
		User:             s.Username,
		Password:         s.Password.Reveal(),
		TLS:              s.tlsConfig(),
		DialTimeout:      5 * time.Second,
		MaxExecutionTime: s.QueryTimeout,
	}
}
