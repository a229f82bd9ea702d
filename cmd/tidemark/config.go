package main

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"

	"github.com/tidemark/tidemark/collector"
	"github.com/tidemark/tidemark/internal/confload"
	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/tracing"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/latency"
)

// runConfig is everything `tidemark run` reads. Sources, later ones winning: the YAML file (--config), environment
// variables, flags. Unknown keys anywhere are an error naming the key. testdata/config.yaml sets every option.
type runConfig struct {
	// Clusters are the Kafka clusters watched, each by name with its own client settings, lag options and collector
	// paths (clusterConfig). Without it, the top-level kafka, lag and collector blocks are one cluster named
	// "default"; with it, those blocks must not be set (clusterList). A cluster is named only here (clusters[].name).
	Clusters   []clusterConfig    `yaml:"clusters"`
	Kafka      kafka.ClientConfig `yaml:"kafka"`
	ClickHouse store.Config       `yaml:"clickhouse"`
	// Migrate applies pending schema migrations at start (default true); when false a missing or outdated schema is
	// an error.
	Migrate   *bool              `yaml:"migrate"`
	Latency   latencyConfig      `yaml:"latency"`
	Collector collector.Config   `yaml:"collector"`
	Lag       lagexporter.Config `yaml:"lag"`
	// LagEnabled is lag.enabled's deprecated spelling: it sets every cluster's lag.enabled that is not set.
	LagEnabled *bool      `yaml:"lag_enabled" deprecated:"lag.enabled"`
	HTTP       httpConfig `yaml:"http"`
	Log        logConfig  `yaml:"log"`
	// Tracing exports the collector's hop spans over OTLP (default off).
	Tracing tracing.Config `yaml:"tracing"`
	// clickHouse is set when the configuration has a clickhouse block (file, TIDEMARK_CLICKHOUSE_* variables or
	// --clickhouse.* flags). Without one, `tidemark run` is a pure lag exporter: no ClickHouse, no collector.
	clickHouse bool
	// warnings are the configuration's problems that do not stop it (deprecated keys), logged at start.
	warnings []string
	// MemoryLimitMB is the process's memory budget in MiB; 0 (default) sets none. Go's soft memory limit
	// (runtime/debug.SetMemoryLimit) is set to 90 % of it, the rest being room for what the runtime does not count
	// (the binary's code pages), and the writer's bounds not set explicitly are sized from it (budgetWriter).
	// cmd/bench-cardinality measures the peak RSS against it.
	MemoryLimitMB int `yaml:"memory_limit_mb"`
}

// clusterConfig is one Kafka cluster `tidemark run` watches: its name (the `cluster` label of every series about
// it, the `cluster` column of every row from it; lag.cluster is set to it), its client settings (the kafka: block),
// its lag exporter options and its collector paths.
type clusterConfig struct {
	Name      string             `yaml:"name"`
	Kafka     kafka.ClientConfig `yaml:"kafka"`
	Lag       lagexporter.Config `yaml:"lag"`
	Collector collector.Config   `yaml:"collector"`
}

// DefaultClusterName names the cluster of a configuration without clusters:: its rows and
// series carry cluster="default", and migration 0006 gives it to the rows stored before the cluster column existed.
const DefaultClusterName = "default"

// clusterNamePattern is what a cluster name may be: it is a label value, a ClickHouse string and part of Kafka
// group names (the lag exporter's lease group tidemark-lag-exporter-<cluster>), so Kafka's group-name alphabet.
var clusterNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// clusterList returns the clusters to run, defaults applied: the clusters: entries, or the top-level kafka, lag and
// collector blocks as one cluster (named "default", or by the deprecated lag.cluster).
func (c *runConfig) clusterList() []*clusterConfig {
	if len(c.Clusters) == 0 {
		return []*clusterConfig{{Name: c.Lag.Cluster, Kafka: c.Kafka, Lag: c.Lag, Collector: c.Collector}}
	}
	out := make([]*clusterConfig, len(c.Clusters))
	for i := range c.Clusters {
		out[i] = &c.Clusters[i]
	}
	return out
}

