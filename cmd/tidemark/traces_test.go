package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/latency/instrument"
)

// The tracing integration tests run `tidemark run` (in process) against the real Kafka, ClickHouse and Jaeger the
// stack starts (make test: `stack.sh with --jaeger`), with an instrumented producer 2.5 s ahead and a consumer 300 ms
// behind, each exporting its own spans to Jaeger over OTLP like a real application.

const (
	producerSkew = 2500 * time.Millisecond
	consumerSkew = -300 * time.Millisecond
)

// appProvider is an application's TracerProvider exporting to Jaeger (OTLP/HTTP when http, else gRPC).
func appProvider(t *testing.T, service string, jg testenv.JaegerAddrs, http bool) *sdktrace.TracerProvider {
	t.Helper()
	var exp sdktrace.SpanExporter
	var err error
	if http {
		exp, err = otlptracehttp.New(t.Context(), otlptracehttp.WithEndpoint(jg.OTLPHTTP), otlptracehttp.WithInsecure())
	} else {
		exp, err = otlptracegrpc.New(t.Context(), otlptracegrpc.WithEndpoint(jg.OTLPGRPC), otlptracegrpc.WithInsecure())
	}
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(service))),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(100*time.Millisecond)))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// tracedRun is a `tidemark run` started for a test, plus the names it uses.
type tracedRun struct {
	t                      *testing.T
	brokers                []string
	topic, receipts, group string
	addr                   string // http listen address
	conn                   driver.Conn
	cancel                 context.CancelFunc
	done                   chan error
}

// startTracedRun starts `tidemark run` with the receipts and probe paths and tracing to otlpEndpoint (protocol
// grpc or http), and waits until /readyz answers.
func startTracedRun(t *testing.T, protocol, otlpEndpoint, extra string) *tracedRun {
	t.Helper()
	r := &tracedRun{t: t, brokers: testenv.Kafka(t), addr: testenv.FreeAddr(t), done: make(chan error, 1),
		topic:    testenv.CreateTopic(t, "orders", testenv.Topic{Partitions: 1, Configs: map[string]string{"message.timestamp.type": "LogAppendTime"}}),
		receipts: testenv.Name(t, "rc"), group: testenv.Name(t, "app")}
	var db string
	db, r.conn = testenv.ClickHouseDB(t)
	probe := testenv.Name(t, "probe")
	dlq := testenv.Name(t, "dlq")
	adm := testenv.Admin(t)
	t.Cleanup(func() {
		for _, tp := range []string{r.receipts, probe, dlq} {
			_ = adm.DeleteTopic(tp)
		}
	})
	// A 20 s clock window: offsets are trusted after a quarter of it (5 s) instead of 30 s.
	body := fmt.Sprintf(`kafka: {brokers: [%s]}
clickhouse: {addr: [%s], database: %s, writer: {flush_interval: 200ms}}
latency: {window: 20s, envelope_window: 20s}
collector:
  dead_letter_topic: %s
  replay_state_topic: %s
  max_wait: 50ms
  receipts: {enabled: true, topic: %s, group: %s, partitions: 1}
  probe: {enabled: true, topic: %s, group: %s, interval: 200ms}
lag: {enabled: false}
http: {listen: "%s", shutdown_timeout: 5s}
tracing: {enabled: true, protocol: %s, endpoint: "%s", batch_timeout: 100ms, timeout: 2s%s}
`, strings.Join(r.brokers, ", "), testenv.ClickHouseAddr(t), db, dlq, testenv.Name(t, "rs"), r.receipts, testenv.Name(t, "rcg"), probe,
		testenv.Name(t, "prg"), r.addr, protocol, otlpEndpoint, extra)
	p := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(p, nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		r.done <- run(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	}()
	t.Cleanup(r.stop)
	waitStatus(t, "http://"+r.addr+"/readyz", http.StatusOK, 90*time.Second)
	testenv.WaitTopicReady(t, r.receipts, 1)
	return r
}

func (r *tracedRun) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Errorf("tidemark run: %v", err)
		}
	case <-time.After(90 * time.Second):
		r.t.Error("tidemark run did not stop within 90 s")
	}
}

