package collector

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency/instrument"
)

// c25Deps is case C25's clocks (producer P1 +2500 ms, broker 0, consumer C1 −300 ms, all known to ±0.1..1.5 ms)
// with a span recorder as the tracer provider.
func c25Deps(t *testing.T, truth time.Time, cfg TracesConfig) (*pathDeps, *tracetest.SpanRecorder) {
	t.Helper()
	deps, _, _ := newTestDeps(t, truth.Add(200*time.Millisecond))
	seedC25Clocks(t, deps, truth)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	cfg.setDefaults([]time.Duration{DefaultSLOThreshold})
	deps.tracer = newHopTracer(tp, cfg, "collector", deps.engine.Config(), deps.metrics)
	return deps, rec
}

// c25Receipt is C25's record: true create 12:00:00.000, append .020, receive .100, processed .120, read by group g;
// e2eMs stretches processing so that e2e is that long.
func c25Receipt(truth time.Time, group string, offset int64, trace byte, sampled bool, e2eMs int) instrument.Receipt {
	sync := func(d time.Duration) instrument.ClockOffset {
		return instrument.ClockOffset{Offset: d, Uncertainty: 100 * time.Microsecond, Valid: true}
	}
	return instrument.Receipt{
		Group: group, Topic: "orders", Partition: 3, Offset: offset,
		RecordTimestampMs: truth.Add(20 * time.Millisecond).UnixMilli(), HasRecordTimestamp: true,
		ProduceNs: truth.Add(2500 * time.Millisecond).UnixNano(), ProduceHost: "P1", ProduceClock: sync(2500 * time.Millisecond),
		ReceiveNs:   truth.Add(100*time.Millisecond - 300*time.Millisecond).UnixNano(),
		ProcessedNs: truth.Add(time.Duration(e2eMs)*time.Millisecond - 300*time.Millisecond).UnixNano(), Host: "C1",
		Clock:   sync(-300 * time.Millisecond),
		TraceID: [16]byte{trace, 0xab, 15: trace}, SpanID: [8]byte{2, 7: trace}, HasTrace: true, TraceUnsampled: !sampled,
	}
}

func handleReceipts(t *testing.T, deps *pathDeps, rs ...instrument.Receipt) {
	t.Helper()
	p := &Receipts{pathDeps: deps}
	b := kafka.Batch{Topic: "tidemark-receipts", Records: []kafka.Record{receiptRecord(t, 10, rs...)}}
	if err := p.HandleBatch(context.Background(), b, func(int64) {}); err != nil {
		t.Fatal(err)
	}
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// The hop spans of C25 lie on the reference clock where the corrected moments are: ingest 12:00:00.000 → .020 and
// queue wait .020 → .100, never the naive −2480 ms, parented to the producer's span, with the uncertainty and the
// replay class as attributes.
func TestHopSpansFromCorrectedStamps(t *testing.T) {
	truth := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	deps, rec := c25Deps(t, truth, TracesConfig{})
	r := c25Receipt(truth, "g", 100, 1, true, 120)
	handleReceipts(t, deps, r)
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want ingest and queue wait", len(spans))
	}
	want := []struct {
		name       string
		start, end time.Duration // after truth
		stage      string
		naive      int64
	}{
		// Append is a ms stamp taken as the middle of its millisecond (+0.5 ms, docs/latency.md).
		{"ingest orders", 0, 20500 * time.Microsecond, "ingest", -2480},
		{"queue wait orders", 20500 * time.Microsecond, 100 * time.Millisecond, "queue_wait", -220},
	}
	for i, w := range want {
		s := spans[i]
		a := spanAttrs(s)
		if s.Name() != w.name || s.SpanKind() != trace.SpanKindInternal || a[AttrStage].AsString() != w.stage {
			t.Fatalf("span %d: %q kind %v stage %v", i, s.Name(), s.SpanKind(), a[AttrStage])
		}
		// Within the correction's uncertainty of the truth (the broker's ±1.5 ms bracket dominates).
		unc := a[AttrUncertaintyMs].AsFloat64()
		if unc <= 0 || unc > 2 {
			t.Fatalf("%s uncertainty %v ms", w.name, unc)
		}
		tol := time.Duration(unc * float64(time.Millisecond))
		if d := s.StartTime().Sub(truth.Add(w.start)); d.Abs() > tol {
			t.Errorf("%s starts %v off the truth (uncertainty %v)", w.name, d, tol)
		}
		if d := s.EndTime().Sub(truth.Add(w.end)); d.Abs() > tol {
			t.Errorf("%s ends %v off the truth (uncertainty %v)", w.name, d, tol)
		}
		if s.EndTime().Before(s.StartTime()) {
			t.Errorf("%s is negative", w.name)
		}
		if s.Parent().TraceID() != r.TraceID || s.Parent().SpanID() != r.SpanID || !s.Parent().IsRemote() {
			t.Errorf("%s parent %v", w.name, s.Parent())
		}
		if a[AttrNaiveMs].AsInt64() != w.naive || a[AttrReplayClass].AsString() != "live" || a[AttrProducerHost].AsString() != "P1" ||
			a[AttrBrokerHost].AsString() != "broker-1" || a["messaging.kafka.offset"].AsInt64() != 100 ||
			a["messaging.destination.partition.id"].AsString() != "3" || !a[AttrTrusted].AsBool() {
			t.Errorf("%s attributes %v", w.name, a)
		}
	}
	if a := spanAttrs(spans[1]); a["messaging.consumer.group.name"].AsString() != "g" || a[AttrConsumerHost].AsString() != "C1" {
		t.Errorf("queue wait attributes %v", a)
	}
}