// latencyConfig is the part of latency.Config that is configurable (its defaults are the engine's).
type latencyConfig struct {
	// Window of clock brackets and sync exchanges (default 2m); EnvelopeWindow of causal envelopes (default 1m).
	Window         time.Duration `yaml:"window"`
	EnvelopeWindow time.Duration `yaml:"envelope_window"`
	// SkewTolerance: see latency.Config (default 2ms).
	SkewTolerance time.Duration `yaml:"skew_tolerance"`
	// MaxSkew: a stamp further than this on the impossible side of the append time is invalid (default 1h).
	MaxSkew time.Duration `yaml:"max_skew"`
	// MaxAge: a stamp further than this on the normal side is invalid (default 400 days).
	MaxAge time.Duration `yaml:"max_age"`
	// MaxPaths bounds the engine's per-(group, topic, partition) state (default 20000; latency.Config.MaxPaths).
	MaxPaths int `yaml:"max_paths"`
	// MaxHosts bounds the host clocks the engine keeps an offset estimate for, ~5 KB each (default 10000, or from
	// memory_limit_mb: budgetHosts; latency.Config.MaxHosts). Hosts idle for collector.idle_ttl are forgotten too.
	MaxHosts int `yaml:"max_hosts"`
	// FixUnits converts stamps in a clearly wrong unit (µs or ns declared as ms) instead of dropping them, flagged
	// and counted by reason (latency.Config.FixUnits; default false).
	FixUnits bool `yaml:"fix_units"`
}

type httpConfig struct {
	// Listen is the address of /metrics, /healthz, /readyz and the time-sync endpoint (default :9300).
	Listen string `yaml:"listen"`
	// ShutdownTimeout bounds the graceful shutdown of the HTTP server (default 10s).
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// Pprof serves Go's profiles under /debug/pprof/ (net/http/pprof) on the same listener (default false): CPU,
	// heap and allocation profiles of the running daemon, as docs/performance.md takes them.
	Pprof bool `yaml:"pprof"`
}

type logConfig struct {
	Level  string `yaml:"level"`  // debug, info (default), warn, error
	Format string `yaml:"format"` // text (default) or json
}

func (c *runConfig) setDefaults() {
	t := true
	if c.Migrate == nil {
		c.Migrate = &t
	}
	c.budgetWriter()
	c.budgetHosts()
	c.Kafka.SetDefaults()
	c.ClickHouse.SetDefaults()
	c.Collector.SetDefaults()
	c.Lag.SetDefaults()
	for i := range c.Clusters {
		cl := &c.Clusters[i]
		if cl.Lag.Cluster == "" {
			cl.Lag.Cluster = cl.Name
		}
		cl.Kafka.SetDefaults()
		cl.Collector.SetDefaults()
		cl.Lag.SetDefaults()
	}
	c.Tracing.SetDefaults()
	if c.HTTP.Listen == "" {
		c.HTTP.Listen = ":9300"
	}
	if c.HTTP.ShutdownTimeout == 0 {
		c.HTTP.ShutdownTimeout = 10 * time.Second
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Log.Format == "" {
		c.Log.Format = "text"
	}
}

// budgetWriter sizes the writer's bounds the user did not set from memory_limit_mb (none without it). A row the
// writer holds costs about four times its estimated bytes (the writer's copy, the collector's kept for a re-read
// after a give-up, the encoded columns of the batches in flight), and each row of batch_rows about 3.5 KB more (the
// columns and compression buffers of the batch prepared and the one being sent, the row buffers' capacity); so
// max_bytes is an eighth of the budget and batch_rows 40 per MiB, each with its writer default as the ceiling:
// about half the budget for the writer, the rest for Kafka fetches, the dedup window, the engine, series and the
// garbage collector's headroom. At memory_limit_mb 250: max_bytes 31.25 MiB, batch_rows 10,000 (max_rows 40,000).
func (c *runConfig) budgetWriter() {
	mb, w := c.MemoryLimitMB, &c.ClickHouse.Writer
	if mb <= 0 {
		return
	}
	if w.MaxBytes == 0 {
		w.MaxBytes = min(store.DefaultWriterMaxBytes, max(1<<20, int64(mb)<<20/8))
	}
	if w.BatchRows == 0 {
		w.BatchRows = min(store.DefaultWriterBatchRows, max(1000, 40*mb))
	}
}

// budgetHosts sizes latency.max_hosts from memory_limit_mb when the user did not set it: a sixteenth of the budget
// at ~5 KB a host (the engine's two offset windows), at least 100 and at most the engine's default 10,000. At
// memory_limit_mb 250: 3,200 hosts, 16 MiB. Each cluster has its own engine, so the bound is per cluster.
func (c *runConfig) budgetHosts() {
	if mb := c.MemoryLimitMB; mb > 0 && c.Latency.MaxHosts == 0 {
		c.Latency.MaxHosts = min(10000, max(100, mb<<20/16/(5<<10)))
	}
}

func (c *runConfig) validate() error {
	var errs []error
	if len(c.Clusters) == 0 {
		errs = append(errs, c.validateCluster("", &c.Kafka, &c.Lag, &c.Collector)...)
	} else {
		seen := map[string]int{}
		for i := range c.Clusters {
			cl := &c.Clusters[i]
			at := fmt.Sprintf("clusters[%d]", i)
			switch j, dup := seen[cl.Name]; {
			case cl.Name == "":
				errs = append(errs, fmt.Errorf("%s.name: every cluster needs a name (the cluster label and column)", at))
			case !clusterNamePattern.MatchString(cl.Name):
				errs = append(errs, fmt.Errorf("%s.name: %q: want 1 to 63 of A-Z a-z 0-9 . _ -, starting with a letter or digit", at, cl.Name))
			case dup:
				errs = append(errs, fmt.Errorf("%s.name: %q is also the name of clusters[%d]", at, cl.Name, j))
			default:
				seen[cl.Name] = i
			}
			if cl.Lag.Cluster != cl.Name {
				errs = append(errs, fmt.Errorf("%s.lag.cluster: %q differs from the cluster's name %q (remove it: the name is the label)", at, cl.Lag.Cluster, cl.Name))
			}
			errs = append(errs, c.validateCluster(at+".", &cl.Kafka, &cl.Lag, &cl.Collector)...)
		}
	}
	if err := c.ClickHouse.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("clickhouse: %w", err))
	}
	if !c.clickHouse {
		if c.Tracing.Enabled { // the spans are the collector's hops: a lag exporter alone has none to export
			errs = append(errs, errors.New("tracing.enabled: hop spans come from the collector's paths, which need a clickhouse block"))
		}
	}
	if err := c.Tracing.Validate(); err != nil {
		errs = append(errs, err)
	}
	// net.Listen's form: host:port with an optional host; "9300" alone fails only when the server starts.
	if _, port, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
		errs = append(errs, fmt.Errorf("http.listen: want host:port (\":9300\", \"0.0.0.0:9300\"), got %q", c.HTTP.Listen))
	} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		errs = append(errs, fmt.Errorf("http.listen: the port of %q must be a number in [0, 65535]", c.HTTP.Listen))
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level))
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log.format: %q is not one of text, json", c.Log.Format))
	}
	if c.MemoryLimitMB < 0 {
		errs = append(errs, fmt.Errorf("memory_limit_mb: must be >= 0, got %d", c.MemoryLimitMB))
	}
	if c.HTTP.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("http.shutdown_timeout: must be > 0, got %v", c.HTTP.ShutdownTimeout))
	}
	return errors.Join(errs...)
}