// metric returns the sum of the samples of a metric family on /metrics whose labels contain every given pair.
func (r *tracedRun) metric(name string, labels ...string) float64 {
	r.t.Helper()
	_, body := get("http://" + r.addr + "/metrics")
	sum := 0.0
	re := regexp.MustCompile(`(?m)^` + name + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			ok = ok && strings.Contains(m[1], labels[i]+`="`+labels[i+1]+`"`)
		}
		if ok {
			v, _ := strconv.ParseFloat(m[2], 64)
			sum += v
		}
	}
	return sum
}

// sent is one record the test's producer sent, with the true (unskewed) time window of its produce stamp.
type sent struct {
	offset   int64
	traceID  string
	from, to time.Time // the interceptor ran between these, on the true clock
}

// app is the instrumented application: a producer host 2.5 s ahead and a consumer host 300 ms behind, both with
// time sync against the collector, each with its own TracerProvider exporting to Jaeger.
type app struct {
	t      *testing.T
	r      *tracedRun
	prod   sarama.SyncProducer
	mu     sync.Mutex // guards sent
	sent   []sent
	cancel context.CancelFunc
	wg     sync.WaitGroup
	em     *instrument.Emitter
}

func startApp(t *testing.T, r *tracedRun, jg testenv.JaegerAddrs) *app {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &app{t: t, r: r, cancel: cancel}
	t.Cleanup(a.stop)
	syncURL := "http://" + r.addr + instrument.TimeSyncPath
	timeSync := func(clock instrument.Clock) *instrument.TimeSync {
		ts := instrument.NewTimeSync(syncURL, clock, nil, 8)
		a.wg.Add(1)
		go func() { defer a.wg.Done(); ts.Run(ctx, time.Second) }()
		return ts
	}
	pclock := instrument.OffsetClock(time.Now, producerSkew)
	pc := testenv.SaramaConfig(t)
	pc.Producer.Interceptors = []sarama.ProducerInterceptor{instrument.NewProducerInterceptor(instrument.ProducerConfig{
		Host: "orders-1", Clock: pclock, Offsets: timeSync(pclock), TracerProvider: appProvider(t, "orders-producer", jg, true)})}
	var err error
	if a.prod, err = sarama.NewSyncProducer(r.brokers, pc); err != nil {
		t.Fatal(err)
	}

	cclock := instrument.OffsetClock(time.Now, consumerSkew)
	ec := testenv.SaramaConfig(t)
	ec.Producer.Idempotent, ec.Net.MaxOpenRequests, ec.Producer.RequiredAcks = true, 1, sarama.WaitForAll
	ap, err := sarama.NewAsyncProducer(r.brokers, ec)
	if err != nil {
		t.Fatal(err)
	}
	a.em = instrument.NewEmitter(ap, instrument.EmitterConfig{Topic: r.receipts, Linger: 20 * time.Millisecond})
	rc, err := instrument.NewConsumer(instrument.ConsumerConfig{Group: r.group, Host: "billing-1", Clock: cclock,
		Offsets: timeSync(cclock), TracerProvider: appProvider(t, "billing-consumer", jg, false)}, a.em)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := sarama.NewConsumer(r.brokers, testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	pcons, err := cons.ConsumePartition(r.topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer cons.Close()
		defer pcons.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-pcons.Messages():
				rc.Receive(m)
				time.Sleep(3 * time.Millisecond) // the processing
				rc.Done(m)
			}
		}
	}()
	return a
}

