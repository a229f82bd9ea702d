package collector

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tidemark/tidemark/internal/kafka"
)

// Config configures the collector's paths. Zero values take the defaults of SetDefaults; every key is documented
// in docs/collector.md and shown in cmd/tidemark/testdata/config.yaml.
type Config struct {
	// ReferenceHost names the collector's own clock, the reference every stamp is mapped onto.
	ReferenceHost string `yaml:"reference_host"`
	// DeadLetterTopic receives records that do not decode (default tidemark-dead-letters).
	DeadLetterTopic string `yaml:"dead_letter_topic"`
	// ReplayStateTopic is the compacted topic the replay trackers' checkpoints are kept in (receipts and commit
	// bounds), so that a restarted collector classifies re-read records as the first time (default
	// tidemark-replay-state; created with one partition, cleanup.policy=compact).
	ReplayStateTopic string         `yaml:"replay_state_topic"`
	Receipts         ReceiptsConfig `yaml:"receipts"`
	Probe            ProbeConfig    `yaml:"probe"`
	Tap              TapConfig      `yaml:"tap"`
	Spans            SpansConfig    `yaml:"spans"`
	// ClockOffsetInterval is how often the engine's clock-offset estimates are written to clock_offsets (default 10 s).
	ClockOffsetInterval time.Duration `yaml:"clock_offset_interval"`
	// MaxBatch and MaxWait shape the batches a path hands the writer per partition (defaults 1000, 100 ms). A batch of
	// the receipts path is also cut at ReceiptsBatchRows receipts (its records carry up to 4,096 each).
	MaxBatch int           `yaml:"max_batch"`
	MaxWait  time.Duration `yaml:"max_wait"`
	// DrainTimeout bounds how long a path waits, when it stops or loses partitions, for its rows to be acknowledged
	// so their offsets are committed (default 10 s). Rows still unacknowledged then are re-read later.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// SLOThresholds are the end-to-end latency thresholds of the SLOs in use (default [500ms], DefaultSLOThreshold).
	// Each is a bucket boundary of tidemark_e2e_latency_seconds and tidemark_stage_latency_seconds, whose other
	// boundaries scale with the first (LatencyBuckets); a burn-rate rule selects `le="<threshold in s>"`.
	SLOThresholds []time.Duration `yaml:"slo_thresholds"`
	// Traces configures the hop spans added to producers' traces while tracing is on (traces.go).
	Traces TracesConfig `yaml:"traces"`
	// Metadata bounds the topic metadata cache the receipts and tap paths read leaders and timestamp types from.
	Metadata MetadataConfig `yaml:"metadata"`
	// IdleTTL: the live latency series of a (group, topic), and the latency engine's state of a (group, topic,
	// partition), are deleted after this long without a record or commit of theirs (default 15m). Their rows stay
	// in ClickHouse; a path that comes back starts afresh.
	IdleTTL time.Duration `yaml:"idle_ttl"`
	// MaxLiveSeries is the most (group, topic) pairs with live latency histograms at once (default 1000; each pair
	// has up to 5 histograms of len(buckets)+3 series). Receipts of further pairs are stored in ClickHouse as usual
	// but not observed in the histograms, and counted (tidemark_collector_live_overflow_total).
	MaxLiveSeries int `yaml:"max_live_series"`
}

// MetadataConfig bounds the topic metadata cache (internal/kafka.Metadata): lookups run in the background, answers
// are cached, and names the cluster does not know are bounded.
type MetadataConfig struct {
	// TTL: a known topic's leaders and timestamp type are refreshed in the background after this long (default 30s).
	TTL time.Duration `yaml:"ttl"`
	// MissingTTL: how long "no such topic" (or a failed lookup) is believed before the name is looked up again
	// (default 30s).
	MissingTTL time.Duration `yaml:"missing_ttl"`
	// MaxUnknownTopics bounds the topic names tracked that the cluster does not know (default 1000). A receipt that
	// needs the metadata of a further unknown name is dead-lettered (reason unknown_topic).
	MaxUnknownTopics int `yaml:"max_unknown_topics"`
}

