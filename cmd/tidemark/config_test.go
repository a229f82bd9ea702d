package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/tidemark/tidemark/collector"
	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/kafkaconfig"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/tlsconf"
	"github.com/tidemark/tidemark/internal/tracing"
	"github.com/tidemark/tidemark/lagexporter"
)

func noEnv() []string { return nil }

func TestConfigFileSetsEveryOption(t *testing.T) {
	got, err := loadConfig("testdata/config.yaml", nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	f := false
	ratio := 0.1
	kc := kafka.ClientConfig{
		Brokers: []string{"kafka-1:9092", "kafka-2:9092"}, ClientID: "tidemark-test",
		TLS: tlsconf.Config{Enabled: true, CAFile: "/etc/tidemark/ca.pem", CertFile: "/etc/tidemark/client.pem",
			KeyFile: "/etc/tidemark/client.key", ServerName: "kafka.internal", MinVersion: "1.3"},
		SASL: kafkaconfig.SASL{Mechanism: "SCRAM-SHA-512", User: "tidemark", PasswordFile: "/etc/tidemark/kafka/password"},
	}
	want := &runConfig{
		Kafka: kc,
		ClickHouse: store.Config{
			Addr: []string{"ch-1:9000", "ch-2:9000"}, Database: "tm", User: "writer", PasswordFile: "/etc/tidemark/clickhouse/password",
			TLS: tlsconf.Config{Enabled: true, CAFile: "/etc/tidemark/ch-ca.pem", CertFile: "/etc/tidemark/ch-client.pem",
				KeyFile: "/etc/tidemark/ch-client.key", ServerName: "clickhouse.internal", MinVersion: "1.3"},
			Dialect: "legacy", ClickHouseCluster: "tidemark_ch", DialTimeout: 3 * time.Second, MaxExecutionTime: 30 * time.Second,
			RetentionDays: 7, RollupRetentionDays: 30,
			Writer: store.WriterConfig{BatchRows: 20000, FlushInterval: 2 * time.Second, MaxRows: 100000, MaxBytes: 33554432,
				DedupWindow: 1000, RetryInitial: 200 * time.Millisecond, RetryMax: 5 * time.Second,
				RetryMaxElapsed: 10 * time.Minute, InsertTimeout: 20 * time.Second, StallTimeout: 45 * time.Second},
		},
		clickHouse:    true,
		Migrate:       &f,
		MemoryLimitMB: 250,
		Latency: latencyConfig{Window: 3 * time.Minute, EnvelopeWindow: 90 * time.Second, SkewTolerance: 3 * time.Millisecond,
			MaxSkew: 30 * time.Minute, MaxAge: 720 * time.Hour, MaxPaths: 5000, MaxHosts: 2000, FixUnits: true},
		Collector: collector.Config{
			ReferenceHost: "collector-a", DeadLetterTopic: "tm-dlq", ReplayStateTopic: "tm-replay-state", ClockOffsetInterval: 5 * time.Second, MaxBatch: 2000,
			MaxWait: 200 * time.Millisecond, DrainTimeout: 20 * time.Second, SLOThresholds: []time.Duration{250 * time.Millisecond, time.Second},
			Receipts: collector.ReceiptsConfig{Enabled: true, Topic: "tm-receipts", Group: "tm-receipts-g", Partitions: 12},
			Probe: collector.ProbeConfig{Enabled: true, Topic: "tm-probe", Group: "tm-probe-g", InstanceID: "tm-replica-0", Interval: 500 * time.Millisecond,
				LossTimeout: 15 * time.Second, Partitions: 6, ReconcileInterval: 5 * time.Minute, Replication: 2},
			Tap: collector.TapConfig{Enabled: true, Topics: []string{"orders", "payments"}, Group: "tm-tap-g", SampleRate: 0.25, FromBeginning: true},
			Spans: collector.SpansConfig{Enabled: true, Topic: "tm-spans", Group: "tm-spans-g", Partitions: 4, JoinWait: 7 * time.Second,
				JoinWindow: 90 * time.Second, MaxPending: 5000, OTLPHTTPListen: "127.0.0.1:14318", OTLPGRPCListen: "127.0.0.1:14317",
				ConsumerGroups: map[string]string{"py-orders": "orders-py"}},
			Traces:  collector.TracesConfig{SampleRatio: &ratio, KeepOver: 2 * time.Second},
			IdleTTL: 30 * time.Minute, MaxLiveSeries: 500,
			Metadata: collector.MetadataConfig{TTL: time.Minute, MissingTTL: 2 * time.Minute, MaxUnknownTopics: 200},
		},
		Lag: lagexporter.Config{
			Enabled: &f, Cluster: "default", PollInterval: 15 * time.Second, CycleTimeout: 10 * time.Second, Granularity: lagexporter.GranularityTopic,
			GroupAllow: []string{"app-.*"}, GroupDeny: []string{"tidemark-.*"}, TopicAllow: []string{"orders|payments"}, TopicDeny: []string{"__.*"},
			Groups: []lagexporter.GroupRule{{Match: "billing-.*", Isolation: lagexporter.ReadCommitted, Reset: lagexporter.ResetLatest}},
			Status: lagexporter.StatusConfig{Window: 5, StopAfter: 2 * time.Minute, WarnTimeLag: 30 * time.Second,
				ErrTimeLag: 5 * time.Minute, WarnOffsetLag: 1000, ErrOffsetLag: 100000, SimpleConsumerWindow: 90 * time.Second,
				AheadReads: 3},
			ReadRecordTimestamps: &f, KafkaExporterCompat: true, HistorySize: 32,
			Election: lagexporter.ElectionConfig{Enabled: true, Group: "tm-lag-elect", Topic: "tm-lag-lease", SessionTimeout: 15 * time.Second},
		},
		HTTP: httpConfig{Listen: "127.0.0.1:9400", ShutdownTimeout: 3 * time.Second, Pprof: true},
		Log:  logConfig{Level: "debug", Format: "json"},
		Tracing: tracing.Config{Enabled: true, Protocol: "http", Endpoint: "otel-collector:4318", URLPath: "/otlp/v1/traces",
			Headers: map[string]string{"x-tenant": "payments"}, Compression: "none", Timeout: 5 * time.Second, QueueSize: 4096,
			BatchSize: 256, BatchTimeout: 2 * time.Second, ServiceName: "tidemark-eu",
			TLS: tlsconf.Config{Enabled: true, CAFile: "/etc/tidemark/otel-ca.pem", CertFile: "/etc/tidemark/otel.pem", KeyFile: "/etc/tidemark/otel.key"}},
	}
	// The lag config compiles its patterns in Validate (unexported fields); do the same to the expected value.
	want.setDefaults()
	if err := want.validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded config differs:\n got %+v\nwant %+v", *got, *want)
	}
}

