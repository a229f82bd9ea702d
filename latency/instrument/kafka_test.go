package instrument

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadKafkaConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// A whole `tidemark run` config: only its kafka: block is read.
	c, err := LoadKafkaConfig(write(`kafka:
  brokers: [k:9093]
  tls: {enabled: true, ca_file: /ca.pem}
  sasl: {mechanism: scram-sha-512, user: app, password_file: /pw}
collector: {probe: {enabled: true}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Brokers[0] != "k:9093" || c.SASL.Mechanism != "SCRAM-SHA-512" || c.ClientID != "tidemark" || c.TLS.CAFile != "/ca.pem" {
		t.Fatalf("got %+v", c)
	}
	for _, tc := range []struct{ body, want string }{
		{"kafka: {brokers: [k:1], sasl: {mechanizm: PLAIN}}\n", "kafka.sasl.mechanizm: unknown key"},
		{"collector: {}\n", "no kafka: block"},
		{"kafka: {brokers: [k:1], sasl: {mechanism: GSSAPI}}\n", `kafka.sasl.mechanism: "GSSAPI" is not one of`},
	} {
		if _, err := LoadKafkaConfig(write(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.body, err, tc.want)
		}
	}
}
