package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// TestConfigClusters: a clusters: list gives each cluster its own client settings, lag options and paths; the
// lag exporter's cluster label is the entry's name.
func TestConfigClusters(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, `
clickhouse: {addr: ["ch:9000"]}
clusters:
  - name: prod
    kafka: {brokers: ["prod-1:9092"], sasl: {mechanism: PLAIN, user: u, password: p}, tls: {enabled: true}}
    lag: {poll_interval: 5s}
    collector: {probe: {enabled: true, topic: tm-probe-prod}}
  - name: dr.eu-west_1
    kafka: {brokers: ["dr-1:9092"]}
`), nil, func() []string { return []string{"TIDEMARK_KAFKA_BROKERS=127.0.0.1:9092"} })
	if err != nil {
		t.Fatal(err)
	}
	cl := cfg.clusterList()
	if len(cl) != 2 || cl[0].Name != "prod" || cl[1].Name != "dr.eu-west_1" {
		t.Fatalf("clusters %+v", cl)
	}
	if cl[0].Lag.Cluster != "prod" || cl[1].Lag.Cluster != "dr.eu-west_1" {
		t.Errorf("lag.cluster %q, %q: want the names", cl[0].Lag.Cluster, cl[1].Lag.Cluster)
	}
	if cl[0].Kafka.Brokers[0] != "prod-1:9092" || cl[0].Kafka.SASL.Mechanism != "PLAIN" || !cl[0].Kafka.TLS.Enabled ||
		cl[1].Kafka.Brokers[0] != "dr-1:9092" || cl[1].Kafka.TLS.Enabled {
		t.Errorf("kafka blocks %+v / %+v", cl[0].Kafka, cl[1].Kafka)
	}
	if cl[0].Lag.PollInterval.Seconds() != 5 || cl[1].Lag.PollInterval == cl[0].Lag.PollInterval {
		t.Errorf("poll intervals %v, %v: want 5s and the default", cl[0].Lag.PollInterval, cl[1].Lag.PollInterval)
	}
	if !cl[0].Collector.Probe.Enabled || cl[0].Collector.Probe.Topic != "tm-probe-prod" || cl[1].Collector.Probe.Topic == "tm-probe-prod" {
		t.Errorf("collector blocks %+v / %+v", cl[0].Collector.Probe, cl[1].Collector.Probe)
	}
	// the local stack's TIDEMARK_KAFKA_BROKERS does not invent a top-level kafka block beside clusters:
	if len(cfg.Kafka.Brokers) != 0 && cfg.Kafka.Brokers[0] == "127.0.0.1:9092" {
		t.Errorf("TIDEMARK_KAFKA_BROKERS filled kafka.brokers beside clusters:")
	}
}

// TestConfigSingleClusterIsDefault: the configuration without clusters: is one cluster, named by lag.cluster.
func TestConfigSingleClusterIsDefault(t *testing.T) {
	for text, want := range map[string]string{
		"kafka: {brokers: [\"k:9092\"]}\n":                          DefaultClusterName,
		"kafka: {brokers: [\"k:9092\"]}\nlag: {cluster: staging}\n": "staging",
	} {
		cfg, err := loadConfig(writeConfig(t, text), nil, noEnv)
		if err != nil {
			t.Fatal(err)
		}
		cl := cfg.clusterList()
		if len(cl) != 1 || cl[0].Name != want || cl[0].Lag.Cluster != want || cl[0].Kafka.Brokers[0] != "k:9092" {
			t.Errorf("%q: clusters %+v, want one named %q", text, cl, want)
		}
	}
}