// TestMemoryLimitSizesTheHosts: memory_limit_mb sizes latency.max_hosts (a sixteenth of it at 5 KB a host, 100 to
// 10,000); an explicit key is kept; without a limit the engine's default (10,000) stands.
func TestMemoryLimitSizesTheHosts(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"no limit: the engine's default", "", 10000},
		{"250 MiB", "memory_limit_mb: 250\n", 3200}, // 250 MiB / 16 / 5 KiB
		{"large limit: the default is the ceiling", "memory_limit_mb: 4096\n", 10000},
		{"tiny limit: the floor", "memory_limit_mb: 4\n", 100},
		{"explicit key wins", "memory_limit_mb: 250\nlatency: {max_hosts: 50000}\n", 50000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := loadConfig(writeConfig(t, "kafka: {brokers: [a:1]}\n"+tc.body), nil, noEnv)
			if err != nil {
				t.Fatal(err)
			}
			lc := cfg.engineConfig(cfg.clusterList()[0])
			lc.SetDefaults()
			if lc.MaxHosts != tc.want {
				t.Fatalf("engine max hosts %d, want %d", lc.MaxHosts, tc.want)
			}
		})
	}
}

// TestMemoryLimitSizesTheWriter: memory_limit_mb sizes the writer's max_bytes (an eighth of it) and batch_rows (40
// per MiB), each at most its writer default; keys set explicitly are kept; without a limit the defaults stand.
func TestMemoryLimitSizesTheWriter(t *testing.T) {
	for _, tc := range []struct {
		name, body         string
		batchRows, maxRows int
		maxBytes           int64
	}{
		{"no limit", "", 50000, 200000, 64 << 20},
		{"250 MiB", "memory_limit_mb: 250\n", 10000, 40000, 250 << 20 / 8},
		{"large limit: the defaults are the ceiling", "memory_limit_mb: 4096\n", 50000, 200000, 64 << 20},
		{"tiny limit: the floors", "memory_limit_mb: 4\n", 1000, 4000, 1 << 20},
		{"explicit keys win", "memory_limit_mb: 250\nclickhouse: {writer: {batch_rows: 30000, max_bytes: 100000000}}\n", 30000, 120000, 100000000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := loadConfig(writeConfig(t, "kafka: {brokers: [a:1]}\n"+tc.body), nil, noEnv)
			if err != nil {
				t.Fatal(err)
			}
			if w := cfg.ClickHouse.Writer; w.BatchRows != tc.batchRows || w.MaxRows != tc.maxRows || w.MaxBytes != tc.maxBytes {
				t.Fatalf("writer batch_rows %d max_rows %d max_bytes %d; want %d %d %d", w.BatchRows, w.MaxRows, w.MaxBytes,
					tc.batchRows, tc.maxRows, tc.maxBytes)
			}
		})
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name, body string
		want       string // a substring the error must contain: the offending key
	}{
		{"unknown top-level key", "kafka: {brokers: [a:1]}\nkafak: {}\n", "kafak"},
		{"unknown nested key (typo)", "kafka: {brokers: [a:1]}\ncollector: {probe: {intervall: 1s}}\n", "intervall"},
		{"bad duration", "kafka: {brokers: [a:1]}\ncollector: {probe: {interval: soon}}\n", "interval"},
		{"validation names the key", "kafka: {brokers: [a:1]}\ncollector: {tap: {enabled: true}}\n", "collector.tap.topics"},
		{"sample rate out of range", "kafka: {brokers: [a:1]}\ncollector: {tap: {topics: [x], sample_rate: 2}}\n", "collector.tap.sample_rate"},
		// 0 is not "unset" inside a list: a threshold no latency can meet is a mistake, named by its index.
		{"SLO threshold out of range", "kafka: {brokers: [a:1]}\ncollector: {slo_thresholds: [500ms, 0s]}\n", "collector.slo_thresholds[1]"},
		{"enum lists valid values", "kafka: {brokers: [a:1]}\nlog: {level: loud}\n", "debug, info, warn, error"},
		{"brokers required", "log: {level: info}\n", "kafka.brokers"},
		// lagexporter reports nested keys: every line carries the "lag." prefix (was "lag: status.window").
		// net.Listen needs host:port; a bare port passed validation and failed only after migrating.
		{"listen without a colon", "kafka: {brokers: [a:1]}\nhttp: {listen: 9300}\n", "http.listen: want host:port"},
		{"listen with a bad port", "kafka: {brokers: [a:1]}\nhttp: {listen: \":http9\"}\n", "http.listen: the port"},
		{"bad dead-letter topic", "kafka: {brokers: [a:1]}\ncollector: {dead_letter_topic: \"bad topic!\"}\n", "collector.dead_letter_topic: "},
		{"topic name too long", "kafka: {brokers: [a:1]}\ncollector: {receipts: {topic: " + strings.Repeat("r", 250) + "}}\n", "collector.receipts.topic: "},
		{"bad tap topic", "kafka: {brokers: [a:1]}\ncollector: {tap: {enabled: true, topics: [ok, \"..\"]}}\n", "collector.tap.topics[1]: "},
		// Defaults apply to absent keys only: an explicitly empty value is named, not replaced by tidemark-receipts.
		{"explicitly empty topic", "kafka: {brokers: [a:1]}\ncollector: {receipts: {topic: \"\"}}\n", "collector.receipts.topic: must not be empty"},
		{"explicitly null listen", "kafka: {brokers: [a:1]}\nhttp: {listen: }\n", "http.listen: must not be empty"},
		{"lag keys are full paths", "kafka: {brokers: [a:1]}\nlag: {status: {window: 1}}\n", "lag.status.window: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(writeConfig(t, tc.body), nil, noEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to name %q", err, tc.want)
			}
		})
	}
}

