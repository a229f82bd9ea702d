package main

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/latency/instrument"
)

// malformedSpans is an OTLP ExportTraceServiceRequest of n Kafka process spans that name no consumer group: Kafka
// messaging spans the spans path cannot turn into stamps (collector.spans.consumer_groups is not set).
func malformedSpans(t *testing.T, n int) []byte {
	t.Helper()
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("host.name", "flood")
	ss := rs.ScopeSpans().AppendEmpty().Spans()
	now := time.Now()
	for i := range n {
		sp := ss.AppendEmpty()
		sp.SetKind(ptrace.SpanKindConsumer)
		sp.SetName("orders process")
		sp.SetTraceID(pcommon.TraceID{1, byte(i >> 8), byte(i)})
		sp.SetSpanID(pcommon.SpanID{2, byte(i >> 8), byte(i)})
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(now))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Millisecond)))
		a := sp.Attributes()
		a.PutStr("messaging.system", "kafka")
		a.PutStr("messaging.operation", "process")
		a.PutStr("messaging.destination.name", "orders")
		a.PutStr("messaging.destination.partition.id", "0")
		a.PutInt("messaging.kafka.message.offset", int64(i))
	}
	b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// goMemory is the memory the Go runtime holds from the OS and has not released: what memory_limit_mb's soft limit
// (runtime/debug.SetMemoryLimit) governs.
func goMemory() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64() - s[1].Value.Uint64()
}

// TestSpanFloodLeavesReceiptsAndMemoryBounded, on the real servers: while 3,000 receipts flow, 100,000 malformed
// Kafka spans (100 OTLP/HTTP requests of 1,000 consumer spans without a consumer group) reach `tidemark run`'s own
// OTLP receiver with memory_limit_mb 200. Every malformed span is counted and its spans-topic record (one per trace) dead-lettered, every
// receipt is stored, /readyz stays ready, and the Go runtime's memory, sampled through the flood, stays under the
// limit (the test process holds the daemon; the samples can miss a peak, never invent one).
func TestSpanFloodLeavesReceiptsAndMemoryBounded(t *testing.T) {
	brokers := testenv.Kafka(t)
	db, conn := testenv.ClickHouseDB(t)
	receipts := testenv.CreateTopic(t, "rc", testenv.Topic{Partitions: 3})
	otlp := testenv.FreeAddr(t)
	dlq := testenv.Name(t, "dlq")
	const limitMB = 200
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) }) // run sets the process's limit from memory_limit_mb
	d := startRun(t, fmt.Sprintf(`kafka: {brokers: [%s]}
memory_limit_mb: %d
clickhouse:
  addr: [%s]
  database: %s
  writer: {flush_interval: 100ms}
collector:
  dead_letter_topic: %s
  replay_state_topic: %s
  receipts: {enabled: true, topic: %s, group: %s, partitions: 3}
  spans: {enabled: true, topic: %s, group: %s, partitions: 3, otlp_http_listen: %q}
lag: {enabled: false}
`, strings.Join(brokers, ", "), limitMB, testenv.ClickHouseAddr(t), db, dlq, testenv.Name(t, "rs"), receipts,
		testenv.Name(t, "g"), testenv.Name(t, "sp"), testenv.Name(t, "spg"), otlp))
	waitStatus(t, d.base+"/readyz", http.StatusOK, time.Minute)

	var peak atomic.Uint64
	peak.Store(goMemory())
	stopSampling := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				if m := goMemory(); m > peak.Load() {
					peak.Store(m)
				}
			}
		}
	}()

	const requests, perRequest, nReceipts = 100, 1000, 3000
	at := time.Now()
	body := malformedSpans(t, perRequest)
	posted := make(chan error, 1)
	go func() { // the spans flood while the receipts flow
		for i := range requests {
			resp, err := http.Post("http://"+otlp+"/v1/traces", "application/x-protobuf", bytes.NewReader(body))
			if err != nil {
				posted <- fmt.Errorf("request %d: %w", i, err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				posted <- fmt.Errorf("request %d: %s", i, resp.Status)
				return
			}
		}
		posted <- nil
	}()
	produceReceipts(t, receipts, nReceipts, 10, 3, func(i int) instrument.Receipt {
		return instrument.Receipt{Group: "app", Topic: "orders", Partition: int32(i % 3), Offset: int64(i / 3),
			ProduceNs: at.UnixNano(), ProduceHost: "c1", ProcessedNs: at.Add(20 * time.Millisecond).UnixNano(), Host: "c1"}
	})
	if err := <-posted; err != nil {
		t.Fatal(err)
	}

	if got := waitRows(t, conn, "SELECT count() FROM latency_events FINAL", nReceipts, time.Minute); got != nReceipts {
		t.Fatalf("%d rows stored, want every one of the %d receipts", got, nReceipts)
	}
	malformed := `tidemark_collector_spans_total{cluster="default",outcome="malformed"}`
	dead := `tidemark_collector_dead_letters_total{cluster="default",path="spans",reason="malformed_span"}`
	testenv.Eventually(t, time.Minute, func() error {
		m := d.scrape(t)
		// The receiver writes one spans-topic record per trace, and each flood span has a trace of its own.
		if v, w := seriesValue(m, malformed), seriesValue(m, dead); v != requests*perRequest || w != requests*perRequest {
			return fmt.Errorf("%v malformed spans counted, %v spans-topic records dead-lettered; want %d of each", v, w,
				requests*perRequest)
		}
		return nil
	})
	close(stopSampling)
	sampled.Wait()
	if code, body := get(d.base + "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after the flood: %d %s", code, body)
	}
	t.Logf("Go runtime memory peak %.1f MB during 100,000 malformed spans and %d receipts (limit %d MB)",
		float64(peak.Load())/(1<<20), nReceipts, limitMB)
	if peak.Load() > limitMB<<20 {
		t.Fatalf("Go runtime memory peaked at %.1f MB, over memory_limit_mb %d", float64(peak.Load())/(1<<20), limitMB)
	}
}

// seriesValue is the value of the series line whose name and labels are exactly series, -1 when absent.
func seriesValue(body, series string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}