func TestHopSpanSampling(t *testing.T) {
	truth := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	zero := 0.0
	deps, rec := c25Deps(t, truth, TracesConfig{SampleRatio: &zero}) // keep_over defaults to the SLO, 500 ms
	noTrace := c25Receipt(truth, "g", 103, 4, true, 900)
	noTrace.HasTrace, noTrace.TraceID, noTrace.SpanID = false, [16]byte{}, [8]byte{}
	handleReceipts(t, deps,
		c25Receipt(truth, "g", 100, 1, true, 120),  // sampled, but the ratio is 0
		c25Receipt(truth, "g", 101, 2, false, 900), // not sampled, but 900 ms > 500 ms: kept
		c25Receipt(truth, "g", 102, 3, false, 120), // not sampled, fast
		noTrace, // slow but without trace context: no span, no made-up parent
	)
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the slow record's two", len(spans))
	}
	for _, s := range spans {
		if s.Parent().TraceID()[0] != 2 || spanAttrs(s)[AttrKeptBecause].AsString() != "slow" {
			t.Fatalf("span %q of trace %v kept because %v", s.Name(), s.Parent().TraceID(), spanAttrs(s)[AttrKeptBecause])
		}
	}
	for d, want := range map[string]float64{"sampled": 0, "slow": 1, "unsampled": 1, "ratio": 1, "no_trace": 1} {
		if got := testutil.ToFloat64(deps.metrics.TraceDecisions.WithLabelValues(PathReceipts, d)); got != want {
			t.Errorf("decision %s = %v, want %v", d, got, want)
		}
	}
}

// A record two groups process gets one ingest span and a queue-wait span per group.
func TestHopSpansOneIngestPerRecord(t *testing.T) {
	truth := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	deps, rec := c25Deps(t, truth, TracesConfig{})
	handleReceipts(t, deps, c25Receipt(truth, "g1", 100, 1, true, 120), c25Receipt(truth, "g2", 100, 1, true, 130))
	var ingest, queue int
	for _, s := range rec.Ended() {
		switch spanAttrs(s)[AttrStage].AsString() {
		case "ingest":
			ingest++
		case "queue_wait":
			queue++
		}
	}
	if ingest != 1 || queue != 2 {
		t.Fatalf("ingest spans %d, queue-wait spans %d; want 1 and 2", ingest, queue)
	}
}

