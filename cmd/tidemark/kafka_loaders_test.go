package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/kafkaconfig"
	"github.com/tidemark/tidemark/internal/tlsconf"
	"github.com/tidemark/tidemark/latency/instrument"
)

// TestOneKafkaBlockOneLoader feeds the same YAML to every reader of the kafka: block, `tidemark run` (loadConfig),
// `tidemark lag` and `lag record` (loadClusterKafkaConfig, through loadKafkaConfig) and latency/instrument's
// LoadKafkaConfig, and wants the same block or the same error from each (each command's own prefix, "config: " or
// "kafka config PATH: ", removed).
func TestOneKafkaBlockOneLoader(t *testing.T) {
	loaders := []struct {
		name string
		load func(path string) (kafkaconfig.Config, error)
	}{
		{"tidemark run", func(p string) (kafkaconfig.Config, error) {
			cfg, err := loadConfig(p, nil, noEnv)
			if err != nil {
				return kafkaconfig.Config{}, err
			}
			return cfg.Kafka, nil
		}},
		{"tidemark lag", func(p string) (kafkaconfig.Config, error) { return loadKafkaConfig(p, nil, noEnv, "tidemark-lag") }},
		{"instrument.LoadKafkaConfig", instrument.LoadKafkaConfig},
	}
	tls := kafkaconfig.Config{Brokers: []string{"k:9093"}, ClientID: "app", TLS: tlsconf.Config{Enabled: true}}
	tls.SetDefaults()
	scram := kafkaconfig.Config{Brokers: []string{"k:9093", "l:9093"}, ClientID: "app",
		TLS:  tlsconf.Config{Enabled: true, CAFile: "/ca.pem", MinVersion: "1.3"},
		SASL: kafkaconfig.SASL{Mechanism: "SCRAM-SHA-512", User: "u", PasswordFile: "/pw"}}
	scram.SetDefaults()
	for _, tc := range []struct {
		name, yaml string
		want       kafkaconfig.Config
		err        string // the error every loader gives, its prefix removed; "" for none
	}{
		// The case: `tls: true` is TLS with the system roots in every reader.
		{"tls: true", "kafka: {brokers: [k:9093], client_id: app, tls: true}\n", tls, ""},
		// Mechanism case-insensitive, secrets as files.
		{"scram over tls", `kafka:
  brokers: [k:9093, l:9093]
  client_id: app
  tls: {enabled: true, ca_file: /ca.pem, min_version: "1.3"}
  sasl: {mechanism: scram-sha-512, user: u, password_file: /pw}
`, scram, ""},
		{"unknown key", "kafka: {brokers: [k:9093], sasl: {mechanizm: PLAIN}}\n", kafkaconfig.Config{},
			"kafka.sasl.mechanizm: unknown key (a typo, or an option of another version?)"},
		{"wrong type", "kafka: {brokers: [k:9093], sasl: {oauth: {timeout: soon}}}\n", kafkaconfig.Config{},
			`kafka.sasl.oauth.timeout: want a duration like 500ms, 30s or 1m30s, got "soon"`},
		{"tls block of the wrong type", "kafka: {brokers: [k:9093], tls: [a]}\n", kafkaconfig.Config{},
			"kafka.tls: want a block of keys, got a list"},
		// A key with a default set empty is a mistake (an unset template variable), not the default.
		{"empty client id", "kafka: {brokers: [k:9093], client_id: \"\"}\n", kafkaconfig.Config{},
			"kafka.client_id: must not be empty (remove the key for its default)"},
		{"bad mechanism", "kafka: {brokers: [k:9093], sasl: {mechanism: GSSAPI}}\n", kafkaconfig.Config{},
			`kafka.sasl.mechanism: "GSSAPI" is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM`},
		{"bad broker", "kafka: {brokers: [k]}\n", kafkaconfig.Config{}, `kafka.brokers: "k" is not host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, tc.yaml)
			for _, l := range loaders {
				got, err := l.load(p)
				if tc.err == "" {
					if err != nil {
						t.Errorf("%s: %v", l.name, err)
					} else if !reflect.DeepEqual(got, tc.want) {
						t.Errorf("%s: got %+v, want %+v", l.name, got, tc.want)
					}
					continue
				}
				if err == nil {
					t.Errorf("%s: no error, want %q", l.name, tc.err)
					continue
				}
				msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "kafka config "+p+": "), "config: ")
				if msg != tc.err {
					t.Errorf("%s: error %q, want %q", l.name, msg, tc.err)
				}
			}
		})
	}
}
