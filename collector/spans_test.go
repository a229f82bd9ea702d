package collector

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency"
)

// testSpan describes one span of a test request.
type testSpan struct {
	host       string // resource host.name ("" none)
	kind       ptrace.SpanKind
	attrs      map[string]any
	start, end time.Time
	trace      byte
	failed     bool         // status ERROR
	parent     *testSpanRef // the consumer span's parent (nil: none)
	links      []testSpanRef
	service    string // resource service.name ("" none)
}

// testSpanRef names a span of a test request: its trace byte and its index in the request (span id).
type testSpanRef struct {
	trace byte
	index int
}

func testSpanID(i int) pcommon.SpanID { return pcommon.SpanID{1, byte(i >> 8), byte(i)} }

// otlpRequest encodes spans as one OTLP ExportTraceServiceRequest, one resource per span.
func otlpRequest(t *testing.T, spans ...testSpan) []byte {
	t.Helper()
	td := ptrace.NewTraces()
	for i, s := range spans {
		rs := td.ResourceSpans().AppendEmpty()
		if s.host != "" {
			rs.Resource().Attributes().PutStr("host.name", s.host)
		}
		if s.service != "" {
			rs.Resource().Attributes().PutStr("service.name", s.service)
		}
		sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetKind(s.kind)
		sp.SetName("orders process")
		sp.SetTraceID(pcommon.TraceID{s.trace, 1})
		sp.SetSpanID(testSpanID(i))
		if s.failed {
			sp.Status().SetCode(ptrace.StatusCodeError)
		}
		if s.parent != nil {
			sp.SetParentSpanID(testSpanID(s.parent.index))
		}
		for _, l := range s.links {
			link := sp.Links().AppendEmpty()
			link.SetTraceID(pcommon.TraceID{l.trace, 1})
			link.SetSpanID(testSpanID(l.index))
		}
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(s.start))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(s.end))
		if err := sp.Attributes().FromRaw(s.attrs); err != nil {
			t.Fatal(err)
		}
	}
	b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// javaProducer is the Java agent's producer span (kafka-clients instrumentation, messaging semconv 1.2x).
func javaProducer(host, topic string, partition, offset int64, start, end time.Time) testSpan {
	return testSpan{host: host, kind: ptrace.SpanKindProducer, start: start, end: end, attrs: map[string]any{
		"messaging.system": "kafka", "messaging.destination.name": topic, "messaging.operation": "publish",
		"messaging.destination.partition.id": itoa(partition), "messaging.kafka.message.offset": offset}}
}

// javaProcess is the Java agent's per-record process span.
func javaProcess(host, group, topic string, partition, offset int64, start, end time.Time) testSpan {
	return testSpan{host: host, kind: ptrace.SpanKindConsumer, start: start, end: end, attrs: map[string]any{
		"messaging.system": "kafka", "messaging.destination.name": topic, "messaging.operation": "process",
		"messaging.destination.partition.id": itoa(partition), "messaging.kafka.message.offset": offset,
		"messaging.kafka.consumer.group": group}}
}

func itoa(v int64) string { return string(rune('0' + v%10)) } // single-digit partitions in these tests