// Which untrusted stages still get a span: exactly those whose corrected ends are honest within the stated
// uncertainty. A producer whose time sync lies (it reports offset 0 ± 0.1 ms while its clock is 2.5 s ahead) makes
// produce land after append beyond every uncertainty: the engine flags the ingest skew-suspected and the projection
// pools the pair, so no ingest span is made (it would be shifted), counted as untrusted, however wide the lie's
// stated uncertainty. A producer whose time sync
// is right but loose (± 4 ms, plus the broker's ± 1.5 ms: 5.5 ms over a 20 ms stage) is wide, which is no reason to
// leave it out: its span is made, trusted, and lies within its uncertainty of the truth. A producer with no time sync
// at all is placed by the causal envelope: its ingest span is made, trusted though warming up, and says its bound is
// one-sided.
// The queue wait between two known clocks gets its span unless the lie moved its end: the projection that pools the
// lying produce with the append moves the append by about 2.5 s, far beyond the accuracy target, so the queue wait
// is not trusted either (trust follows the projection) and its span, which would be shifted as much,
// is not made but counted untrusted.
func TestHopSpansOfUntrustedStages(t *testing.T) {
	truth := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		clock     instrument.ClockOffset
		emitted   float64
		untrusted float64
		trusted   bool   // the emitted ingest span's tidemark.trusted
		reason    string // and its tidemark.untrusted_reason
		queue     int    // queue-wait spans made
	}{
		{"lying time sync", instrument.ClockOffset{Offset: 0, Uncertainty: 100 * time.Microsecond, Valid: true}, 0, 1, false, "", 0},
		{"loose time sync", instrument.ClockOffset{Offset: 2500 * time.Millisecond, Uncertainty: 4 * time.Millisecond, Valid: true},
			1, 0, true, "", 1},
		// As wide as the loose one, but wrong by 2.5 s: the width does not excuse it (the pooled pair has length 0).
		{"lying loose time sync", instrument.ClockOffset{Offset: 0, Uncertainty: 4 * time.Millisecond, Valid: true}, 0, 1, false, "", 0},
		// The envelope's first estimate has no drift fit yet: honest, warming up, trusted.
		{"no time sync", instrument.ClockOffset{}, 1, 0, true, "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deps, rec := c25Deps(t, truth, TracesConfig{})
			r := c25Receipt(truth, "g", 100, 1, true, 120)
			r.ProduceHost, r.ProduceClock = "P2", tc.clock
			handleReceipts(t, deps, r)
			emitted := testutil.ToFloat64(deps.metrics.HopSpans.WithLabelValues(PathReceipts, "ingest", "emitted"))
			untrusted := testutil.ToFloat64(deps.metrics.HopSpans.WithLabelValues(PathReceipts, "ingest", "untrusted"))
			if emitted != tc.emitted || untrusted != tc.untrusted {
				t.Fatalf("ingest emitted %v untrusted %v, want %v %v", emitted, untrusted, tc.emitted, tc.untrusted)
			}
			qEmitted := testutil.ToFloat64(deps.metrics.HopSpans.WithLabelValues(PathReceipts, "queue_wait", "emitted"))
			qUntrusted := testutil.ToFloat64(deps.metrics.HopSpans.WithLabelValues(PathReceipts, "queue_wait", "untrusted"))
			if qEmitted != float64(tc.queue) || qUntrusted != float64(1-tc.queue) {
				t.Fatalf("queue wait emitted %v untrusted %v, want %v %v", qEmitted, qUntrusted, tc.queue, 1-tc.queue)
			}
			var ingest, queue int
			for _, s := range rec.Ended() {
				a := spanAttrs(s)
				if s.EndTime().Before(s.StartTime()) {
					t.Errorf("negative span %q", s.Name())
				}
				switch a[AttrStage].AsString() {
				case "ingest":
					ingest++
					unc := a[AttrUncertaintyMs].AsFloat64()
					if !(unc > 0) {
						t.Errorf("ingest span on an estimated clock states no uncertainty: %v", a)
					}
					if a[AttrTrusted].AsBool() != tc.trusted || a[AttrUntrustedWhy].AsString() != tc.reason {
						t.Errorf("trusted %v reason %q, want %v %q", a[AttrTrusted].AsBool(), a[AttrUntrustedWhy].AsString(),
							tc.trusted, tc.reason)
					}
					// Without time sync the producer is placed by the causal envelope: a one-sided bound, said so.
					if want := tc.clock == (instrument.ClockOffset{}); a[AttrEnvelope].AsBool() != want {
						t.Errorf("tidemark.envelope = %v, want %v", a[AttrEnvelope].AsBool(), want)
					}
					// Two-sided bounds hold: the true produce (truth) and append (+20 ms) lie within ± unc.
					if !a[AttrEnvelope].AsBool() {
						tol := time.Duration(unc * float64(time.Millisecond))
						if d := s.StartTime().Sub(truth); d.Abs() > tol {
							t.Errorf("ingest starts %v off the truth (± %v)", d, tol)
						}
						if d := s.EndTime().Sub(truth.Add(20 * time.Millisecond)); d.Abs() > tol {
							t.Errorf("ingest ends %v off the truth (± %v)", d, tol)
						}
					}
				case "queue_wait":
					queue++
					if a[AttrTrusted].AsBool() != true {
						t.Errorf("queue wait between two known clocks untrusted: %v", a)
					}
				}
			}
			if ingest != int(tc.emitted) || queue != tc.queue {
				t.Fatalf("ingest spans %d, queue-wait spans %d", ingest, queue)
			}
		})
	}
}