// kafka returns the cache's configuration.
func (c MetadataConfig) kafka() kafka.MetadataConfig {
	return kafka.MetadataConfig{TTL: c.TTL, MissingTTL: c.MissingTTL, MaxUnknown: c.MaxUnknownTopics}
}

// ReceiptsConfig configures the receipts path.
type ReceiptsConfig struct {
	Enabled bool   `yaml:"enabled"`
	Topic   string `yaml:"topic"` // default tidemark-receipts
	Group   string `yaml:"group"` // default tidemark-receipts
	// Partitions of the receipts topic when the collector creates it (default 6).
	Partitions int32 `yaml:"partitions"`
}

// ProbeConfig configures the probe path.
type ProbeConfig struct {
	Enabled bool   `yaml:"enabled"`
	Topic   string `yaml:"topic"` // default tidemark-probe
	// Group is the prefix of the probe consumer group: each replica consumes as Group + "-" + InstanceID (see
	// GroupID), reading every probe partition, as kminion's end-to-end monitor does (default tidemark-probe).
	Group string `yaml:"group"`
	// InstanceID names this replica of `tidemark run` (default: the environment variable TIDEMARK_INSTANCE_ID, e.g.
	// the pod name from Kubernetes' downward API, else the host name). It travels in every probe record, and
	// a replica measures only its own probes, so N replicas sharing one probe topic report no false loss and no
	// duplicates. Replicas must have distinct ids; a restarted replica may keep its id. 1 to 128 characters of
	// [a-zA-Z0-9._-].
	InstanceID string `yaml:"instance_id"`
	// Interval between probe rounds, one probe per partition each (default 1 s).
	Interval time.Duration `yaml:"interval"`
	// LossTimeout: a probe not received this long after it was sent is lost (default 10 s).
	LossTimeout time.Duration `yaml:"loss_timeout"`
	// Partitions of the probe topic when the collector creates it: 0 means one per broker, each led by a different
	// broker.
	Partitions int32 `yaml:"partitions"`
	// ReconcileInterval is how often the probe topic's layout is reconciled so that every live broker leads one of
	// its partitions (partitions added, replicas reassigned, preferred leaders elected; default 2m; 0 is the
	// default, a negative value turns the planner off: the layout then stays as created).
	ReconcileInterval time.Duration `yaml:"reconcile_interval"`
	// Replication of the partitions the planner adds (default 3, at most the live brokers).
	Replication int `yaml:"replication"`
}

// TapConfig configures the tap path.
type TapConfig struct {
	Enabled bool     `yaml:"enabled"`
	Topics  []string `yaml:"topics"`
	Group   string   `yaml:"group"` // default tidemark-tap
	// SampleRate is the fraction of records recorded, in (0, 1] (default 1).
	SampleRate float64 `yaml:"sample_rate"`
	// FromBeginning starts a tap group without commits at the log start (default: at the end, only new records).
	FromBeginning bool `yaml:"from_beginning"`
}