// validateCluster checks one cluster's blocks; at prefixes every key ("" for the top-level blocks, "clusters[1]."
// for an entry of clusters:), so each line names the key as the file writes it.
// Validate compiles the lag exporter's patterns in place, so it is called on the configuration's own blocks.
func (c *runConfig) validateCluster(at string, kc *kafka.ClientConfig, lag *lagexporter.Config, col *collector.Config) []error {
	var errs []error
	if err := kc.ValidateAt(at + "kafka"); err != nil {
		errs = append(errs, err)
	}
	if !c.clickHouse && !*lag.Enabled {
		errs = append(errs, fmt.Errorf("%slag.enabled: false and no clickhouse block: nothing to run (enable the lag exporter, or configure ClickHouse and the collector)", at))
	}
	if !c.clickHouse {
		// Paths write to ClickHouse: never guess an address for them (the default would silently point at
		// 127.0.0.1:9000); a lag exporter alone needs no database.
		for _, p := range []struct {
			key string
			on  bool
		}{{"collector.receipts.enabled", col.Receipts.Enabled}, {"collector.probe.enabled", col.Probe.Enabled},
			{"collector.tap.enabled", col.Tap.Enabled}} {
			if p.on {
				errs = append(errs, fmt.Errorf("%s%s: the collector writes to ClickHouse: add a clickhouse block (clickhouse.addr)", at, p.key))
			}
		}
	}
	if err := col.Validate(); err != nil {
		errs = append(errs, confload.PrefixLines(at, err)) // its lines name collector.…
	}
	if err := lag.ValidateAt(at + "lag"); err != nil {
		errs = append(errs, err) // every line names its full key (lag.…)
	}
	if lc := c.engineConfig(&clusterConfig{Collector: *col}); true {
		lc.SetDefaults()
		if err := lc.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("latency: %w", err))
		}
	}
	return errs
}