// send produces one record and remembers its true produce window and trace id.
func (a *app) send() sent {
	a.t.Helper()
	msg := &sarama.ProducerMessage{Topic: a.r.topic, Value: sarama.StringEncoder(`{"order":1}`)}
	from := time.Now()
	_, off, err := a.prod.SendMessage(msg)
	to := time.Now()
	if err != nil {
		a.t.Fatal(err)
	}
	var tp string
	for _, h := range msg.Headers {
		if string(h.Key) == instrument.HeaderTraceParent {
			tp = string(h.Value)
		}
	}
	tid, _, err := instrument.TraceParent([]byte(tp))
	if err != nil {
		a.t.Fatalf("sent record has no traceparent: %v", err)
	}
	s := sent{offset: off, traceID: fmt.Sprintf("%x", tid), from: from, to: to}
	a.mu.Lock()
	a.sent = append(a.sent, s)
	a.mu.Unlock()
	return s
}

func (a *app) stop() {
	if a.cancel == nil {
		return
	}
	a.cancel()
	a.cancel = nil
	a.wg.Wait()
	a.em.Close()
	_ = a.prod.Close()
}

// spanNamed returns the trace's span with the given operation name, or nil.
func spanNamed(tr *testenv.JaegerTrace, name string) *testenv.JaegerSpan {
	for i := range tr.Spans {
		if tr.Spans[i].OperationName == name {
			return &tr.Spans[i]
		}
	}
	return nil
}

func tagFloat(s *testenv.JaegerSpan, key string) float64 {
	switch v := s.Tag(key).(type) {
	case float64:
		return v
	case string:
		f, _ := strconv.ParseFloat(v, 64)
		return f
	}
	return math.NaN()
}

