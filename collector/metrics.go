package collector

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/latency/instrument"
)

// Metrics are the collector's own counters. Names follow Prometheus conventions; docs/collector.md lists them.
type Metrics struct {
	Records     *prometheus.CounterVec // path
	Rows        *prometheus.CounterVec // path
	RowsAcked   *prometheus.CounterVec // path
	SinkErrors  *prometheus.CounterVec // path
	SinkBlocked *prometheus.CounterVec // path: seconds spent blocked in Sink.Write (backpressure)
	SinkWaiting *prometheus.GaugeVec   // path: partitions of the path waiting in Sink.Write right now
	DeadLetters *prometheus.CounterVec // path, reason
	Classes     *prometheus.CounterVec // path, class (live, replay, redelivery, backfill)
	Skewed      *prometheus.CounterVec // path
	// BadTraceParent counts records whose traceparent header is present but malformed (W3C Trace Context); they are
	// kept, without trace context.
	BadTraceParent *prometheus.CounterVec // path
	// Parked is the number of receipts parked until their topic's metadata (or append leader) is known (lookups run
	// in the background; see parking).
	Parked prometheus.Gauge
	// WithoutMetadata counts receipts whose append stamp needed their topic's metadata and that were stored
	// without it, by the lookup's outcome (missing: no such topic; failed; pending).
	WithoutMetadata *prometheus.CounterVec // state
	// LagRowsLost counts lag_snapshots rows the writer gave up on and that FollowLag no longer keeps for another
	// write: their snapshot fell out of the bounded retry buffer (maxHeldSnapshots), or the feed stopped.
	LagRowsLost prometheus.Counter
	// UnknownTopics is the number of topic names the metadata cache tracks that are not known to exist (being
	// looked up, missing or failed): at most collector.metadata.max_unknown_topics.
	UnknownTopics prometheus.Gauge
	// LiveLabelSets is the number of (group, topic) pairs with live latency histograms (≤ collector.max_live_series);
	// LiveOverflow counts live observations not recorded because their pair was over that bound; LiveEvicted counts
	// pairs whose histograms were deleted after collector.idle_ttl without a receipt.
	LiveLabelSets prometheus.Gauge
	LiveOverflow  prometheus.Counter
	LiveEvicted   prometheus.Counter
	// EnginePaths is the number of (group, topic, partition) paths the latency engine holds (≤ latency.max_paths);
	// EnginePathsEvicted counts those evicted, idle for collector.idle_ttl or least recently used at the bound.
	EnginePaths        prometheus.Gauge
	EnginePathsEvicted prometheus.Counter
	// EngineHosts is the number of host clocks the latency engine holds an estimate for (≤ latency.max_hosts + the
	// reference); EngineHostsEvicted counts those forgotten, idle for collector.idle_ttl or least recently used at
	// the bound.
	EngineHosts        prometheus.Gauge
	EngineHostsEvicted prometheus.Counter
	ProbeSent          *prometheus.CounterVec // broker
	ProbeLost          *prometheus.CounterVec // broker
	ProbeDup           *prometheus.CounterVec // broker
	// ProbeForeign counts probe records of other replicas (another instance id, or a version-1 probe without one),
	// which this replica reads and skips.
	ProbeForeign prometheus.Counter
	ProbeLatency *prometheus.HistogramVec // broker, stage (ingest, delivery, rtt)
	// ProbePlanActions counts the probe topic planner's changes: add_partition, reassign, elect.
	ProbePlanActions *prometheus.CounterVec // action
	// ProbePlanErrors counts probe topic reconciles that failed (retried at the next interval).
	ProbePlanErrors prometheus.Counter
	// AppendLeaderUnknown counts LogAppendTime stamps whose appending broker (the leader of the record's epoch)
	// could not be known: they are corrected with no broker's clock and flagged.
	AppendLeaderUnknown prometheus.Counter
	// ProducerAcks counts instrumented producers' acknowledgements by outcome: bracketed (fed to the engine) or the
	// reason it bracketed nothing (see the Ack* outcome constants).
	ProducerAcks *prometheus.CounterVec // outcome
	// E2ELatency is the corrected end-to-end latency (s) of live receipts only (latency.Result.Live), by group and
	// topic, with trace-id exemplars: what the SLO burn-rate rules in deploy/prometheus read.
	E2ELatency *prometheus.HistogramVec // group, topic
	// StageLatency is the corrected latency (s) of each stage of live receipts (ingest, mirror, queue_wait,
	// processing), by group and topic.
	StageLatency *prometheus.HistogramVec // stage, group, topic
	// E2EBound holds the ends of the interval that contains each E2ELatency sample's true value
	// (latency.Result.StageBounds), end "lower" and "upper", by group and topic: the same samples and buckets, so
	// histogram_quantile of the two ends brackets the true percentile. An unbounded upper end is observed as +Inf.
	E2EBound *prometheus.HistogramVec // end, group, topic
	// E2EUnbounded counts the E2ELatency samples whose upper end is unbounded (an end's clock offset unknown).
	E2EUnbounded *prometheus.CounterVec // group, topic
	// LatencyBuckets are E2ELatency's and StageLatency's upper bounds in seconds (see LatencyBuckets).
	LatencyBuckets []float64
	// Spans counts the spans path's spans by outcome: producer and consumer (Kafka spans about one record),
	// producer_no_offset (producer spans joined through their span id), not_kafka
	// and batch (skipped), malformed and malformed_request (dead-lettered), no_append (records whose LogAppendTime
	// could not be read), no_processed_end (consumer spans that end at the hand-over), join_timeout and join_overflow
	// (consumer rows stored without their producer span), producer_evicted (producer spans forgotten at max_pending).
	Spans *prometheus.CounterVec // outcome
	// SpanBrackets counts producer spans fed to the clock estimator, by outcome (bracketed, broker_not_bracketed,
	// implausible, bad_round_trip, unknown_host).
	SpanBrackets *prometheus.CounterVec // outcome
	// SpansHeld is the number of consumer spans waiting for their producer span (≤ collector.spans.max_pending).
	SpansHeld prometheus.Gauge
	// TraceDecisions counts records by the hop-span sampler's decision (sampled, slow, unsampled, ratio,
	// no_trace); only while tracing is on (traces.go).
	TraceDecisions *prometheus.CounterVec // path, decision
	// HopSpans counts hop spans by stage (ingest, queue_wait) and outcome (emitted; untrusted: the span would be
	// shifted, so none is made; see hopTracer.untrustedReason).
	HopSpans *prometheus.CounterVec // path, stage, outcome
	// engine mirrors the latency engine's clock offsets (as intervals) and counters, refreshed with every
	// clock_offsets write.
	engine *engineMetrics
}