// sources is how `tidemark run` and the lag commands read their configuration: the file up to maxConfigBytes, then
// the TIDEMARK_ variables (envPrefix, envAliases), then flags.
var sources = &confload.Loader{
	EnvPrefix: envPrefix,
	Aliases:   envAliases,
	// With clusters: each cluster has its own kafka: block, so a kafka.* alias has no single key to fill.
	AliasBlocked: func(k *koanf.Koanf, key string) bool { return strings.HasPrefix(key, "kafka.") && k.Exists("clusters") },
	ListKeys:     listKeys,
	Defaulted:    defaultedStrings,
	MaxBytes:     maxConfigBytes,
}

// clusterLags returns the lag: block of every clusters: entry.
func clusterLags(cls []clusterConfig) []*lagexporter.Config {
	out := make([]*lagexporter.Config, len(cls))
	for i := range cls {
		out[i] = &cls[i].Lag
	}
	return out
}

// lagEnabled reports whether some cluster runs its lag exporter.
func (c *runConfig) lagEnabled() bool {
	for _, cl := range c.clusterList() {
		if *cl.Lag.Enabled {
			return true
		}
	}
	return false
}

// engineConfig is the latency engine's configuration for cluster cl (each cluster has its own engine: paths are
// keyed by group, topic and partition, which two clusters may share).
func (c *runConfig) engineConfig(cl *clusterConfig) latency.Config {
	return latency.Config{
		ReferenceHost: cl.Collector.ReferenceHost,
		Bounds:        latency.Bounds{MaxAge: c.Latency.MaxAge, MaxSkew: c.Latency.MaxSkew},
		Window:        c.Latency.Window, EnvelopeWindow: c.Latency.EnvelopeWindow, SkewTolerance: c.Latency.SkewTolerance,
		MaxPaths: c.Latency.MaxPaths, MaxHosts: c.Latency.MaxHosts,
		// The collector's distributions are its rows in ClickHouse and its live Prometheus histograms; the engine's
		// own sketches would never be read and would be most of its memory (up to ~30 KB a path).
		NoSketches: true,
		FixUnits:   c.Latency.FixUnits,
	}
}

// envPrefix starts every configuration variable. A key's dots are written as double underscores:
// TIDEMARK_COLLECTOR__TAP__SAMPLE_RATE=0.1 sets collector.tap.sample_rate. Two more variables are the ones the local
// stack exports, TIDEMARK_KAFKA_BROKERS and TIDEMARK_CLICKHOUSE_ADDR (envAliases): they fill kafka.brokers and
// clickhouse.addr only when neither the file nor a double-underscore variable sets them, so a config file that
// names its own cluster (stack.sh's secure files) is used as it is in a shell that has the stack's environment.
// Other TIDEMARK_ variables without a double underscore are not configuration and are ignored.
const envPrefix = "TIDEMARK_"

// envAliases maps the local stack's variables to the keys they fill when nothing else sets them.
var envAliases = map[string]string{"TIDEMARK_KAFKA_BROKERS": "kafka.brokers", "TIDEMARK_CLICKHOUSE_ADDR": "clickhouse.addr"}

// loadConfig reads the file at path (may be empty), then the environment (environ, nil: os.Environ), then the
// changed flags of fs, and returns the validated configuration with defaults.
func loadConfig(path string, fs *pflag.FlagSet, environ func() []string) (*runConfig, error) {
	k, err := sources.Load(path, fs, environ, func(name string) string {
		if name == "config" || name == "print-config" {
			return "" // the file itself and an action, not settings
		}
		return name
	})
	if err != nil {
		return nil, err
	}
	var cfg runConfig
	if err := confload.Decode(k, "", &cfg); err != nil {
		return nil, err
	}
	cfg.clickHouse = k.Exists("clickhouse")
	cfg.warnings = confload.DeprecatedKeys(k, reflect.TypeOf(runConfig{}))
	if cfg.LagEnabled != nil {
		if k.Exists("lag.enabled") {
			return nil, errors.New("config: lag_enabled: set lag.enabled only (lag_enabled is its deprecated spelling)")
		}
		for _, cl := range append([]*lagexporter.Config{&cfg.Lag}, clusterLags(cfg.Clusters)...) {
			if cl.Enabled == nil {
				cl.Enabled = cfg.LagEnabled
			}
		}
	}
	if k.Exists("clusters") {
		// One place per setting: a top-level block beside clusters: would be silently ignored or silently merged.
		var both []error
		for _, key := range []string{"kafka", "lag", "collector"} {
			if k.Exists(key) {
				both = append(both, fmt.Errorf("%s: set per cluster (clusters[].%s) when clusters: is used", key, key))
			}
		}
		if len(both) > 0 {
			return nil, fmt.Errorf("config: %w", errors.Join(both...))
		}
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &cfg, nil
}
