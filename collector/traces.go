package collector

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// TracesConfig configures the hop spans the collector adds to the producers' traces (collector.traces). Spans are
// made only when `tidemark run` has tracing enabled (a TracerProvider in Options).
type TracesConfig struct {
	// SampleRatio is the fraction of sampled traces (traceparent's sampled flag set) that get hop spans, in [0, 1]
	// (default 1). The decision is the trace id's, as OpenTelemetry's TraceIDRatioBased sampler makes it, so every
	// hop of one trace, on every collector, decides alike, and an application sampling with the same ratio keeps the
	// same traces.
	SampleRatio *float64 `yaml:"sample_ratio"`
	// KeepOver: a live record whose corrected end-to-end latency (or, without a processed stamp, the longest stage
	// known) exceeds it always gets hop spans, whatever its sampled flag and the ratio: the slow messages a user
	// opens from a dashboard have traces. Default: the first of slo_thresholds. Negative: off.
	KeepOver time.Duration `yaml:"keep_over"`
}

func (c *TracesConfig) setDefaults(slo []time.Duration) {
	if c.SampleRatio == nil {
		one := 1.0
		c.SampleRatio = &one
	}
	if c.KeepOver == 0 && len(slo) > 0 {
		c.KeepOver = slo[0]
	}
}

func (c *TracesConfig) validate() error {
	if r := *c.SampleRatio; !(r >= 0 && r <= 1) {
		return fmt.Errorf("collector.traces.sample_ratio: must be in [0, 1], got %v", r)
	}
	return nil
}

// Attributes of the hop spans besides the messaging conventions' (docs/collector.md, "Hop spans").
const (
	AttrStage          = attribute.Key("tidemark.stage")            // ingest, queue_wait
	AttrUncertaintyMs  = attribute.Key("tidemark.uncertainty_ms")   // the stage's correction uncertainty (±, ms)
	AttrReplayClass    = attribute.Key("tidemark.replay_class")     // live, replay, redelivery, backfill
	AttrTrusted        = attribute.Key("tidemark.trusted")          // the engine counts the stage in live percentiles
	AttrUntrustedWhy   = attribute.Key("tidemark.untrusted_reason") // with trusted=false: wide
	AttrProducerHost   = attribute.Key("tidemark.producer_host")    // the producer's host id (its clock)
	AttrBrokerHost     = attribute.Key("tidemark.broker_host")      // the leader whose clock stamped the append
	AttrConsumerHost   = attribute.Key("tidemark.consumer_host")    // the consumer's host id
	AttrNaiveMs        = attribute.Key("tidemark.naive_ms")         // the stage from the raw stamps, before correction
	AttrKeptBecause    = attribute.Key("tidemark.sampling.reason")  // sampled or slow
	AttrCorrectedClock = attribute.Key("tidemark.reference_clock")  // the reference host the times are on
	// AttrEnvelope is set when a clock of the record is placed only by the causal envelope (latency.FlagEnvelope):
	// its offset is bounded from one side, so the stated uncertainty is not a two-sided bound (docs/latency.md).
	AttrEnvelope = attribute.Key("tidemark.envelope")
)

// decision is the hop-span sampler's verdict on one record (label decision of
// tidemark_collector_trace_decisions_total).
type decision uint8

const (
	decisionSampled   decision = iota // sampled flag set and the ratio kept it
	decisionSlow                      // over keep_over: kept regardless
	decisionUnsampled                 // the producer's trace is not sampled
	decisionRatio                     // sampled, but the ratio left it out
	decisionNoTrace                   // no valid traceparent: no span (never one under a made-up parent)
	numDecisions
)

var decisionNames = [numDecisions]string{"sampled", "slow", "unsampled", "ratio", "no_trace"}

// pathCounters are one path's counters, resolved once (a label lookup per record would cost more than the decision).
type pathCounters struct {
	decisions [numDecisions]prometheus.Counter
	emitted   [2]prometheus.Counter // ingest, queue_wait
	untrusted [2]prometheus.Counter
}

// hopTracer makes the collector's hop spans: for a record with trace context, an ingest span (produce → append) and,
// on the receipts path, a queue-wait span (append → the group's receive), from the engine's CORRECTED moments on
// the reference clock, parented to the producer's span. It is nil when tracing is off.
type hopTracer struct {
	t        trace.Tracer
	bound    uint64  // ratio, as TraceIDRatioBased: keep when the trace id's low 63 bits are below it
	keepOver float64 // ms; +Inf when off
	refHost  string
	uncRatio float64                  // latency.Config.UncertaintyRatio: the proportional part of the accuracy target
	counters map[string]*pathCounters // by path; read-only after newHopTracer
	ingests  recentTraces             // producer spans that already have their ingest span
}