func TestConfigEnvAndFlagsOverride(t *testing.T) {
	path := writeConfig(t, "kafka: {brokers: [file:1]}\ncollector: {probe: {interval: 2s}}\nhttp: {listen: ':1'}\n")
	environ := func() []string {
		return []string{
			"TIDEMARK_KAFKA_BROKERS=a:1,b:2",              // the local stack's variable: only where the file names none
			"TIDEMARK_COLLECTOR__PROBE__INTERVAL=250ms",   // nested key through double underscores
			"TIDEMARK_COLLECTOR__TAP__TOPICS=orders,pays", // list split on commas
			"TIDEMARK_COLLECTOR__SLO_THRESHOLDS=300ms,2s", // a list of durations
			"TIDEMARK_KAFKA_LIB=/opt/kafka/lib",           // not configuration: ignored, not an unknown key
			"HOME=/root",
		}
	}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.String("config", "", "")
	fs.String("http.listen", "", "")
	fs.String("log.level", "", "")
	if err := fs.Parse([]string{"--http.listen=:7777"}); err != nil {
		t.Fatal(err)
	}
	got, err := loadConfig(path, fs, environ)
	if err != nil {
		t.Fatal(err)
	}
	// The file names its brokers, so the local stack's TIDEMARK_KAFKA_BROKERS does not replace them.
	if !reflect.DeepEqual(got.Kafka.Brokers, []string{"file:1"}) || got.Collector.Probe.Interval != 250*time.Millisecond ||
		!reflect.DeepEqual(got.Collector.Tap.Topics, []string{"orders", "pays"}) {
		t.Fatalf("env not applied: %+v %v %v", got.Kafka.Brokers, got.Collector.Probe.Interval, got.Collector.Tap.Topics)
	}
	if want := []time.Duration{300 * time.Millisecond, 2 * time.Second}; !reflect.DeepEqual(got.Collector.SLOThresholds, want) {
		t.Fatalf("slo_thresholds from env: %v, want %v", got.Collector.SLOThresholds, want)
	}
	// Without brokers in the file the alias fills them; the double-underscore form overrides the file.
	got, err = loadConfig(writeConfig(t, "log: {level: info}\n"), nil, environ)
	if err != nil || !reflect.DeepEqual(got.Kafka.Brokers, []string{"a:1", "b:2"}) {
		t.Fatalf("alias as the fallback: %v %v", got.Kafka.Brokers, err)
	}
	got, err = loadConfig(path, nil, func() []string { return []string{"TIDEMARK_KAFKA__BROKERS=x:9"} })
	if err != nil || !reflect.DeepEqual(got.Kafka.Brokers, []string{"x:9"}) {
		t.Fatalf("TIDEMARK_KAFKA__BROKERS over the file: %v %v", got.Kafka.Brokers, err)
	}
	got, err = loadConfig(path, fs, environ)
	if err != nil {
		t.Fatal(err)
	}
	// The flag wins over the file; an unchanged flag (log.level) does not override the default.
	if got.HTTP.Listen != ":7777" || got.Log.Level != "info" {
		t.Fatalf("flags: listen %q level %q", got.HTTP.Listen, got.Log.Level)
	}
}

