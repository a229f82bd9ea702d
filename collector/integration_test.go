package collector

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/latency/instrument"
)

// TestEndToEndReceiptsAndProbes runs the receipts and probe paths on the real servers: an instrumented producer 2.5 s
// ahead and a consumer 800 ms behind process 300 records; every processing lands in ClickHouse once, corrected stages
// are never negative, a garbage receipt goes to the dead-letter topic, and probes measure every broker.
func TestEndToEndReceiptsAndProbes(t *testing.T) {
	e := newEnv(t)
	// From the beginning: the tap's group may join after the application produced.
	e.cfg.Tap = TapConfig{Enabled: true, Topics: []string{e.source}, Group: testenv.Name(t, "tap"), FromBeginning: true}
	r := e.start(nil, nil)
	t.Cleanup(func() { r.stop(t) })
	const n = 300
	e.app(n, 2500*time.Millisecond, -800*time.Millisecond, time.Millisecond)
	e.produceRaw(e.cfg.Receipts.Topic, []byte("not a receipt"), []byte{1, 1})
	// A record of the application's topic whose produce-time header is garbage: the tap dead-letters a copy.
	e.produceWithHeader(e.source, instrument.HeaderProduceTime, []byte{1, 9, 9})

	q := "SELECT count() FROM latency_events FINAL WHERE topic = ? AND source = 'receipt'"
	if got := e.waitCount(n, 60*time.Second, q, e.source); got != n {
		t.Fatalf("%d rows in ClickHouse, want %d", got, n)
	}
	if got := waitFor(3, 30*time.Second, func() int64 { return e.topicEnd(e.cfg.DeadLetterTopic) }); got != 3 {
		t.Fatalf("dead-letter topic holds %d records, want 3 (two receipts, one header)", got)
	}
	if got := testutil.ToFloat64(r.metrics.DeadLetters.WithLabelValues(PathTap, "malformed")); got != 1 {
		t.Fatalf("tap dead-letter counter %v, want 1", got)
	}
	// The tap saw every record of the topic (the garbage one too, without its produce stamp), with trace ids.
	tapQ := "SELECT count() FROM latency_events FINAL WHERE topic = ? AND source = 'tap'"
	if got := e.waitCount(n+1, 30*time.Second, tapQ, e.source); got != n+1 {
		t.Fatalf("%d tap rows, want %d", got, n+1)
	}
	if got := testutil.ToFloat64(r.metrics.DeadLetters.WithLabelValues(PathReceipts, "malformed")) +
		testutil.ToFloat64(r.metrics.DeadLetters.WithLabelValues(PathReceipts, "unsupported_version")); got != 2 {
		t.Fatalf("dead-letter counter %v, want 2", got)
	}
	// Naive ingest is about −2.5 s on every row (the producer clock is ahead); corrected stages are never negative.
	if neg := e.count("SELECT count() FROM latency_events FINAL WHERE topic = ? AND source = 'receipt' AND (ingest_ms < 0 OR queue_ms < 0 OR process_ms < 0 OR e2e_ms < 0)", e.source); neg != 0 {
		t.Fatalf("%d rows with a negative corrected stage", neg)
	}
	if naive := e.count("SELECT count() FROM latency_events FINAL WHERE topic = ? AND source = 'receipt' AND ingest_naive_ms < -2000", e.source); naive != n {
		t.Fatalf("%d rows with the producer's skew visible in the naive ingest, want %d", naive, n)
	}
	if tr := e.count("SELECT count() FROM latency_events FINAL WHERE topic = ? AND source = 'receipt' AND length(trace_id) = 32", e.source); tr != n {
		t.Fatalf("%d rows with a trace id, want %d", tr, n)
	}
	var ingN, ingC, e2eN, e2eC, procC []float64
	var valid, flagsAny uint64
	ctx := t.Context()
	if err := e.conn.QueryRow(ctx, `SELECT quantiles(0.5, 0.99)(ingest_naive_ms), quantiles(0.5, 0.99)(ingest_ms),
		quantiles(0.5, 0.99)(e2e_naive_ms), quantiles(0.5, 0.99)(e2e_ms), quantiles(0.5, 0.99)(process_ms),
		countIf(bitAnd(valid, 8) != 0), toUInt64(groupBitOr(flags))
		FROM latency_events FINAL WHERE topic = ? AND source = 'receipt'`, e.source).
		Scan(&ingN, &ingC, &e2eN, &e2eC, &procC, &valid, &flagsAny); err != nil {
		t.Fatal(err)
	}
	t.Logf("ingest p50/p99 naive %v corrected %v; e2e naive %v corrected %v; process %v; e2e valid %d; flags %b",
		ingN, ingC, e2eN, e2eC, procC, valid, flagsAny)
	// Every broker leads a probe partition and answers probes.
	brokers := uint64(len(e.brokers))
	if got := e.waitCount(brokers, 30*time.Second, "SELECT uniqExact(broker_id) FROM probe_events WHERE topic = ? AND status = 'ok'", e.cfg.Probe.Topic); got != brokers {
		t.Fatalf("probes answered by %d brokers, want %d", got, brokers)
	}
}