// newHopTracer returns the hop tracer of tp (nil: tracing off, nil tracer). lat is the engine's configuration: its
// UncertaintyRatio is part of the rule that tells a wide stage from a contradicted one (hopTracer.span).
func newHopTracer(tp trace.TracerProvider, cfg TracesConfig, refHost string, lat latency.Config, m *Metrics) *hopTracer {
	if tp == nil {
		return nil
	}
	h := &hopTracer{t: tp.Tracer("github.com/tidemark/tidemark/collector"), keepOver: math.Inf(1), refHost: refHost,
		uncRatio: lat.UncertaintyRatio, counters: map[string]*pathCounters{}}
	for _, path := range []string{PathReceipts, PathSpans, PathTap} {
		c := &pathCounters{}
		for d := range numDecisions {
			c.decisions[d] = m.TraceDecisions.WithLabelValues(path, decisionNames[d])
		}
		for i, st := range []latency.Stage{latency.StageIngest, latency.StageQueueWait} {
			c.emitted[i] = m.HopSpans.WithLabelValues(path, st.String(), "emitted")
			c.untrusted[i] = m.HopSpans.WithLabelValues(path, st.String(), "untrusted")
		}
		h.counters[path] = c
	}
	switch r := *cfg.SampleRatio; {
	case r >= 1:
		h.bound = math.MaxUint64
	case r > 0:
		h.bound = uint64(r * (1 << 63))
	}
	if cfg.KeepOver > 0 {
		h.keepOver = float64(cfg.KeepOver) / float64(time.Millisecond)
	}
	h.ingests.max = 1 << 16
	return h
}

// hop is one record's trace context and identities, as a path hands it to the tracer.
type hop struct {
	path, group, topic string
	partition          int32
	parent             trace.SpanContext // the producer's span (remote); invalid: no trace context
	producer, broker   string
	consumer           string // "" on the tap path: no queue-wait span
	naive              rawStamps
}

// decide says whether the record's trace gets hop spans, and why.
func (h *hopTracer) decide(res *latency.Result, parent trace.SpanContext) (bool, decision) {
	if !parent.IsValid() {
		return false, decisionNoTrace
	}
	if res.Class == latency.ClassLive && slowest(res) > h.keepOver {
		return true, decisionSlow
	}
	if !parent.IsSampled() {
		return false, decisionUnsampled
	}
	tid := parent.TraceID()
	if h.bound == math.MaxUint64 || binary.BigEndian.Uint64(tid[8:16])>>1 < h.bound {
		return true, decisionSampled
	}
	return false, decisionRatio
}

// slowest is the record's end-to-end latency (ms), or without one the longest stage it has.
func slowest(res *latency.Result) float64 {
	if v, ok := res.Stage(latency.StageE2E); ok {
		return v
	}
	m := 0.0
	for s := latency.Stage(0); s < latency.NumStages; s++ {
		if v, ok := res.Stage(s); ok && v > m {
			m = v
		}
	}
	return m
}

// record makes the hop spans of one corrected record and reports whether its trace was kept.
func (h *hopTracer) record(x *hop, res *latency.Result) bool {
	keep, why := h.decide(res, x.parent)
	c := h.counters[x.path]
	c.decisions[why].Inc()
	if !keep {
		return false
	}
	// The decision is made: present the parent as sampled, so that a provider with the usual parent-based sampler
	// keeps a slow record's spans whose producer did not sample its trace.
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), x.parent.WithTraceFlags(x.parent.TraceFlags()|trace.FlagsSampled))
	first := latency.Append
	if res.Corrected[latency.SourceAppend] != 0 {
		first = latency.SourceAppend
	}
	if h.ingests.add(x.parent) { // one ingest span per produced record, however many groups or paths report it
		h.span(ctx, x, c, 0, res, latency.StageIngest, latency.Produce, first, why, x.naive.event, x.naive.append)
	}
	if x.consumer != "" {
		h.span(ctx, x, c, 1, res, latency.StageQueueWait, latency.Append, latency.Receive, why, x.naive.append, x.naive.receive)
	}
	return true
}

// Why an emitted span's stage is kept out of the live percentiles (tidemark.untrusted_reason).
const (
	untrustedWide = "wide" // the uncertainty exceeds the accuracy target for a stage this short
)

// accuracyFloorMs is the floor of the accuracy target max(2 ms, UncertaintyRatio × stage) (docs/latency.md), the
// smaller of the two widths past which the engine stops trusting a cross-clock stage.
const accuracyFloorMs = 2

// pooledMs: a cross-clock stage this short or shorter may be a pair the monotone projection pooled (an order
// violated beyond the uncertainty ends as a stage of exactly 0, up to rounding).
const pooledMs = 1e-6

// untrustedReason says why stage s of res, not trusted, still has an honest span, or "" when it has none. A span is
// honest when its ends lie within its stated uncertainty of the truth. A warming-up or wide stage is trusted
// (latency.UntrustFlags): its span is made as trusted. Of the untrusted ones:
//   - not skew-suspected: the projection moved an end beyond its own uncertainty (FlagProjected): none;
//   - wide: skew-suspected, but only as the engine flags a correct stage whose uncertainty is too large for its
//     length: both ends' offsets are known (finite uncertainty), the uncertainty exceeds the accuracy target, and
//     the stage is not one the projection pooled (length > 0). An envelope-placed producer's ingest of 40 ms ± 7 ms
//     is such a stage: kept out of percentiles, yet the span a user opens is right within its ± 7 ms.
//
// Anything else (an end's offset unknown, an order violated beyond the uncertainty: the projection pooled the pair
// to length 0; or a narrow stage flagged for another reason) would draw a shifted span: none is made.
func (h *hopTracer) untrustedReason(res *latency.Result, s latency.Stage) string {
	if res.Flags&latency.FlagSkewSuspected == 0 {
		return ""
	}
	d, _ := res.Stage(s)
	u := res.StageUncertainty(s)
	if math.IsInf(u, 0) || math.IsNaN(u) || !(d > pooledMs) || !(u > math.Max(accuracyFloorMs, h.uncRatio*d)) {
		return ""
	}
	return untrustedWide
}

