package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/tidemark/tidemark/internal/confload"
	"github.com/tidemark/tidemark/internal/kafkaconfig"
	"github.com/tidemark/tidemark/internal/tlsconf"
)

func TestKafkaOAuthBlock(t *testing.T) {
	got, err := loadConfig("testdata/kafka-oauth.yaml", nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := kafkaconfig.Config{Brokers: []string{"kafka-1:9093"}, ClientID: "tidemark", TLS: tlsconf.Config{Enabled: true},
		SASL: kafkaconfig.SASL{Mechanism: "OAUTHBEARER", OAuth: kafkaconfig.OAuth{
			TokenURL: "https://idp.example.com/oauth2/token", ClientID: "tidemark", ClientSecretFile: "/etc/tidemark/oauth/client-secret",
			Scopes: []string{"kafka", "lag.read"}, Params: map[string]string{"audience": "kafka-prod"},
			Extensions: map[string]string{"logicalCluster": "lkc-1234", "identityPoolId": "pool-5678"}, Timeout: 5 * time.Second}}}
	if !reflect.DeepEqual(got.Kafka, want) {
		t.Fatalf("got  %+v\nwant %+v", got.Kafka, want)
	}
}

// TestClickHouseTLSBool: `clickhouse.tls: true`, the form before the tls: block, still means TLS with system roots.
func TestClickHouseTLSBool(t *testing.T) {
	got, err := loadConfig(writeConfig(t, "kafka: {brokers: [a:1]}\nclickhouse: {tls: true}\n"), nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClickHouse.TLS != (tlsconf.Config{Enabled: true}) {
		t.Fatalf("got %+v", got.ClickHouse.TLS)
	}
	got, err = loadConfig(writeConfig(t, "kafka: {brokers: [a:1]}\n"), nil, func() []string { return []string{"TIDEMARK_CLICKHOUSE__TLS=true"} })
	if err != nil || !got.ClickHouse.TLS.Enabled {
		t.Fatalf("from the environment: %+v, %v", got.ClickHouse.TLS, err)
	}
}

// TestPrintConfigRedactsSecrets: every secret, from the file or the environment, prints as [redacted].
func TestPrintConfigRedactsSecrets(t *testing.T) {
	path := writeConfig(t, "kafka: {brokers: [a:1], sasl: {mechanism: PLAIN, user: u, password: file-secret-1}}\n"+
		"clickhouse: {password: file-secret-2}\n"+
		"tracing: {enabled: true, endpoint: 'otel:4317', headers: {x-api-key: file-secret-4}}\n")
	env := func() []string { return []string{"TIDEMARK_CLICKHOUSE__PASSWORD=env-secret-3"} }
	cfg, err := loadConfig(path, nil, env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClickHouse.Password.Reveal() != "env-secret-3" || cfg.Kafka.SASL.Password.Reveal() != "file-secret-1" {
		t.Fatal("secrets not loaded")
	}
	out, err := confload.Dump(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing.Headers["x-api-key"] != "file-secret-4" {
		t.Fatal("tracing header not loaded")
	}
	for _, s := range []string{"file-secret-1", "file-secret-2", "env-secret-3", "file-secret-4"} {
		if strings.Contains(string(out), s) {
			t.Fatalf("secret %s in the dump:\n%s", s, out)
		}
	}
	for _, want := range []string{"password: '[redacted]'", "x-api-key: '[redacted]'", "poll_interval: 30s", "user: u"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("dump lacks %q:\n%s", want, out)
		}
	}
}

// TestLagKafkaConfig: the lag commands read only the kafka: block of a run config, then env, then flags.
func TestLagKafkaConfig(t *testing.T) {
	path := writeConfig(t, "kafka: {brokers: [file:9092], sasl: {mechanism: scram-sha-256, user: u, password_file: /pw}}\n"+
		"collector: {probe: {enabled: true}}\nhttp: {listen: ':1'}\n")
	var lf lagFlags
	cmd := newLagCmd()
	lf.fs = cmd.Flags()
	if err := lf.fs.Parse([]string{"--kafka.tls.enabled", "--kafka.tls.ca_file=/ca.pem", "--group=x"}); err != nil {
		t.Fatal(err)
	}
	got, err := loadKafkaConfig(path, lf.fs, noEnv, "tidemark-lag")
	if err != nil {
		t.Fatal(err)
	}
	want := kafkaconfig.Config{Brokers: []string{"file:9092"}, ClientID: "tidemark-lag",
		TLS:  tlsconf.Config{Enabled: true, CAFile: "/ca.pem"},
		SASL: kafkaconfig.SASL{Mechanism: "SCRAM-SHA-256", User: "u", PasswordFile: "/pw"}}
	want.SetDefaults()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	// --brokers wins over the file; with neither the default is the local broker.
	fs := pflag.NewFlagSet("lag", pflag.ContinueOnError)
	var b []string
	fs.StringSliceVar(&b, "brokers", nil, "")
	registerKafkaFlags(fs)
	if err := fs.Parse([]string{"--brokers=x:1,y:2"}); err != nil {
		t.Fatal(err)
	}
	if got, err := loadKafkaConfig(path, fs, noEnv, "tidemark-lag"); err != nil || !reflect.DeepEqual(got.Brokers, []string{"x:1", "y:2"}) {
		t.Fatalf("--brokers: %v %v", got.Brokers, err)
	}
	if got, err := loadKafkaConfig("", nil, noEnv, "tidemark-lag"); err != nil || !reflect.DeepEqual(got.Brokers, []string{"127.0.0.1:9092"}) {
		t.Fatalf("default: %v %v", got.Brokers, err)
	}
	if _, err := loadKafkaConfig(writeConfig(t, "kafka: {brokers: [a:1], sasl: {mechanism: KERBEROS}}\n"), nil, noEnv, "x"); err == nil ||
		!strings.Contains(err.Error(), "kafka.sasl.mechanism") {
		t.Fatalf("bad mechanism: %v", err)
	}
}

func TestKafkaMSKBlock(t *testing.T) {
	got, err := loadConfig("testdata/kafka-msk.yaml", nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := kafkaconfig.Config{Brokers: []string{"b-1.msk.example.amazonaws.com:9098"}, ClientID: "tidemark",
		TLS: tlsconf.Config{Enabled: true}, SASL: kafkaconfig.SASL{Mechanism: "AWS_MSK_IAM", AWS: kafkaconfig.AWS{
			Region: "eu-west-1", RoleARN: "arn:aws:iam::123456789012:role/tidemark", SessionName: "tidemark-prod"}}}
	want.SetDefaults()
	if !reflect.DeepEqual(got.Kafka, want) {
		t.Fatalf("got  %+v\nwant %+v", got.Kafka, want)
	}
}

// TestLagKafkaConfigErrors: the one-shot commands read a run config's kafka: block through the same decoder as
// `tidemark run`, with per-key errors: one sorted line per bad key, named by its full key, and the same 1 MiB
// cap on --config.
func TestLagKafkaConfigErrors(t *testing.T) {
	p := writeConfig(t, "kafka:\n  brokers: [a:1]\n  sasl: {mechanism: PLAIN, user: u, password: p, zzz: 1, aaa: 2}\n  tls: {enabled: yes-please}\n")
	_, err := loadKafkaConfig(p, nil, noEnv, "tidemark-lag")
	want := "config: kafka.sasl.aaa: unknown key (a typo, or an option of another version?)\n" +
		"kafka.sasl.zzz: unknown key (a typo, or an option of another version?)\n" +
		"kafka.tls.enabled: "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v\nwant prefix %q", err, want)
	}
	if _, err := loadKafkaConfig("/dev/zero", nil, noEnv, "tidemark-lag"); !errors.Is(err, confload.ErrTooLarge) {
		t.Fatalf("--config /dev/zero: got %v, want errTooLarge", err)
	}
}