func TestClassifySpan(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	t1 := t0.Add(5 * time.Millisecond)
	kafkaAttrs := func(kv ...any) map[string]any {
		m := map[string]any{"messaging.system": "kafka"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name     string
		span     testSpan
		side     spanSide
		covers   bool
		noOffset bool
		group    string
		wantErr  error
	}{
		{name: "java agent producer", span: javaProducer("h", "orders", 3, 100, t0, t1), side: sideProducer},
		{name: "java agent process span", span: javaProcess("h", "g", "orders", 3, 100, t0, t1), side: sideConsumer, covers: true, group: "g"},
		// Stable messaging conventions: messaging.kafka.offset, messaging.consumer.group.name, operation.type.
		{name: "stable semconv process", side: sideConsumer, covers: true, group: "g2", span: testSpan{host: "h", kind: ptrace.SpanKindConsumer,
			start: t0, end: t1, attrs: kafkaAttrs("messaging.destination.name", "orders", "messaging.operation.type", "process",
				"messaging.destination.partition.id", "3", "messaging.kafka.offset", int64(100), "messaging.consumer.group.name", "g2")}},
		// Older agents: messaging.destination and an int partition attribute.
		{name: "old semconv producer", side: sideProducer, span: testSpan{host: "h", kind: ptrace.SpanKindProducer,
			start: t0, end: t1, attrs: kafkaAttrs("messaging.destination", "orders", "messaging.kafka.destination.partition", int64(3),
				"messaging.kafka.message.offset", int64(100))}},
		// Newer conventions give send calls kind CLIENT: the operation says which side.
		{name: "client kind send", side: sideProducer, span: testSpan{host: "h", kind: ptrace.SpanKindClient,
			start: t0, end: t1, attrs: kafkaAttrs("messaging.destination.name", "orders", "messaging.operation.type", "send",
				"messaging.destination.partition.id", "3", "messaging.kafka.offset", int64(100))}},
		// A per-record receive span ends at the hand-over: it does not cover processing.
		{name: "single receive span", side: sideConsumer, covers: false, group: "g", span: testSpan{host: "h", kind: ptrace.SpanKindConsumer,
			start: t0, end: t1, attrs: kafkaAttrs("messaging.destination.name", "orders", "messaging.operation", "receive",
				"messaging.destination.partition.id", "3", "messaging.kafka.offset", int64(100), "messaging.consumer.group.name", "g")}},
		// The Java agent's experimental receive span covers a poll of many records: no single record.
		{name: "poll receive span", wantErr: errBatchSpan, span: testSpan{host: "h", kind: ptrace.SpanKindConsumer,
			start: t0, end: t1, attrs: kafkaAttrs("messaging.destination.name", "orders", "messaging.operation", "receive",
				"messaging.batch.message_count", int64(12))}},
		{name: "http span", wantErr: errNotKafka, span: testSpan{host: "h", kind: ptrace.SpanKindServer, start: t0, end: t1,
			attrs: map[string]any{"http.request.method": "GET"}}},
		{name: "consumer without group", wantErr: errMalformedSpan, span: testSpan{host: "h", kind: ptrace.SpanKindConsumer,
			start: t0, end: t1, attrs: kafkaAttrs("messaging.destination.name", "orders", "messaging.operation", "process",
				"messaging.destination.partition.id", "3", "messaging.kafka.offset", int64(100))}},
		// A failed send has no offset: it names no record.
		{name: "failed producer without offset", wantErr: errMalformedSpan, span: testSpan{host: "h", kind: ptrace.SpanKindProducer,
			start: t0, end: t1, failed: true, attrs: kafkaAttrs("messaging.destination.name", "orders", "messaging.destination.partition.id", "3")}},
		// Python's confluent-kafka instrumentation: a producer span without the offset is joined through the
		// consumer span's parent; its consumer span names the record in messaging.message.id.
		{name: "python producer without offset", side: sideProducer, noOffset: true, span: testSpan{host: "h", kind: ptrace.SpanKindProducer,
			start: t0, end: t1, attrs: kafkaAttrs("messaging.destination.name", "orders", "messaging.operation", "publish")}},
		{name: "python process span", side: sideConsumer, covers: true, group: "g", span: testSpan{host: "h", kind: ptrace.SpanKindConsumer,
			start: t0, end: t1, attrs: kafkaAttrs("messaging.destination.name", "orders", "messaging.operation", "process",
				"messaging.message.id", "orders.3.100", "messaging.kafka.consumer.group", "g")}},
		{name: "no host", wantErr: errMalformedSpan, span: javaProducer("", "orders", 3, 100, t0, t1)},
		{name: "ends before it starts", wantErr: errMalformedSpan, span: javaProducer("h", "orders", 3, 100, t1, t0)},
		{name: "partition not a number", wantErr: errMalformedSpan, span: testSpan{host: "h", kind: ptrace.SpanKindProducer,
			start: t0, end: t1, attrs: kafkaAttrs("messaging.destination.name", "orders", "messaging.destination.partition.id", "x",
				"messaging.kafka.offset", int64(100))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := ptraceotlp.NewExportRequest()
			if err := req.UnmarshalProto(otlpRequest(t, tc.span)); err != nil {
				t.Fatal(err)
			}
			rs := req.Traces().ResourceSpans().At(0)
			ks, err := classifySpan(rs.Resource().Attributes(), rs.ScopeSpans().At(0).Spans().At(0), nil)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantPart, wantOff := int32(3), int64(100)
			if tc.noOffset {
				wantPart, wantOff = -1, -1
			}
			if ks.side != tc.side || ks.covers != tc.covers || ks.noOffset != tc.noOffset || ks.group != tc.group || ks.topic != "orders" ||
				ks.partition != wantPart || ks.offset != wantOff || ks.host != "h" || ks.start != t0.UnixNano() || ks.end != t1.UnixNano() {
				t.Fatalf("got %+v", ks)
			}
		})
	}
}

// fakeAppendReader answers append times from a map and counts reads.
type fakeAppendReader struct {
	stamps map[recordKey]appendStamp
	reads  atomic.Int64
}

func (f *fakeAppendReader) ReadAppends(_ context.Context, keys []recordKey) (map[recordKey]appendStamp, error) {
	f.reads.Add(1)
	out := map[recordKey]appendStamp{}
	for _, k := range keys {
		if s, ok := f.stamps[k]; ok {
			out[k] = s
		}
	}
	return out, nil
}

// spansEnv is a spans path over fakes, on a clock the test moves.
type spansEnv struct {
	s     *Spans
	sink  *fakeSink
	dlq   *fakeDLQ
	now   *time.Time
	marks []int64
}

func newSpansEnv(t *testing.T, now time.Time, cfg SpansConfig, appends map[recordKey]appendStamp) *spansEnv {
	t.Helper()
	deps, sink, dlq := newTestDeps(t, now)
	e := &spansEnv{sink: sink, dlq: dlq, now: &now}
	deps.clock = func() time.Time { return *e.now }
	c := Config{Spans: cfg}
	c.SetDefaults()
	e.s = newSpans(deps, c.Spans, &fakeAppendReader{stamps: appends})
	return e
}

func (e *spansEnv) handle(t *testing.T, offset int64, values ...[]byte) {
	t.Helper()
	b := kafka.Batch{Topic: DefaultSpansTopic}
	for i, v := range values {
		b.Records = append(b.Records, kafka.Record{Topic: DefaultSpansTopic, Offset: offset + int64(i), Value: v})
	}
	if err := e.s.HandleBatch(context.Background(), b, func(n int64) { e.marks = append(e.marks, n) }); err != nil {
		t.Fatal(err)
	}
}

func (e *spansEnv) latencyRows() []store.LatencyRow {
	var out []store.LatencyRow
	for _, r := range e.sink.rows {
		out = append(out, r.Latency...)
	}
	return out
}

// bracketBroker gives broker-1 a probe history at offset 0 ± 1.5 ms over the minute before truth (as
// seedC25Clocks), so the engine trusts it.
func bracketBroker(t *testing.T, s *Spans, truth time.Time) {
	t.Helper()
	for ago := 60 * time.Second; ago >= 0; ago -= 10 * time.Second {
		at := truth.Add(-ago)
		if err := s.engine.ObserveBracket(latency.Bracket{Host: s.hosts.id("broker-1"),
			Send: at.Add(19500 * time.Microsecond), RemoteMs: at.Add(20 * time.Millisecond).UnixMilli(),
			Ack: at.Add(21500 * time.Microsecond)}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSpansPathCorrectsSkewedAgentSpans: a Java-agent application whose producer host runs 2.5 s ahead and whose
// consumer host runs 300 ms behind. True send 12:00:00.000, append .020 (broker at offset 0), ack .022, receive
// .100, processed .120. Every ten seconds of the minute before, the application sent one record the same way but
// consumed it 2 ms after its append, so the producer host is bracketed by its own spans (±12.5 ms: the 22 ms round
// trip, the 1 ms stamp truncation, the broker's ±1.5 ms) and the consumer host has a causal envelope 2 ms from the
// truth (a consumer span cannot bracket its host: the envelope is as tight as the smallest queue wait seen). The
// row's stages are never negative, each is within its stated uncertainty (plus that envelope bias for the stages
// that end on the consumer) of the truth, and the producer host is bracketed around its true offset.
func TestSpansPathCorrectsSkewedAgentSpans(t *testing.T) {
	truth := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	const pSkew, cSkew = 2500 * time.Millisecond, -300 * time.Millisecond
	appends := map[recordKey]appendStamp{}
	var reqs [][]byte
	for i := int64(0); i <= 6; i++ {
		at := truth.Add(time.Duration(i-6) * 10 * time.Second)
		appends[recordKey{"orders", 3, 100 + i}] = appendStamp{ms: at.Add(20 * time.Millisecond).UnixMilli(), broker: 1}
		recv := 22 * time.Millisecond // a consumer that keeps up gets the record 2 ms after its append...
		if i == 6 {
			recv = 100 * time.Millisecond // ...the record measured waited 80 ms
		}
		prod := javaProducer("java-producer", "orders", 3, 100+i, at.Add(pSkew), at.Add(22*time.Millisecond+pSkew))
		proc := javaProcess("java-consumer", "g", "orders", 3, 100+i, at.Add(recv+cSkew), at.Add(recv+20*time.Millisecond+cSkew))
		prod.trace, proc.trace = byte(i+1), byte(i+1) // a trace per record; the process span learns its producer by offset
		reqs = append(reqs, otlpRequest(t, prod, proc))
	}
	e := newSpansEnv(t, truth.Add(-time.Minute), SpansConfig{}, appends)
	rec := tracetest.NewSpanRecorder()
	tc := TracesConfig{}
	tc.setDefaults(nil)
	e.s.tracer = newHopTracer(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), tc, "collector",
		e.s.engine.Config(), e.s.metrics)
	bracketBroker(t, e.s, truth)
	for i, r := range reqs {
		*e.now = truth.Add(time.Duration(i-6)*10*time.Second + 200*time.Millisecond)
		e.handle(t, int64(i), r)
	}
	rows := e.latencyRows()
	if len(rows) != len(reqs) || len(e.dlq.recs) != 0 {
		t.Fatalf("%d rows, %d dead letters; want %d rows, none", len(rows), len(e.dlq.recs), len(reqs))
	}
	row := rows[len(rows)-1]
	if row.Group != "g" || row.Topic != "orders" || row.Partition != 3 || row.Offset != 106 ||
		row.ProducerHost != "java-producer" || row.ConsumerHost != "java-consumer" || row.BrokerHost != "broker-1" || row.TraceID == "" {
		t.Fatalf("row identity %+v", row)
	}
	// Naive values, as other tools show them: ingest −2480 ms.
	if row.IngestNaiveMs != -2480 || row.ProcessNaiveMs != 20 {
		t.Fatalf("naive stages ingest %d process %d", row.IngestNaiveMs, row.ProcessNaiveMs)
	}
	unc := row.UncertaintyMs
	for _, st := range []struct {
		name      string
		got, want int64
	}{{"ingest", row.IngestMs, 20}, {"queue", row.QueueMs, 80}, {"process", row.ProcessMs, 20}, {"e2e", row.E2EMs, 120}} {
		if st.got < 0 {
			t.Errorf("%s stage %d ms is negative", st.name, st.got)
		}
		if math.Abs(float64(st.got-st.want)) > unc+1+2 { // +1: rounding to whole ms; +2: the envelope's bias
			t.Errorf("%s stage %d ms, truth %d ms, stated uncertainty %.1f ms", st.name, st.got, st.want, unc)
		}
	}
	if row.ProcessMs != 20 {
		t.Errorf("processing (one clock) %d ms, want exactly 20", row.ProcessMs)
	}
	o, err := e.s.engine.Offset(e.s.hosts.id("java-producer"), truth)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != latency.KindBracketed || o.Lower > pSkew || o.Upper < pSkew || o.Uncertainty > 13*time.Millisecond {
		t.Fatalf("producer host %v ± %v [%v, %v] (%v), want bracketed around %v within 13 ms", o.Offset, o.Uncertainty,
			o.Lower, o.Upper, o.Kind, pSkew)
	}
	if o, _ := e.s.engine.Offset(e.s.hosts.id("java-consumer"), truth); o.Kind != latency.KindEnvelope || o.Upper < cSkew {
		t.Fatalf("consumer host %v [%v, %v] (%v), want a causal envelope above the true %v", o.Offset, o.Lower, o.Upper, o.Kind, cSkew)
	}
	checkSpansHopSpans(t, rec.Ended(), truth, pSkew, unc)
}

// checkSpansHopSpans checks the hop spans of TestSpansPathCorrectsSkewedAgentSpans's measured record (trace 7): an
// ingest and a queue-wait span under the agent's producer span (span 0 of its request), on the reference clock
// within the row's uncertainty (+2 ms: the consumer envelope's bias) of the truth, where the naive ingest is −2480 ms.
func checkSpansHopSpans(t *testing.T, spans []sdktrace.ReadOnlySpan, truth time.Time, pSkew time.Duration, unc float64) {
	t.Helper()
	want := map[string][2]time.Duration{"ingest orders": {0, 20 * time.Millisecond},
		"queue wait orders": {20 * time.Millisecond, 100 * time.Millisecond}}
	tol := time.Duration((unc + 1 + 2) * float64(time.Millisecond))
	found := 0
	for _, s := range spans {
		if s.Parent().TraceID() != trace.TraceID(pcommon.TraceID{7, 1}) {
			continue
		}
		w, ok := want[s.Name()]
		if !ok {
			t.Errorf("unexpected hop span %q", s.Name())
			continue
		}
		found++
		if s.Parent().SpanID() != trace.SpanID(testSpanID(0)) || !s.Parent().IsRemote() {
			t.Errorf("%s parent %v, want the producer span %v", s.Name(), s.Parent(), testSpanID(0))
		}
		if d := s.StartTime().Sub(truth.Add(w[0])); d.Abs() > tol {
			t.Errorf("%s starts %v off the truth (tolerance %v; the producer's clock is %v ahead)", s.Name(), d, tol, pSkew)
		}
		if d := s.EndTime().Sub(truth.Add(w[1])); d.Abs() > tol {
			t.Errorf("%s ends %v off the truth (tolerance %v)", s.Name(), d, tol)
		}
	}
	if found != 2 {
		t.Fatalf("%d hop spans of the measured record among %d, want ingest and queue wait", found, len(spans))
	}
}

// TestSpansJoinWaitsForProducer: a consumer span read before its producer span waits (its batch is not submitted,
// nothing is marked); the producer span completes it with the produce stamp. A consumer span whose producer span
// never comes is stored without it once join_wait is over, and its batch is marked only after the sink's ack.
func TestSpansJoinWaitsForProducer(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	appends := map[recordKey]appendStamp{
		{"orders", 0, 5}: {ms: t0.Add(10 * time.Millisecond).UnixMilli(), broker: 1},
		{"orders", 0, 6}: {ms: t0.Add(10 * time.Millisecond).UnixMilli(), broker: 1},
	}
	e := newSpansEnv(t, t0, SpansConfig{JoinWait: 5 * time.Second}, appends)
	e.handle(t, 0, otlpRequest(t, javaProcess("c", "g", "orders", 0, 5, t0.Add(50*time.Millisecond), t0.Add(60*time.Millisecond))))
	if len(e.sink.rows) != 0 || e.s.held != 1 {
		t.Fatalf("consumer span did not wait: %d writes, %d held", len(e.sink.rows), e.s.held)
	}
	e.handle(t, 1, otlpRequest(t, javaProducer("p", "orders", 0, 5, t0, t0.Add(20*time.Millisecond))))
	rows := e.latencyRows()
	if len(rows) != 1 || rows[0].EventMs != t0.UnixMilli() || rows[0].ProducerHost != "p" || rows[0].Offset != 5 {
		t.Fatalf("joined rows %+v", rows)
	}
	if e.s.held != 0 {
		t.Fatalf("%d still held", e.s.held)
	}

	// No producer span: stored without it after join_wait, not before.
	e.handle(t, 2, otlpRequest(t, javaProcess("c", "g", "orders", 0, 6, t0.Add(70*time.Millisecond), t0.Add(80*time.Millisecond))))
	n := len(e.latencyRows())
	if err := e.s.sweep(context.Background(), t0.Add(4*time.Second)); err != nil || len(e.latencyRows()) != n {
		t.Fatalf("stored before join_wait (err %v)", err)
	}
	if err := e.s.sweep(context.Background(), t0.Add(6*time.Second)); err != nil {
		t.Fatal(err)
	}
	rows = e.latencyRows()
	if len(rows) != n+1 || rows[n].EventMs != 0 || rows[n].Offset != 6 || rows[n].AppendMs == 0 {
		t.Fatalf("rows after join_wait %+v", rows)
	}
	if len(e.marks) != 0 {
		t.Fatal("marked before the sink acknowledged")
	}
	for _, ack := range e.sink.acks {
		ack(nil)
	}
	if len(e.marks) == 0 || e.marks[len(e.marks)-1] != 3 {
		t.Fatalf("marks %v, want up to 3", e.marks)
	}
}

// TestSpansBadInputDeadLettered: a record that is not OTLP is dead-lettered whole; a request holding a good Kafka
// span, an HTTP span and a consumer span without its group yields the good span's row, skips the HTTP span, and
// dead-letters a request holding the bad span only.
func TestSpansBadInputDeadLettered(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := newSpansEnv(t, t0, SpansConfig{JoinWait: -1}, nil) // -1: rejected by Validate, here: no waiting
	e.s.cfg.JoinWait = 0
	http := testSpan{host: "h", kind: ptrace.SpanKindServer, start: t0, end: t0.Add(time.Millisecond), attrs: map[string]any{"http.route": "/"}}
	noGroup := javaProcess("c", "g", "orders", 0, 8, t0, t0.Add(time.Millisecond))
	delete(noGroup.attrs, "messaging.kafka.consumer.group")
	mixed := otlpRequest(t, javaProcess("c", "g", "orders", 0, 7, t0, t0.Add(time.Millisecond)), http, noGroup)
	e.handle(t, 0, []byte{0xff, 0xff, 0xff}, mixed)
	if len(e.dlq.recs) != 2 || !errors.Is(e.dlq.reasons[0], errMalformedOTLP) || !errors.Is(e.dlq.reasons[1], errMalformedSpan) {
		t.Fatalf("dead letters %d %v", len(e.dlq.recs), e.dlq.reasons)
	}
	if reason(e.dlq.reasons[1]) != "malformed_span" || reason(e.dlq.reasons[0]) != "malformed_otlp" {
		t.Fatalf("reasons %q %q", reason(e.dlq.reasons[0]), reason(e.dlq.reasons[1]))
	}
	d, err := decodeSpans(e.dlq.recs[1].Value, maxSpansPerRequest, nil)
	if err != nil || d.malformed != 1 || len(d.spans) != 0 || d.notKafka != 0 || e.dlq.recs[1].Offset != 1 {
		t.Fatalf("dead-lettered request holds %+v (err %v)", d, err)
	}
	if rows := e.latencyRows(); len(rows) != 1 || rows[0].Offset != 7 {
		t.Fatalf("rows %+v", rows)
	}
}

// TestSpansHeldBounded: with max_pending 2, consumer spans beyond two waiting are stored at once (in their path's
// order only when nothing of their path waits), and producer spans beyond two evict the oldest: a flood of spans
// that never join holds at most max_pending of each.
func TestSpansHeldBounded(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := newSpansEnv(t, t0, SpansConfig{MaxPending: 2}, nil)
	for i := int64(0); i < 50; i++ {
		// each consumer span in its own partition (path), so a full queue does not hold later ones back
		e.handle(t, 2*i, otlpRequest(t, javaProcess("c", "g", "orders", i%10, 1000+i, t0, t0.Add(time.Millisecond))))
		e.handle(t, 2*i+1, otlpRequest(t, javaProducer("p", "other", 0, i, t0, t0.Add(time.Millisecond))))
		if e.s.held > 2 || len(e.s.producers.m) > 2 {
			t.Fatalf("after %d: %d consumer spans held, %d producer spans kept; max_pending 2", i+1, e.s.held, len(e.s.producers.m))
		}
	}
	if len(e.s.producers.order) > 2*2+1 {
		t.Fatalf("producer order keeps %d keys", len(e.s.producers.order))
	}
}

// countingSink acknowledges every write at once and keeps only a count of rows.
type countingSink struct{ rows atomic.Int64 }

func (s *countingSink) Write(_ context.Context, rows store.Rows, ack store.Ack) error {
	s.rows.Add(int64(rows.Len()))
	if ack != nil {
		ack(nil)
	}
	return nil
}

// TestSpansFloodBounded: 100,000 malformed Kafka spans, then 100,000 consumer spans whose producer span never
// comes, leave the path holding at most max_pending consumer spans, and the heap (after a GC) within a few MB of
// where it started: every malformed span is dead-lettered, every consumer span is stored.
func TestSpansFloodBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("floods 200,000 spans")
	}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := newSpansEnv(t, t0, SpansConfig{MaxPending: 1000}, nil)
	sink := &countingSink{}
	e.s.sink = sink
	var dead atomic.Int64
	e.s.dlq = dlqFunc(func(recs []kafka.Record) { dead.Add(int64(len(recs))) })
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	const perRecord, records = 1000, 100
	bad := make([]testSpan, perRecord)
	for i := range bad {
		bad[i] = javaProcess("c", "g", "orders", 0, int64(i), t0, t0.Add(time.Millisecond))
		delete(bad[i].attrs, "messaging.kafka.consumer.group")
	}
	badReq := otlpRequest(t, bad...)
	off := int64(0)
	for r := 0; r < records; r++ {
		e.handle(t, off, badReq)
		off++
	}
	for r := 0; r < records; r++ {
		spans := make([]testSpan, perRecord)
		for i := range spans {
			spans[i] = javaProcess("c", "g", "orders", int64(i%10), int64(r*perRecord+i), t0, t0.Add(time.Millisecond))
		}
		e.handle(t, off, otlpRequest(t, spans...))
		off++
		if e.s.held > 1000 {
			t.Fatalf("%d consumer spans held, max_pending 1000", e.s.held)
		}
	}
	if err := e.s.sweep(context.Background(), t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	after := heap()
	if dead.Load() != records || sink.rows.Load() != records*perRecord || e.s.held != 0 {
		t.Fatalf("%d dead-lettered records, %d rows, %d held; want %d, %d, 0", dead.Load(), sink.rows.Load(), e.s.held, records, records*perRecord)
	}
	grown := int64(after) - int64(before)
	t.Logf("heap %d → %d bytes (%+d) after 200,000 spans", before, after, grown)
	if grown > 16<<20 {
		t.Fatalf("heap grew %d bytes after the flood", grown)
	}
}

// dlqFunc is a DeadLetters that hands the records to a function and keeps nothing.
type dlqFunc func(recs []kafka.Record)

func (f dlqFunc) Send(_ context.Context, _ string, recs []kafka.Record, _ []error) error {
	f(recs)
	return nil
}

// TestSpansConcurrentPartitions: four spans-topic partitions handled at once while the sweeper runs, producer and
// consumer spans of each record arriving on different partitions in either order: every consumer span is stored
// exactly once, joined with its producer span when that arrived within join_wait. Run with -race.
func TestSpansConcurrentPartitions(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := newSpansEnv(t, t0, SpansConfig{JoinWait: time.Hour}, nil)
	sink := &countingSink{}
	e.s.sink = sink
	const perPartition = 200
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sweeps := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := e.s.sweep(ctx, t0); err != nil {
				sweeps <- err
				return
			}
		}
		sweeps <- nil
	}()
	errs := make(chan error, 4)
	for p := int32(0); p < 4; p++ {
		go func() {
			for i := int64(0); i < perPartition; i++ {
				// partition p carries the consumer spans of records p·1000+i and the producer spans of the
				// next partition's records, so each record's two sides race on two goroutines.
				q := (p + 1) % 4
				v := otlpRequest(t,
					javaProcess("c", "g", "orders", 0, int64(p)*1000+i, t0.Add(time.Millisecond), t0.Add(2*time.Millisecond)),
					javaProducer("p", "orders", 0, int64(q)*1000+i, t0, t0.Add(time.Millisecond)))
				b := kafka.Batch{Topic: DefaultSpansTopic, Partition: p, Records: []kafka.Record{{Topic: DefaultSpansTopic, Partition: p, Offset: i, Value: v}}}
				if err := e.s.HandleBatch(ctx, b, func(int64) {}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-sweeps; err != nil {
		t.Fatal(err)
	}
	// Every producer span arrived: whatever still waits is joined, none is left.
	e.s.mu.Lock()
	held := e.s.held
	e.s.mu.Unlock()
	if got := sink.rows.Load(); got != 4*perPartition || held != 0 {
		t.Fatalf("%d rows, %d held; want %d rows, none held", got, held, 4*perPartition)
	}
}

// TestSpansJoinThroughParent: Python's confluent-kafka instrumentation gives a producer span without the offset and
// a process span naming its record in messaging.message.id, whose parent is the producer span. The consumer span,
// read first, waits; the producer span completes it through the parent, with the produce stamp, and, now that its
// record (and so its append time) is known, brackets the producer's host.
// pyProducer is the producer span of OpenTelemetry's Python confluent-kafka instrumentation (0.66b1), as exported
// from a real run: kind PRODUCER, named "<topic> send", the old conventions' messaging.destination, no partition or
// offset, ending when produce() returns (before the record is sent).
func pyProducer(host, topic string, trace byte, start, end time.Time) testSpan {
	return testSpan{host: host, service: "py-app", kind: ptrace.SpanKindProducer, trace: trace, start: start, end: end,
		attrs: map[string]any{"messaging.system": "kafka", "messaging.destination": topic,
			"messaging.destination_kind": "queue", "messaging.operation": "publish"}}
}

// pyProcess is the same instrumentation's process span for one record of a poll: kind CONSUMER, the child of a
// "recv" span without attributes that starts a trace of its own, linked to the record's producer span, with the
// partition, messaging.message.id = "<topic>.<partition>.<offset>" and no consumer group; it starts when poll()
// returns the record and ends when the next poll() begins.
func pyProcess(host, topic string, partition, offset int64, trace byte, parent int, producer testSpanRef, start, end time.Time) testSpan {
	return testSpan{host: host, service: "py-app", kind: ptrace.SpanKindConsumer, trace: trace, start: start, end: end,
		parent: &testSpanRef{trace: trace, index: parent}, links: []testSpanRef{producer},
		attrs: map[string]any{"messaging.system": "kafka", "messaging.destination": topic,
			"messaging.kafka.partition": partition, "messaging.destination_kind": "queue",
			"messaging.operation": "process", "messaging.message.id": fmt.Sprintf("%s.%d.%d", topic, partition, offset)}}
}

// pyRecv is the attribute-less "recv" span the process span is the child of: not a Kafka span.
func pyRecv(host string, trace byte, at time.Time) testSpan {
	return testSpan{host: host, service: "py-app", kind: ptrace.SpanKindConsumer, trace: trace, start: at, end: at}
}

// TestSpansJoinThroughParent: Python's confluent-kafka spans, with the attribute set and structure a real run
// exports (pyProducer, pyProcess). The process span names no group: spans.consumer_groups gives it by service.name,
// and without that entry it is dead-lettered. It is joined to its producer span through its link (or its parent,
// for instrumentations that parent the consumer span on the producer's), whichever arrives first. The producer span
// ends before its record is appended, so it brackets its host only up to the record's receipt on the same host; a
// producer on another host stays unbracketed.
func TestSpansJoinThroughParent(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	appends := map[recordKey]appendStamp{}
	for o := int64(40); o < 44; o++ {
		appends[recordKey{"orders", 2, o}] = appendStamp{ms: t0.Add(3 * time.Millisecond).UnixMilli(), broker: 1}
	}
	e := newSpansEnv(t, t0.Add(time.Second), SpansConfig{JoinWait: 5 * time.Second,
		ConsumerGroups: map[string]string{"py-app": "pyg"}}, appends)
	bracketBroker(t, e.s, t0)
	producer := pyProducer("py-host", "orders", 5, t0, t0.Add(150*time.Microsecond))
	consumer := pyProcess("py-host", "orders", 2, 40, 9, 1, testSpanRef{trace: 5, index: 0},
		t0.Add(20*time.Millisecond), t0.Add(30*time.Millisecond))
	// The process span sits at index 2 of its own request, its recv parent at index 1; its link names span index 0
	// of the producer's request.
	e.handle(t, 0, otlpRequest(t, testSpan{host: "unrelated", kind: ptrace.SpanKindServer, start: t0, end: t0.Add(time.Millisecond),
		attrs: map[string]any{"http.route": "/"}}, pyRecv("py-host", 9, t0.Add(20*time.Millisecond)), consumer))
	if e.s.held != 1 {
		t.Fatalf("%d held, want the consumer span waiting", e.s.held)
	}
	e.handle(t, 1, otlpRequest(t, producer))
	rows := e.latencyRows()
	if len(rows) != 1 || rows[0].Offset != 40 || rows[0].Partition != 2 || rows[0].Group != "pyg" ||
		rows[0].ProducerHost != "py-host" || rows[0].EventMs != t0.UnixMilli() {
		t.Fatalf("rows %+v", rows)
	}
	if len(e.s.waitingBySpan) != 0 || len(e.s.waiting) != 0 || e.s.held != 0 {
		t.Fatalf("left waiting: %d by span, %d by record, %d held", len(e.s.waitingBySpan), len(e.s.waiting), e.s.held)
	}
	// Bracketed from the send to the receipt (20 ms wide), around the true offset 0.
	if o, _ := e.s.engine.Offset(e.s.hosts.id("py-host"), t0); o.Kind != latency.KindBracketed || o.Lower > 0 || o.Upper < 0 {
		t.Fatalf("producer host %v [%v, %v] (%v), want bracketed around 0 through its joined record", o.Offset, o.Lower, o.Upper, o.Kind)
	}
	// The other order: the producer span first, kept by its span id; the consumer span joins it at once, here
	// through its parent.
	producer.trace, consumer.trace, consumer.parent, consumer.links = 6, 6, &testSpanRef{trace: 6, index: 0}, nil
	consumer.attrs["messaging.message.id"] = "orders.2.41"
	e.handle(t, 2, otlpRequest(t, producer))
	e.handle(t, 3, otlpRequest(t, producer, consumer)) // index 1 again; a repeated producer span is kept once
	if rows := e.latencyRows(); len(rows) != 2 || rows[1].Offset != 41 || rows[1].ProducerHost != "py-host" || e.s.held != 0 {
		t.Fatalf("rows %+v, %d held", rows, e.s.held)
	}
	// A producer on another host: joined, but its span's end (before the append) brackets nothing.
	other := pyProducer("py-other", "orders", 7, t0, t0.Add(150*time.Microsecond))
	consumer = pyProcess("py-host", "orders", 2, 42, 8, 1, testSpanRef{trace: 7, index: 0},
		t0.Add(20*time.Millisecond), t0.Add(30*time.Millisecond))
	e.handle(t, 4, otlpRequest(t, other))
	e.handle(t, 5, otlpRequest(t, pyRecv("py-host", 8, t0.Add(20*time.Millisecond)), pyRecv("py-host", 8, t0.Add(20*time.Millisecond)), consumer))
	if rows := e.latencyRows(); len(rows) != 3 || rows[2].Offset != 42 || rows[2].ProducerHost != "py-other" {
		t.Fatalf("rows %+v", rows)
	}
	if o, _ := e.s.engine.Offset(e.s.hosts.id("py-other"), t0); o.Kind == latency.KindBracketed {
		t.Fatalf("producer host py-other bracketed (%v ± %v) by a span that ends before its record's append", o.Offset, o.Uncertainty)
	}
	// Without a spans.consumer_groups entry for its service the group-less process span is dead-lettered.
	e.s.cfg.ConsumerGroups = nil
	consumer.attrs["messaging.message.id"] = "orders.2.43"
	e.handle(t, 6, otlpRequest(t, consumer))
	if rows := e.latencyRows(); len(rows) != 3 || len(e.dlq.recs) != 1 {
		t.Fatalf("%d rows, %d dead-lettered, want the group-less span dead-lettered", len(rows), len(e.dlq.recs))
	}
}

// TestSpansConsumerGroupsValidated: a spans.consumer_groups entry needs a service name and a group.
func TestSpansConsumerGroupsValidated(t *testing.T) {
	for _, tc := range []struct {
		groups map[string]string
		bad    bool
	}{{map[string]string{"py-app": "orders"}, false}, {map[string]string{"py-app": ""}, true}, {map[string]string{"": "orders"}, true}} {
		c := Config{Spans: SpansConfig{Enabled: true, ConsumerGroups: tc.groups}}
		c.SetDefaults()
		err := c.Validate()
		if got := err != nil && strings.Contains(err.Error(), "spans.consumer_groups"); got != tc.bad {
			t.Errorf("consumer_groups %v: %v, want an error naming it: %v", tc.groups, err, tc.bad)
		}
	}
}

// TestSpansBatchOverFakes drives the spans path's batch handling through fakes (append reader, sink, dead-letter
// topic). One request holds the Java agent's producer and process spans of orders/1 offsets 50 and 51; the append
// reader knows only 51's LogAppendTime (broker 2), so 50's row has no append stamp and is counted no_append. Each
// process span joins its producer span of the same batch at once. 51's producer span, which names its offset, is
// fed to the engine as a bracket, and fails as one: broker 2's own clock is not bracketed by any probe.
func TestSpansBatchOverFakes(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	appended := t0.Add(10 * time.Millisecond)
	e := newSpansEnv(t, t0.Add(time.Second), SpansConfig{JoinWait: 5 * time.Second},
		map[recordKey]appendStamp{{"orders", 1, 51}: {ms: appended.UnixMilli(), broker: 2}})
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	e.handle(t, 0, otlpRequest(t,
		javaProducer("p", "orders", 1, 50, ms(0), ms(20)), javaProcess("c", "g", "orders", 1, 50, ms(50), ms(60)),
		javaProducer("p", "orders", 1, 51, ms(1), ms(21)), javaProcess("c", "g", "orders", 1, 51, ms(51), ms(61))))
	if len(e.dlq.recs) != 0 || len(e.sink.rows) != 1 {
		t.Fatalf("%d dead letters, %d writes; want none, one", len(e.dlq.recs), len(e.sink.rows))
	}
	rows := e.latencyRows()
	if len(rows) != 2 {
		t.Fatalf("rows %+v, want 2", rows)
	}
	byOffset := map[int64]store.LatencyRow{rows[0].Offset: rows[0], rows[1].Offset: rows[1]}
	if r := byOffset[50]; r.Group != "g" || r.ProducerHost != "p" || r.ConsumerHost != "c" || r.EventMs != ms(0).UnixMilli() ||
		r.AppendMs != 0 || r.BrokerHost != "" || r.ReceiveMs != ms(50).UnixMilli() || r.ProcessedMs != ms(60).UnixMilli() ||
		r.ReceiptPartition != -1 || r.ReceiptOffset != -1 || r.E2ENaiveMs != 60 {
		t.Errorf("offset 50 %+v, want produce, receive and processed stamps, no append stamp", r)
	}
	if r := byOffset[51]; r.AppendMs != appended.UnixMilli() || r.BrokerHost != "broker-2" || r.EventMs != ms(1).UnixMilli() ||
		r.IngestNaiveMs != 9 || r.QueueNaiveMs != 41 {
		t.Errorf("offset 51 %+v, want broker 2's append stamp", r)
	}
	m := e.s.metrics
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"records", testutil.ToFloat64(m.Records.WithLabelValues(PathSpans)), 1},
		{"producer", testutil.ToFloat64(m.Spans.WithLabelValues("producer")), 2},
		{"consumer", testutil.ToFloat64(m.Spans.WithLabelValues("consumer")), 2},
		{"no_append", testutil.ToFloat64(m.Spans.WithLabelValues("no_append")), 1},
		{"join_timeout", testutil.ToFloat64(m.Spans.WithLabelValues("join_timeout")), 0},
		{"bracket", testutil.ToFloat64(m.SpanBrackets.WithLabelValues("broker_not_bracketed")), 1},
		{"rows", testutil.ToFloat64(m.Rows.WithLabelValues(PathSpans)), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if e.s.held != 0 || len(e.marks) != 0 {
		t.Fatalf("%d held, marks %v; want none before the ack", e.s.held, e.marks)
	}
	e.sink.acks[0](nil)
	if len(e.marks) != 1 || e.marks[0] != 1 {
		t.Fatalf("marks %v, want [1] after the ack", e.marks)
	}
}