// span emits the span of stage s from moment a to b, when the record has it and its corrected ends are honest
// within the stated uncertainty (a trusted stage, or an untrusted one untrustedReason accepts). A stage whose span
// would be shifted gets none, counted as untrusted.
func (h *hopTracer) span(ctx context.Context, x *hop, c *pathCounters, i int, res *latency.Result, s latency.Stage,
	a, b latency.Moment, why decision, naiveFrom, naiveTo int64) {
	if _, ok := res.Stage(s); !ok || res.Corrected[a] == 0 || res.Corrected[b] == 0 {
		return
	}
	trusted := res.Trusted(s)
	var reason string
	if !trusted {
		if reason = h.untrustedReason(res, s); reason == "" {
			c.untrusted[i].Inc()
			return
		}
	}
	start, end := msTime(res.Corrected[a]), msTime(res.Corrected[b])
	attrs := make([]attribute.KeyValue, 0, 17)
	attrs = append(attrs, semconv.MessagingSystemKafka, semconv.MessagingDestinationName(x.topic),
		semconv.MessagingDestinationPartitionID(strconv.Itoa(int(x.partition))), semconv.MessagingKafkaOffset(int(res.Offset)),
		AttrStage.String(s.String()), AttrReplayClass.String(res.Class.String()), AttrTrusted.Bool(trusted),
		AttrKeptBecause.String(decisionNames[why]), AttrCorrectedClock.String(h.refHost))
	if reason != "" {
		attrs = append(attrs, AttrUntrustedWhy.String(reason))
	}
	if u := res.StageUncertainty(s); !math.IsInf(u, 0) && !math.IsNaN(u) {
		attrs = append(attrs, AttrUncertaintyMs.Float64(u))
	}
	if res.Flags&latency.FlagEnvelope != 0 {
		attrs = append(attrs, AttrEnvelope.Bool(true))
	}
	if naiveFrom > 0 && naiveTo > 0 {
		attrs = append(attrs, AttrNaiveMs.Int64(naiveTo-naiveFrom))
	}
	if x.producer != "" {
		attrs = append(attrs, AttrProducerHost.String(x.producer))
	}
	if x.broker != "" {
		attrs = append(attrs, AttrBrokerHost.String(x.broker))
	}
	name := "ingest " + x.topic
	if s == latency.StageQueueWait {
		name = "queue wait " + x.topic
		attrs = append(attrs, semconv.MessagingConsumerGroupName(x.group), AttrConsumerHost.String(x.consumer))
	}
	_, sp := h.t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(start),
		trace.WithAttributes(attrs...))
	sp.End(trace.WithTimestamp(end))
	c.emitted[i].Inc()
}

// traceReceipt makes the hop spans of a corrected receipt and reports whether its trace was kept.
func (p *Receipts) traceReceipt(r *instrument.Receipt, res *latency.Result, producer, broker string, raw rawStamps) bool {
	var parent trace.SpanContext
	if r.HasTrace {
		flags := trace.FlagsSampled
		if r.TraceUnsampled {
			flags = 0
		}
		parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: r.TraceID, SpanID: r.SpanID, TraceFlags: flags, Remote: true})
	}
	return p.tracer.record(&hop{path: PathReceipts, group: r.Group, topic: r.Topic, partition: r.Partition, parent: parent,
		producer: producer, broker: broker, consumer: r.Host, naive: raw}, res)
}

// msTime converts ms since the epoch (fractional) to a time, to the nanosecond.
func msTime(ms float64) time.Time {
	return time.Unix(0, int64(math.Round(ms*1e6)))
}

// recentTraces remembers the producer spans (trace id + span id) given an ingest span lately, so that a record read
// by several consumer groups, or by the tap and a group, gets one ingest span. Two generations of at most max
// entries each: memory is bounded, and a record is remembered for at least max further ingest spans.
type recentTraces struct {
	mu        sync.Mutex // guards cur, prev
	cur, prev map[[24]byte]struct{}
	max       int
}

// add reports whether sc was not remembered, and remembers it.
func (r *recentTraces) add(sc trace.SpanContext) bool {
	var k [24]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	copy(k[:16], tid[:])
	copy(k[16:], sid[:])
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.cur[k]; ok {
		return false
	}
	if _, ok := r.prev[k]; ok {
		return false
	}
	if r.cur == nil || len(r.cur) >= r.max {
		r.prev, r.cur = r.cur, make(map[[24]byte]struct{}, min(r.max, 1024))
	}
	r.cur[k] = struct{}{}
	return true
}