// TestTraceOfASkewedRecord: one record's trace in Jaeger holds the producer's send span (on its clock, 2.5 s ahead),
// Tidemark's ingest and queue-wait spans on the reference clock, within their stated uncertainty of the truth and
// never negative, and the consumer's process span, all under the trace id ClickHouse stores for that offset.
func TestTraceOfASkewedRecord(t *testing.T) {
	jg := testenv.Jaeger(t)
	r := startTracedRun(t, "grpc", jg.OTLPGRPC, "")
	a := startApp(t, r, jg)
	send, ingest, queue, process := "send "+r.topic, "ingest "+r.topic, "queue wait "+r.topic, "process "+r.topic

	// Records go out every 200 ms until one is fully traced: its row's ingest and queue-wait stages are trusted (the
	// clock offsets have settled, 5 s into the 20 s window) and Jaeger holds all four spans. A condition, not a sleep.
	var got sent
	var tr testenv.JaegerTrace
	complete := func(tr *testenv.JaegerTrace) bool {
		return spanNamed(tr, send) != nil && spanNamed(tr, ingest) != nil && spanNamed(tr, queue) != nil && spanNamed(tr, process) != nil
	}
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for got.traceID == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no record fully traced within 2 minutes (%d sent)", len(a.sent))
		}
		<-tick.C
		a.send()
		// The newest rows whose ingest (bit 1) and queue wait (bit 2) are trusted.
		rows, err := r.conn.Query(t.Context(), `SELECT offset, trace_id FROM latency_events FINAL
			WHERE topic = ? AND consumer_group = ? AND source = 'receipt' AND bitAnd(valid, 3) = 3
			ORDER BY offset DESC LIMIT 3`, r.topic, r.group)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() && got.traceID == "" {
			var off int64
			var tid string
			if err := rows.Scan(&off, &tid); err != nil {
				t.Fatal(err)
			}
			s := a.sent[off] // one partition, produced only here: offset i is the i-th record sent
			if tid != s.traceID || s.offset != off {
				t.Fatalf("offset %d: ClickHouse has trace id %s, the record carried %s", off, tid, s.traceID)
			}
			var found bool
			if tr, found, err = testenv.FetchTrace(t.Context(), jg.Query, tid); err != nil {
				t.Fatal(err)
			}
			if found && complete(&tr) {
				got = s
			}
		}
		rows.Close()
	}
	t.Logf("trace %s of offset %d: %d spans", got.traceID, got.offset, len(tr.Spans))
	sp, in, qw, pr := spanNamed(&tr, send), spanNamed(&tr, ingest), spanNamed(&tr, queue), spanNamed(&tr, process)
	services := map[string]string{}
	for _, s := range []*testenv.JaegerSpan{sp, in, qw, pr} {
		if s.TraceID != got.traceID {
			t.Errorf("span %q in trace %s", s.OperationName, s.TraceID)
		}
		services[s.OperationName] = tr.Processes[s.ProcessID].ServiceName
		if s.Duration < 0 {
			t.Errorf("span %q has a negative duration", s.OperationName)
		}
	}
	if services[send] != "orders-producer" || services[ingest] != "tidemark" || services[queue] != "tidemark" || services[process] != "billing-consumer" {
		t.Errorf("services %v", services)
	}
	// Tidemark's spans are children of the producer's send span. The consumer's process span is its child and links
	// to it (the conventions' creation-context link); Jaeger keeps one reference per span and shows FOLLOWS_FROM.
	for _, s := range []*testenv.JaegerSpan{in, qw} {
		if s.ChildOf() != sp.SpanID {
			t.Errorf("%q is a child of %q, want the send span %s", s.OperationName, s.ChildOf(), sp.SpanID)
		}
	}
	if pr.ChildOf() != sp.SpanID && pr.FollowsFrom() != sp.SpanID {
		t.Errorf("process span refers to %+v, want the send span %s", pr.References, sp.SpanID)
	}
	// The send span is on the producer's clock, 2.5 s ahead of the truth; Tidemark's ingest span starts at the
	// corrected produce time, within its stated uncertainty of the true window the interceptor ran in.
	// Both are two-sided (finite), and below half the smallest injected skew (300 ms) so that the skew checks below
	// still tell the clocks apart; how wide they are follows the probe round trips, i.e. the machine's load.
	uIn, uQw := tagFloat(in, "tidemark.uncertainty_ms"), tagFloat(qw, "tidemark.uncertainty_ms")
	if !(uIn >= 0 && uIn < 150) || !(uQw >= 0 && uQw < 150) {
		t.Fatalf("uncertainties %v, %v ms", uIn, uQw)
	}
	msDur := func(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
	// Jaeger keeps microseconds: one more on each side.
	slack := msDur(uIn) + 2*time.Microsecond
	if in.Start().Before(got.from.Add(-slack)) || in.Start().After(got.to.Add(slack)) {
		t.Errorf("ingest starts at %v, the true produce lies in [%v, %v] (± %v)", in.Start(), got.from, got.to, slack)
	}
	if d := sp.Start().Sub(in.Start()) - producerSkew; d.Abs() > got.to.Sub(got.from)+slack {
		t.Errorf("send span (producer clock) − ingest start (reference) = skew %+v off 2.5 s", d)
	}
	// Ingest ends where queue wait starts (the corrected append); the append happened before the producer's ack.
	if d := in.End().Sub(qw.Start()); d.Abs() > time.Microsecond { // start and duration are each rounded to µs
		t.Errorf("ingest ends %v, queue wait starts %v", in.End(), qw.Start())
	}
	if in.End().After(got.to.Add(slack)) {
		t.Errorf("corrected append %v after the producer's ack %v (± %v)", in.End(), got.to, slack)
	}
	// Queue wait ends at the corrected receive: the consumer's process span starts there on a clock 300 ms behind.
	if d := qw.End().Sub(pr.Start().Add(-consumerSkew)); d.Abs() > msDur(uQw)+2*time.Microsecond {
		t.Errorf("queue wait ends %v, the consumer's receive corrected by its true skew is %v (Δ %v, ± %v ms)",
			qw.End(), pr.Start().Add(-consumerSkew), d, uQw)
	}
	for _, s := range []*testenv.JaegerSpan{in, qw} {
		if s.Tag("tidemark.replay_class") != "live" || s.Tag("messaging.system") != "kafka" ||
			s.Tag("messaging.destination.name") != r.topic || tagFloat(s, "messaging.kafka.offset") != float64(got.offset) {
			t.Errorf("%q tags %+v", s.OperationName, s.Tags)
		}
	}
	if qw.Tag("messaging.consumer.group.name") != r.group || pr.Tag("messaging.consumer.group.name") != r.group {
		t.Errorf("group tags: queue wait %v, process %v", qw.Tag("messaging.consumer.group.name"), pr.Tag("messaging.consumer.group.name"))
	}
	// Kinds, per the messaging conventions: send is a producer span, process a consumer span.
	if sp.Tag("span.kind") != "producer" || pr.Tag("span.kind") != "consumer" {
		t.Errorf("kinds: send %v, process %v", sp.Tag("span.kind"), pr.Tag("span.kind"))
	}
}