// SpansConfig configures the spans path: OpenTelemetry trace data (OTLP protobuf ExportTraceServiceRequest, as the
// OpenTelemetry Collector's Kafka exporter writes it with encoding otlp_proto) read from a spans topic, whose Kafka
// messaging spans become latency rows (spans.go).
type SpansConfig struct {
	// Enabled turns the spans path on (default off).
	Enabled bool `yaml:"enabled"`
	// Topic is the spans topic the path reads, and the OTLP receiver writes (default tidemark-spans).
	Topic string `yaml:"topic"`
	// Group is the spans path's consumer group, shared by the replicas (default tidemark-spans).
	Group string `yaml:"group"`
	// Partitions of the spans topic when the collector creates it (default 6). Producers should key requests by
	// trace id (the OpenTelemetry Collector's Kafka exporter: partition_traces_by_id) so one replica sees both
	// sides of a record.
	Partitions int32 `yaml:"partitions"`
	// JoinWait is how long a consumer span waits for its record's producer span before it is stored without the
	// produce stamp (default 10s; agents export in batches every few seconds).
	JoinWait time.Duration `yaml:"join_wait"`
	// JoinWindow is how long a producer span is kept for the consumer spans of its record, one per consumer group
	// (default 2m).
	JoinWindow time.Duration `yaml:"join_window"`
	// MaxPending bounds the producer spans kept, and the consumer spans waiting, each (default 100000). Beyond it
	// the oldest producer span is forgotten, and a new consumer span is stored at once without waiting.
	MaxPending int `yaml:"max_pending"`
	// OTLPHTTPListen, when set (e.g. "127.0.0.1:4318"), makes the collector serve OTLP/HTTP protobuf trace exports
	// (POST /v1/traces) and write each request, split by trace id and keyed by it, into the spans topic: agents can
	// export straight to Tidemark without an OpenTelemetry Collector. Off by default.
	OTLPHTTPListen string `yaml:"otlp_http_listen"`
	// OTLPGRPCListen, when set (e.g. "127.0.0.1:4317"), serves the OTLP/gRPC trace service the same way. Off by
	// default.
	OTLPGRPCListen string `yaml:"otlp_grpc_listen"`
	// ConsumerGroups names the consumer group of the consumer spans that carry none, by their resource's
	// service.name (OpenTelemetry's Python confluent-kafka instrumentation leaves the group off its process spans).
	// A span that names its group keeps it. Empty by default: a consumer span without a group is dead-lettered.
	ConsumerGroups map[string]string `yaml:"consumer_groups"`
}

// SetDefaults fills zero fields with their documented defaults.
func (c *Config) SetDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defd := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ReferenceHost, "collector")
	def(&c.DeadLetterTopic, DefaultDLQTopic)
	def(&c.Receipts.Topic, "tidemark-receipts")
	def(&c.Receipts.Group, DefaultReceiptsGrp)
	def(&c.ReplayStateTopic, DefaultStateTopic)
	def(&c.Probe.Topic, DefaultProbeTopic)
	def(&c.Probe.Group, DefaultProbeGroup)
	if c.Probe.InstanceID == "" {
		c.Probe.InstanceID = defaultInstanceID()
	}
	def(&c.Tap.Group, DefaultTapGroup)
	def(&c.Spans.Topic, DefaultSpansTopic)
	def(&c.Spans.Group, DefaultSpansGroup)
	if c.Spans.Partitions == 0 {
		c.Spans.Partitions = 6
	}
	defd(&c.Spans.JoinWait, 10*time.Second)
	defd(&c.Spans.JoinWindow, 2*time.Minute)
	if c.Spans.MaxPending == 0 {
		c.Spans.MaxPending = 100000
	}
	if c.Receipts.Partitions == 0 {
		c.Receipts.Partitions = 6
	}
	defd(&c.Probe.Interval, time.Second)
	defd(&c.Probe.LossTimeout, 10*time.Second)
	defd(&c.Probe.ReconcileInterval, 2*time.Minute)
	if c.Probe.Replication == 0 {
		c.Probe.Replication = 3
	}
	if c.Tap.SampleRate == 0 {
		c.Tap.SampleRate = 1
	}
	defd(&c.ClockOffsetInterval, 10*time.Second)
	if c.MaxBatch == 0 {
		c.MaxBatch = 1000
	}
	defd(&c.MaxWait, 100*time.Millisecond)
	defd(&c.DrainTimeout, 10*time.Second)
	if len(c.SLOThresholds) == 0 {
		c.SLOThresholds = []time.Duration{DefaultSLOThreshold}
	}
	defd(&c.Metadata.TTL, 30*time.Second)
	defd(&c.Metadata.MissingTTL, 30*time.Second)
	if c.Metadata.MaxUnknownTopics == 0 {
		c.Metadata.MaxUnknownTopics = 1000
	}
	defd(&c.IdleTTL, 15*time.Minute)
	if c.MaxLiveSeries == 0 {
		c.MaxLiveSeries = 1000
	}
	c.Traces.setDefaults(c.SLOThresholds)
}