// TestConfigClickHouseBlock: without a clickhouse block `tidemark run` is a pure lag exporter; the block may come
// from the file, the environment or a flag; collector paths without one are an error naming each path's key.
func TestConfigClickHouseBlock(t *testing.T) {
	lagOnly := writeConfig(t, "kafka: {brokers: [k:9092]}\n")
	c, err := loadConfig(lagOnly, nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.clickHouse {
		t.Fatal("no clickhouse block, yet ClickHouse is configured")
	}
	for name, env := range map[string][]string{
		"stack variable": {"TIDEMARK_CLICKHOUSE_ADDR=ch:9000"},
		"nested key":     {"TIDEMARK_CLICKHOUSE__DATABASE=tm"},
	} {
		c, err := loadConfig(lagOnly, nil, func() []string { return env })
		if err != nil || !c.clickHouse {
			t.Errorf("%s %v: clickHouse = %v, err %v; want configured", name, env, c != nil && c.clickHouse, err)
		}
	}
	fs := newRunCmd().Flags()
	if err := fs.Parse([]string{"--clickhouse.addr", "ch:9000"}); err != nil {
		t.Fatal(err)
	}
	if c, err := loadConfig(lagOnly, fs, noEnv); err != nil || !c.clickHouse {
		t.Errorf("--clickhouse.addr: err %v, want ClickHouse configured", err)
	}
	if c, err := loadConfig(writeConfig(t, "kafka: {brokers: [k:9092]}\nclickhouse: {addr: [ch:9000]}\n"), nil, noEnv); err != nil || !c.clickHouse {
		t.Errorf("clickhouse block in the file: err %v, want ClickHouse configured", err)
	}
	_, err = loadConfig(writeConfig(t, "kafka: {brokers: [k:9092]}\ncollector: {receipts: {enabled: true}, tap: {enabled: true, topics: [t]}}\n"), nil, noEnv)
	if err == nil || !strings.Contains(err.Error(), "collector.receipts.enabled: the collector writes to ClickHouse") ||
		!strings.Contains(err.Error(), "collector.tap.enabled:") || strings.Contains(err.Error(), "collector.probe.enabled") {
		t.Errorf("collector paths without ClickHouse: err %v, want one line per enabled path", err)
	}
	_, err = loadConfig(writeConfig(t, "kafka: {brokers: [k:9092]}\ntracing: {enabled: true, endpoint: \"otel:4317\"}\n"), nil, noEnv)
	if err == nil || !strings.Contains(err.Error(), "tracing.enabled: hop spans come from the collector's paths") {
		t.Errorf("tracing without ClickHouse: err %v, want it refused", err)
	}
	_, err = loadConfig(writeConfig(t, "kafka: {brokers: [k:9092]}\nlag: {enabled: false}\n"), nil, noEnv)
	if err == nil || !strings.Contains(err.Error(), "nothing to run") {
		t.Errorf("nothing enabled: err %v, want nothing to run", err)
	}
}