// discardSink acknowledges every write at once and keeps nothing.
type discardSink struct{}

func (discardSink) Write(_ context.Context, _ store.Rows, ack store.Ack) error {
	if ack != nil {
		ack(nil)
	}
	return nil
}

// BenchmarkReceiptsTracing is the receipts path (decode, correct, row) per receipt with tracing off, on with every
// trace left out by the ratio, and on with every trace kept (two hop spans per receipt, ended into an SDK provider
// with no exporter). `go test -run ^$ -bench ReceiptsTracing ./collector`.
func BenchmarkReceiptsTracing(b *testing.B) {
	truth := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	zero, one := 0.0, 1.0
	for _, tc := range []struct {
		name  string
		ratio *float64
	}{{"off", nil}, {"on-ratio-0", &zero}, {"on-all", &one}} {
		b.Run(tc.name, func(b *testing.B) {
			t := &testing.T{}
			deps, _ := c25Deps(t, truth, TracesConfig{SampleRatio: tc.ratio})
			if tc.ratio == nil {
				deps.tracer = nil
			} else {
				deps.tracer = newHopTracer(sdktrace.NewTracerProvider(), TracesConfig{SampleRatio: tc.ratio, KeepOver: -1}, "collector",
					deps.engine.Config(), deps.metrics)
			}
			deps.sink = discardSink{}
			rs := make([]instrument.Receipt, 256)
			p := &Receipts{pathDeps: deps}
			var off int64
			b.ReportAllocs()
			for b.Loop() {
				for i := range rs {
					rs[i] = c25Receipt(truth, "g", off, byte(off), true, 120)
					off++
				}
				v, err := instrument.AppendReceiptBatch(nil, rs)
				if err != nil {
					b.Fatal(err)
				}
				rec := kafka.Record{Topic: "tidemark-receipts", Offset: off, Value: v}
				if err := p.HandleBatch(context.Background(), kafka.Batch{Topic: "tidemark-receipts", Records: []kafka.Record{rec}}, func(int64) {}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rs)), "ns/receipt")
		})
	}
}

// With tracing on, an exemplar links only to a trace that exists: one the producer sampled (its spans are in the
// backend even when Tidemark's ratio left the record out), never one neither the producer nor Tidemark recorded.
func TestExemplarsOnlyForRecordedTraces(t *testing.T) {
	truth := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		sampled  bool
		exemplar bool
	}{
		{"producer sampled, Tidemark's ratio 0", true, true},
		{"producer did not sample, fast", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			zero := 0.0
			deps, rec := c25Deps(t, truth, TracesConfig{SampleRatio: &zero})
			handleReceipts(t, deps, c25Receipt(truth, "g", 100, 1, tc.sampled, 120))
			if n := len(rec.Ended()); n != 0 {
				t.Fatalf("%d spans, want none (ratio 0, under keep_over)", n)
			}
			var exemplars int
			for _, b := range histogram(t, deps.metrics.E2ELatency).GetBucket() {
				if b.GetExemplar() != nil {
					exemplars++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.exemplar]; exemplars != want {
				t.Fatalf("%d exemplars, want %d", exemplars, want)
			}
		})
	}
}