// DefaultSLOThreshold is the end-to-end latency threshold of the default SLO (docs/slo.md: 99.9 % of live messages
// within 500 ms); deploy/prometheus/tidemark.rules.yml selects its bucket, le="0.5".
const DefaultSLOThreshold = 500 * time.Millisecond

// sloScale are the multiples of the primary SLO threshold that make the latency buckets: a 1-2.5-5 series over five
// decades around it, so the threshold's own bucket is exact and a p99 far below or above it still lands in a
// bucket narrow enough to read (the idea kminion uses for its probe buckets: derive them from the SLA, not from a
// fixed list).
var sloScale = [...]float64{0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100}

// LatencyBuckets returns the histogram upper bounds (seconds, ascending, no duplicates) for the given SLO thresholds:
// the first threshold times 0.002 … 100 (15 bounds; for 500 ms: 1 ms, 2.5 ms, 5 ms, … 0.5 s, 1 s, … 50 s) plus every
// threshold itself, so that `le="<threshold>"` of every SLO in use is an exact boundary. No thresholds means
// [DefaultSLOThreshold]. Bounds are rounded to 12 significant digits so their `le` labels read as written.
func LatencyBuckets(thresholds []time.Duration) []float64 {
	if len(thresholds) == 0 {
		thresholds = []time.Duration{DefaultSLOThreshold}
	}
	round := func(v float64) float64 {
		r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
		return r
	}
	base := thresholds[0].Seconds()
	out := make([]float64, 0, len(sloScale)+len(thresholds))
	for _, m := range sloScale {
		out = append(out, round(base*m))
	}
	for _, th := range thresholds {
		out = append(out, round(th.Seconds()))
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return slices.DeleteFunc(out, func(v float64) bool { return !(v > 0) || math.IsInf(v, 0) })
}

// NewMetrics creates the metrics and registers them on reg (nil: not registered, e.g. in tests). sloThresholds are
// the end-to-end SLO thresholds in use (Config.SLOThresholds; none means DefaultSLOThreshold): every one becomes a
// bucket boundary of the live latency histograms (LatencyBuckets). This is one flat list of metric definitions;
// it is easier to read whole.
func NewMetrics(reg prometheus.Registerer, sloThresholds ...time.Duration) *Metrics {
	buckets := LatencyBuckets(sloThresholds)
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &Metrics{
		Records:     cv("tidemark_collector_records_total", "Kafka records consumed by a collector path.", "path"),
		Rows:        cv("tidemark_collector_rows_total", "Rows handed to the ClickHouse writer.", "path"),
		RowsAcked:   cv("tidemark_collector_rows_acked_total", "Rows ClickHouse acknowledged (their offsets may then be committed).", "path"),
		SinkErrors:  cv("tidemark_collector_sink_errors_total", "Batches the writer gave up on (their offsets are not committed).", "path"),
		SinkBlocked: cv("tidemark_collector_sink_blocked_seconds_total", "Time a path waited for the writer (backpressure).", "path"),
		SinkWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tidemark_collector_sink_waiting",
			Help: "Partitions of a path waiting for the writer right now (consumption of them is paused)."}, []string{"path"}),
		DeadLetters: cv("tidemark_collector_dead_letters_total", "Records sent to the dead-letter topic.", "path", "reason"),
		Classes:     cv("tidemark_collector_processings_total", "Processings by replay class.", "path", "class"),
		Skewed:      cv("tidemark_collector_skew_suspected_total", "Rows kept out of percentiles because a clock offset was unknown or inconsistent.", "path"),
		BadTraceParent: cv("tidemark_collector_bad_traceparent_total",
			"Records whose traceparent header is malformed; the record is kept without trace context.", "path"),
		Spans: cv("tidemark_collector_spans_total", "Spans read by the spans path, by outcome.", "outcome"),
		SpanBrackets: cv("tidemark_collector_span_brackets_total",
			"Producer spans fed to the clock estimator as brackets of their host's clock, by outcome.", "outcome"),
		SpansHeld: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_collector_spans_held",
			Help: "Consumer spans waiting for their record's producer span."}),
		Parked: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_collector_parked_receipts",
			Help: "Receipts waiting for their topic's metadata to be looked up (the receipts partition reads on meanwhile)."}),
		WithoutMetadata: cv("tidemark_collector_receipts_without_metadata_total",
			"Receipts stored without their topic's metadata (no leader stamp), by lookup state: missing (no such topic), failed, pending.", "state"),
		LagRowsLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_collector_lag_rows_lost_total",
			Help: "lag_snapshots rows the writer gave up on and that are no longer kept for another write (the retry buffer holds 16 snapshots): lost for good."}),
		UnknownTopics: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_collector_unknown_topics",
			Help: "Topic names tracked by the metadata cache that are not known to exist (looked up, missing or failed); bounded by collector.metadata.max_unknown_topics."}),
		LiveLabelSets: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_collector_live_label_sets",
			Help: "(group, topic) pairs with live latency histograms; bounded by collector.max_live_series."}),
		LiveOverflow: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_collector_live_overflow_total",
			Help: "Live latency observations not recorded in the histograms because their (group, topic) was over collector.max_live_series (the rows are stored in ClickHouse)."}),
		LiveEvicted: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_collector_live_evicted_total",
			Help: "(group, topic) pairs whose live latency histograms were deleted after collector.idle_ttl without a receipt."}),
		EnginePaths: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_collector_engine_paths",
			Help: "(group, topic, partition) paths the latency engine keeps state for; bounded by latency.max_paths."}),
		EnginePathsEvicted: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_collector_engine_paths_evicted_total",
			Help: "Latency engine paths evicted: idle for collector.idle_ttl, or least recently used when latency.max_paths were held."}),
		EngineHosts: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_collector_engine_hosts",
			Help: "Host clocks the latency engine keeps an offset estimate for, the reference included; bounded by latency.max_hosts."}),
		EngineHostsEvicted: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_collector_engine_hosts_evicted_total",
			Help: "Host clocks the latency engine forgot: idle for collector.idle_ttl, or least recently used when latency.max_hosts were held. A host seen again starts afresh."}),
		ProbeSent: cv("tidemark_probe_sent_total", "Probe records sent.", "broker"),
		ProbeLost: cv("tidemark_probe_lost_total", "Probe records not received within the loss timeout.", "broker"),
		ProbeDup:  cv("tidemark_probe_duplicates_total", "Extra deliveries of probe records.", "broker"),
		ProbeForeign: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_probe_foreign_total",
			Help: "Probe records of other replicas (another instance id), read and skipped: each replica measures its own probes."}),
		ProbeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tidemark_probe_latency_seconds",
			Help:    "Probe latency per broker: ingest (send to corrected append), delivery (corrected append to receive), rtt (send to ack).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"broker", "stage"}),
		ProbePlanActions: cv("tidemark_probe_topic_changes_total",
			"Changes the probe topic planner made so that every live broker leads a probe partition: add_partition, reassign, elect.", "action"),
		ProbePlanErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_probe_topic_reconcile_errors_total",
			Help: "Probe topic reconciles that failed (retried at the next interval)."}),
		AppendLeaderUnknown: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_collector_append_leader_unknown_total",
			Help: "LogAppendTime stamps whose appending broker (the leader of the record's leader epoch) could not be known; their stages are flagged."}),
		ProducerAcks: cv("tidemark_collector_producer_acks_total",
			"Producer acknowledgements from the receipts topic, by outcome: bracketed (their producer host's clock was bracketed with send <= append <= ack) or why not.", "outcome"),
		E2ELatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tidemark_e2e_latency_seconds",
			Help:    "Corrected end-to-end latency (processed - produce, reference clock) of live receipts only: no replays, backfills or commit-bounded samples, none whose e2e is invalid (an end's clock not placed, an order violated beyond the uncertainty); a wide interval is no reason to leave one out. Exemplars carry the trace id.",
			Buckets: buckets,
		}, []string{"group", "topic"}),
		StageLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tidemark_stage_latency_seconds",
			Help:    "Corrected latency of each stage (ingest, mirror, queue_wait, processing) of live receipts only; an invalid stage (an end's clock not placed, an order violated beyond the uncertainty) is left out, the record's other stages are kept.",
			Buckets: buckets,
		}, []string{"stage", "group", "topic"}),
		E2EBound: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tidemark_e2e_latency_bound_seconds",
			Help:    "Ends of the interval holding the true value of each tidemark_e2e_latency_seconds sample (end=lower|upper): the same samples and buckets, so histogram_quantile of the lower and of the upper ends brackets the true percentile. An unbounded upper end (a clock offset unknown) is observed as +Inf and counted in tidemark_e2e_latency_unbounded_total.",
			Buckets: buckets,
		}, []string{"end", "group", "topic"}),
		E2EUnbounded: cv("tidemark_e2e_latency_unbounded_total",
			"tidemark_e2e_latency_seconds samples whose interval's upper end is unbounded (an end's clock offset unknown): in the estimate, open above in the band.", "group", "topic"),
		LatencyBuckets: buckets,
		TraceDecisions: cv("tidemark_collector_trace_decisions_total",
			"Records with or without trace context by the hop-span sampler's decision (sampled, slow, unsampled, ratio, no_trace).", "path", "decision"),
		HopSpans: cv("tidemark_collector_hop_spans_total",
			"Hop spans (ingest, queue_wait) built from corrected stamps, by outcome: emitted, or untrusted (not made: an end's offset is unknown or an order was violated beyond the uncertainty, so the span would be shifted).", "path", "stage", "outcome"),
		engine: newEngineMetrics(),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.Records, m.Rows, m.RowsAcked, m.SinkErrors, m.SinkBlocked, m.SinkWaiting,
			m.DeadLetters, m.Classes, m.Skewed, m.BadTraceParent, m.Spans, m.SpanBrackets, m.SpansHeld, m.Parked, m.WithoutMetadata, m.LagRowsLost, m.UnknownTopics,
			m.LiveLabelSets, m.LiveOverflow, m.LiveEvicted, m.EnginePaths, m.EnginePathsEvicted, m.EngineHosts, m.EngineHostsEvicted, m.ProbeSent, m.ProbeLost, m.ProbeDup, m.ProbeForeign, m.ProbeLatency, m.ProbePlanActions, m.ProbePlanErrors, m.AppendLeaderUnknown, m.ProducerAcks, m.E2ELatency, m.StageLatency, m.E2EBound, m.E2EUnbounded, m.TraceDecisions, m.HopSpans, m.engine} {
			reg.MustRegister(c)
		}
	}
	return m
}

// errUnknownTopic marks a record dead-lettered because it names a topic unknown to the cluster while the metadata
// cache tracks as many unknown names as it may (collector.metadata.max_unknown_topics).
var errUnknownTopic = errors.New("unknown topic")

// reason names a decode error for the dead-letter counter's label.
func reason(err error) string {
	switch {
	case errors.Is(err, instrument.ErrUnsupportedVersion):
		return "unsupported_version"
	case errors.Is(err, instrument.ErrMalformed):
		return "malformed"
	case errors.Is(err, errUnknownTopic):
		return "unknown_topic"
	case errors.Is(err, errMalformedOTLP):
		return "malformed_otlp"
	case errors.Is(err, errMalformedSpan):
		return "malformed_span"
	}
	return "other"
}