// GroupID is the probe consumer group of this replica: Group + "-" + InstanceID. Every replica reads all probe
// partitions in its own group (a shared group would split them, and each replica would miss its own probes on the
// partitions another one holds: false loss).
func (c *ProbeConfig) GroupID() string { return c.Group + "-" + c.InstanceID }

// InstanceIDEnv is the environment variable that names the replica when collector.probe.instance_id is not set
// (deploy/kubernetes sets it to the pod name through the downward API).
const InstanceIDEnv = "TIDEMARK_INSTANCE_ID"

// defaultInstanceID is $TIDEMARK_INSTANCE_ID when set (validated like the config key), else the host name with every character outside [a-zA-Z0-9._-] replaced by '_', or "tidemark" when
// the host name cannot be read. In Kubernetes it is the pod name, distinct per replica.
func defaultInstanceID() string {
	if id := os.Getenv(InstanceIDEnv); id != "" {
		return id
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "tidemark"
	}
	b := []byte(h)
	for i, c := range b {
		if !idChar(c) {
			b[i] = '_'
		}
	}
	if len(b) > maxInstanceID {
		b = b[:maxInstanceID]
	}
	return string(b)
}

// maxInstanceID is the longest instance id, in bytes: its length travels in one byte of the probe record.
const maxInstanceID = 128

func idChar(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-'
}

func validInstanceID(id string) error {
	if id == "" || len(id) > maxInstanceID {
		return fmt.Errorf("instance id %q must be 1 to %d characters long", id, maxInstanceID)
	}
	for i := 0; i < len(id); i++ {
		if !idChar(id[i]) {
			return fmt.Errorf("instance id %q: character %q is not allowed (only a-z, A-Z, 0-9, '.', '_', '-')", id, id[i])
		}
	}
	return nil
}