// TestTraceBackendOutage: Jaeger stopped mid-run costs spans, counted, and nothing else: every receipt still
// becomes a row, /readyz stays ready, and every hop span Tidemark made is accounted for as exported, dropped or
// failed. The second half runs with no backend at all.
func TestTraceBackendOutage(t *testing.T) {
	jg := testenv.Jaeger(t) // the application's spans go to the stack's Jaeger; Tidemark's to a private one
	priv := testenv.PrivateJaeger(t)
	r := startTracedRun(t, "http", priv.OTLPHTTP, ", queue_size: 64, batch_size: 16")
	a := startApp(t, r, jg)
	const outage = 150
	rows := func() uint64 {
		var n uint64
		if err := r.conn.QueryRow(t.Context(), `SELECT count() FROM latency_events FINAL WHERE topic = ? AND source = 'receipt'`,
			r.topic).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// traceMetrics is the trace-related part of /metrics, for a failure message.
	traceMetrics := func() string {
		_, body := get("http://" + r.addr + "/metrics")
		var ours []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "tidemark_traces_") || strings.HasPrefix(l, "tidemark_collector_hop_spans") ||
				strings.HasPrefix(l, "tidemark_collector_trace_decisions") {
				ours = append(ours, l)
			}
		}
		return strings.Join(ours, "\n")
	}
	deadline := time.Now().Add(3 * time.Minute) // a hang guard for the whole test, never the thing tested
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; trace metrics:\n%s", what, traceMetrics())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Before the outage: records until Tidemark's spans reach the private Jaeger. A record sent before the clocks
	// are placed (the producer is 2.5 s ahead) rests on a skew-suspected pair and gets no span, by design, so a
	// burst at start may have none: keep sending, one per check, until an export succeeded.
	waitUntil("spans exported to the private Jaeger", func() bool {
		a.send()
		return r.metric("tidemark_traces_spans_total", "outcome", "exported") > 0
	})
	before := uint64(len(a.sent))
	waitUntil("the rows of the records sent before the outage", func() bool { return rows() == before })
	priv.Stop()
	for i := 0; i < outage; i++ {
		a.send()
		if i%50 == 0 {
			if code, body := get("http://" + r.addr + "/readyz"); code != http.StatusOK {
				t.Fatalf("/readyz %d %q with the trace backend down", code, body)
			}
		}
	}
	waitUntil("every row with the trace backend down", func() bool { return rows() == before+outage })
	// Conservation: every hop span made is exported, dropped (queue full) or failed (export error), once the queue
	// has drained; the outage's spans (its records come after the clocks were placed) cannot have been exported.
	var made, exported, lost float64
	waitUntil("the export queue to drain into outcomes", func() bool {
		made = r.metric("tidemark_collector_hop_spans_total", "outcome", "emitted")
		exported = r.metric("tidemark_traces_spans_total", "outcome", "exported")
		lost = r.metric("tidemark_traces_spans_total", "outcome", "dropped") + r.metric("tidemark_traces_spans_total", "outcome", "failed")
		return r.metric("tidemark_traces_queued_spans") == 0 && made > 0 && exported+lost == made && lost > 0
	})
	t.Logf("%d records before the outage, %d during; hop spans made %v: exported %v, dropped or failed %v",
		before, outage, made, exported, lost)
	if code, _ := get("http://" + r.addr + "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz %d after the outage", code)
	}
}
