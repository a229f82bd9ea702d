package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/IBM/sarama"
)

// ClientConfig is how Tidemark's consumers and producers reach the cluster.
type ClientConfig struct {
	// Brokers are bootstrap addresses (host:port).
	Brokers []string `yaml:"brokers"`
	// ClientID is sent to the brokers (default "tidemark").
	ClientID string `yaml:"client_id"`
	TLS      struct {
		Enabled bool `yaml:"enabled"`
		// CAFile is a PEM bundle to verify brokers with (default: the system pool).
		CAFile             string `yaml:"ca_file"`
		CertFile           string `yaml:"cert_file"`
		KeyFile            string `yaml:"key_file"`
		InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
	} `yaml:"tls"`
	SASL struct {
		// Mechanism: "" (none) or "PLAIN".
		Mechanism string `yaml:"mechanism"`
		User      string `yaml:"user"`
		Password  string `yaml:"password"`
	} `yaml:"sasl"`
}

// Validate names the first bad field.
func (c *ClientConfig) Validate() error {
	if len(c.Brokers) == 0 {
		return fmt.Errorf("kafka.brokers: at least one broker address is required")
	}
	for _, b := range c.Brokers {
		if !strings.Contains(b, ":") {
			return fmt.Errorf("kafka.brokers: %q is not host:port", b)
		}
	}
	switch strings.ToUpper(c.SASL.Mechanism) {
	case "", "PLAIN":
	default:
		return fmt.Errorf("kafka.sasl.mechanism: %q is not one of \"\", PLAIN", c.SASL.Mechanism)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return fmt.Errorf("kafka.tls: cert_file and key_file must be set together")
	}
	return nil
}

// Sarama returns a fresh sarama config for one client: Kafka 4 protocol (Kafka 4 removed the older versions sarama
// defaults to), TLS and SASL as configured.
func (c *ClientConfig) Sarama() (*sarama.Config, error) {
	sc := sarama.NewConfig()
	sc.Version = sarama.V4_0_0_0
	sc.ClientID = c.ClientID
	if sc.ClientID == "" {
		sc.ClientID = "tidemark"
	}
	if c.TLS.Enabled {
		tc := &tls.Config{InsecureSkipVerify: c.TLS.InsecureSkipVerify} //nolint:gosec // opt-in for test clusters
		if c.TLS.CAFile != "" {
			pem, err := os.ReadFile(c.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("read kafka.tls.ca_file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kafka.tls.ca_file %s: no PEM certificates", c.TLS.CAFile)
			}
		}
		if c.TLS.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("load kafka.tls client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		sc.Net.TLS.Enable, sc.Net.TLS.Config = true, tc
	}
	if strings.EqualFold(c.SASL.Mechanism, "PLAIN") {
		sc.Net.SASL.Enable = true
		sc.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		sc.Net.SASL.User, sc.Net.SASL.Password = c.SASL.User, c.SASL.Password
	}
	return sc, nil
}