// Validate reports every invalid field, each naming its key. This is one flat list of independent checks, one or
// two per key; it is easier to read whole.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("collector.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if c.Receipts.Partitions < 1 {
		bad("receipts.partitions", "must be >= 1, got %d", c.Receipts.Partitions)
	}
	if c.Probe.Interval < 10*time.Millisecond {
		bad("probe.interval", "must be >= 10ms, got %v", c.Probe.Interval)
	}
	if c.Probe.LossTimeout <= c.Probe.Interval {
		bad("probe.loss_timeout", "must be longer than probe.interval (%v), got %v", c.Probe.Interval, c.Probe.LossTimeout)
	}
	if err := validInstanceID(c.Probe.InstanceID); err != nil {
		bad("probe.instance_id", "%v", err)
	}
	if c.Probe.Partitions < 0 {
		bad("probe.partitions", "must be >= 0, got %d", c.Probe.Partitions)
	}
	if c.Probe.ReconcileInterval > 0 && c.Probe.ReconcileInterval < time.Second {
		bad("probe.reconcile_interval", "must be >= 1s (or negative: off), got %v", c.Probe.ReconcileInterval)
	}
	if c.Probe.Replication < 1 || c.Probe.Replication > 32767 {
		bad("probe.replication", "must be in [1, 32767], got %d", c.Probe.Replication)
	}
	if c.Tap.Enabled && len(c.Tap.Topics) == 0 {
		bad("tap.topics", "the tap is enabled but no topics are listed")
	}
	if !(c.Tap.SampleRate > 0 && c.Tap.SampleRate <= 1) {
		bad("tap.sample_rate", "must be in (0, 1], got %v", c.Tap.SampleRate)
	}
	if c.Spans.Partitions < 1 {
		bad("spans.partitions", "must be >= 1, got %d", c.Spans.Partitions)
	}
	if c.Spans.JoinWait < 0 {
		bad("spans.join_wait", "must be >= 0, got %v", c.Spans.JoinWait)
	}
	if c.Spans.JoinWindow < c.Spans.JoinWait {
		bad("spans.join_window", "must be >= spans.join_wait (%v), got %v", c.Spans.JoinWait, c.Spans.JoinWindow)
	}
	if c.Spans.MaxPending < 1 {
		bad("spans.max_pending", "must be >= 1, got %d", c.Spans.MaxPending)
	}
	for svc, g := range c.Spans.ConsumerGroups {
		if svc == "" || g == "" {
			bad("spans.consumer_groups", "service name and group must be non-empty, got %q: %q", svc, g)
		}
	}
	if c.MaxBatch < 1 || c.MaxBatch > 100000 {
		bad("max_batch", "must be in [1, 100000], got %d", c.MaxBatch)
	}
	if c.MaxWait <= 0 {
		bad("max_wait", "must be > 0, got %v", c.MaxWait)
	}
	if c.ClockOffsetInterval < time.Second {
		bad("clock_offset_interval", "must be >= 1s, got %v", c.ClockOffsetInterval)
	}
	if c.DrainTimeout <= 0 {
		bad("drain_timeout", "must be > 0, got %v", c.DrainTimeout)
	}
	if len(c.SLOThresholds) > 8 {
		bad("slo_thresholds", "at most 8 thresholds (each adds a bucket to every live latency series), got %d", len(c.SLOThresholds))
	}
	if c.Metadata.TTL < time.Second {
		bad("metadata.ttl", "must be >= 1s, got %v", c.Metadata.TTL)
	}
	if c.Metadata.MissingTTL < time.Second {
		bad("metadata.missing_ttl", "must be >= 1s, got %v", c.Metadata.MissingTTL)
	}
	if c.Metadata.MaxUnknownTopics < 1 {
		bad("metadata.max_unknown_topics", "must be >= 1, got %d", c.Metadata.MaxUnknownTopics)
	}
	if c.IdleTTL < time.Second {
		bad("idle_ttl", "must be >= 1s, got %v", c.IdleTTL)
	}
	if c.MaxLiveSeries < 1 {
		bad("max_live_series", "must be >= 1, got %d", c.MaxLiveSeries)
	}
	topic := func(key, name string) {
		if err := kafka.ValidTopicName(name); err != nil {
			bad(key, "%v", err)
		}
	}
	topic("dead_letter_topic", c.DeadLetterTopic)
	topic("receipts.topic", c.Receipts.Topic)
	topic("replay_state_topic", c.ReplayStateTopic)
	for key, other := range map[string]string{"receipts.topic": c.Receipts.Topic, "dead_letter_topic": c.DeadLetterTopic, "probe.topic": c.Probe.Topic} {
		if c.ReplayStateTopic == other {
			bad("replay_state_topic", "must differ from %s (%s)", key, other)
		}
	}
	topic("probe.topic", c.Probe.Topic)
	topic("spans.topic", c.Spans.Topic)
	if c.Spans.Enabled && c.Receipts.Enabled && c.Spans.Topic == c.Receipts.Topic {
		bad("spans.topic", "must differ from receipts.topic (%s)", c.Receipts.Topic)
	}
	for i, tp := range c.Tap.Topics {
		topic(fmt.Sprintf("tap.topics[%d]", i), tp)
	}
	for i, th := range c.SLOThresholds {
		if th < time.Millisecond || th > time.Hour {
			bad(fmt.Sprintf("slo_thresholds[%d]", i), "must be in [1ms, 1h], got %v", th)
		}
	}
	if err := c.Traces.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