// TestConfigClustersErrors: every mistake is a line naming its key as the file writes it.
func TestConfigClustersErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"unknown key in an entry", `
clusters:
  - name: a
    kafka: {brokers: ["a:9092"], bogus: 1}
    colector: {}
`, []string{"clusters[0].kafka.bogus: unknown key", "clusters[0].colector: unknown key"}},
		{"duplicate and bad names", `
clusters:
  - {name: a, kafka: {brokers: ["a:9092"]}}
  - {name: a, kafka: {brokers: ["b:9092"]}}
  - {name: "prod/eu", kafka: {brokers: ["c:9092"]}}
  - {kafka: {brokers: ["d:9092"]}}
`, []string{`clusters[1].name: "a" is also the name of clusters[0]`, `clusters[2].name: "prod/eu": want 1 to 63 of`,
			"clusters[3].name: every cluster needs a name"}},
		{"a cluster's own checks name the entry", `
clusters:
  - {name: a, kafka: {brokers: ["a"]}, lag: {poll_interval: -1s}, collector: {probe: {enabled: true}}}
`, []string{`clusters[0].kafka.brokers: "a" is not host:port`, "clusters[0].lag.poll_interval:",
			"clusters[0].collector.probe.enabled: the collector writes to ClickHouse"}},
		// The decoder names list entries with [i], which koanf's paths cannot read: the value is looked up by walking
		// the list, so the message quotes it (and the second entry's, not the first's).
		{"a bad duration in an entry", `
clusters:
  - {name: a, kafka: {brokers: ["a:9092"]}}
  - {name: b, kafka: {brokers: ["b:9092"]}, lag: {poll_interval: 5x}}
`, []string{`clusters[1].lag.poll_interval: want a duration like 500ms, 30s or 1m30s, got "5x"`}},
		{"lag.cluster disagrees with the name", `
clusters:
  - {name: a, kafka: {brokers: ["a:9092"]}, lag: {cluster: b}}
`, []string{`clusters[0].lag.cluster: "b" differs from the cluster's name "a"`}},
		{"top-level blocks beside clusters:", `
kafka: {brokers: ["x:9092"]}
lag: {poll_interval: 5s}
clusters:
  - {name: a, kafka: {brokers: ["a:9092"]}}
`, []string{"kafka: set per cluster (clusters[].kafka)", "lag: set per cluster (clusters[].lag)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(writeConfig(t, tc.text), nil, noEnv)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestLagCommandsPickACluster: `tidemark lag --config F --cluster NAME` reads NAME's kafka: block (flags over it),
// labels the lag with NAME, and says which names exist when NAME is not one.
func TestLagCommandsPickACluster(t *testing.T) {
	path := writeConfig(t, `
clusters:
  - {name: prod, kafka: {brokers: ["prod-1:9092"], sasl: {mechanism: PLAIN, user: u, password: p}}}
  - {name: dr, kafka: {brokers: ["dr-1:9092"]}}
`)
	kc, name, err := loadClusterKafkaConfig(path, nil, noEnv, "tidemark-lag", "dr", true)
	if err != nil || name != "dr" || kc.Brokers[0] != "dr-1:9092" || kc.SASL.Mechanism != "" {
		t.Fatalf("dr: %+v %q %v", kc, name, err)
	}
	var lf lagFlags
	fs := pflag.NewFlagSet("lag", pflag.ContinueOnError)
	fs.StringSliceVar(&lf.brokers, "brokers", nil, "")
	registerKafkaFlags(fs)
	if err := fs.Parse([]string{"--kafka.sasl.user", "other"}); err != nil {
		t.Fatal(err)
	}
	kc, name, err = loadClusterKafkaConfig(path, fs, noEnv, "tidemark-lag", "prod", true)
	if err != nil || name != "prod" || kc.Brokers[0] != "prod-1:9092" || kc.SASL.Mechanism != "PLAIN" || kc.SASL.User != "other" {
		t.Fatalf("prod with a flag over it: %+v %q %v", kc, name, err)
	}
	if _, _, err := loadClusterKafkaConfig(path, nil, noEnv, "x", "staging", true); err == nil ||
		!strings.Contains(err.Error(), `--cluster "staging"`) || !strings.Contains(err.Error(), "prod, dr") {
		t.Errorf("unknown cluster: %v", err)
	}
	if _, _, err := loadClusterKafkaConfig(path, nil, noEnv, "x", "default", false); err == nil ||
		!strings.Contains(err.Error(), "choose one with --cluster") {
		t.Errorf("no --cluster with two clusters: %v", err)
	}
	one := writeConfig(t, "clusters:\n  - {name: only, kafka: {brokers: [\"o:9092\"]}}\n")
	if kc, name, err := loadClusterKafkaConfig(one, nil, noEnv, "x", "default", false); err != nil || name != "only" || kc.Brokers[0] != "o:9092" {
		t.Errorf("one cluster, no --cluster: %+v %q %v", kc, name, err)
	}
}

// TestPrintConfigShowsWhatRuns: --print-config in clusters: mode prints each cluster's blocks and no top-level kafka,
// lag or collector block (an error if set there); without a clickhouse block it prints no clickhouse or migrate.
func TestPrintConfigShowsWhatRuns(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("clusters:\n  - name: prod\n    kafka: {brokers: ['k1:9092']}\n  - name: dr\n    kafka: {brokers: ['k2:9092']}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(p, nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	out, err := dumpRunConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := yaml.Unmarshal(out, &top); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"kafka", "lag", "collector", "clickhouse", "migrate"} {
		if _, ok := top[k]; ok {
			t.Errorf("--print-config has a top-level %s block:\n%s", k, out)
		}
	}
	cl, _ := top["clusters"].([]any)
	if len(cl) != 2 {
		t.Fatalf("--print-config has %d clusters, want 2:\n%s", len(cl), out)
	}
	for i, want := range []string{"k1:9092", "k2:9092"} {
		c := cl[i].(map[string]any)
		if got := fmt.Sprint(c["kafka"].(map[string]any)["brokers"]); got != "["+want+"]" {
			t.Errorf("cluster %d brokers %s, want [%s]", i, got, want)
		}
	}
	// one cluster with a clickhouse block: every block is printed
	if err := os.WriteFile(p, []byte("kafka: {brokers: ['k1:9092']}\nclickhouse: {addr: ['ch:9000']}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err = loadConfig(p, nil, noEnv); err != nil {
		t.Fatal(err)
	}
	if out, err = dumpRunConfig(cfg); err != nil {
		t.Fatal(err)
	}
	top = nil
	if err := yaml.Unmarshal(out, &top); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"kafka", "lag", "collector", "clickhouse", "migrate"} {
		if _, ok := top[k]; !ok {
			t.Errorf("--print-config of one cluster with ClickHouse lacks %s:\n%s", k, out)
		}
	}
}
