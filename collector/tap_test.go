package collector

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency/instrument"
)

func TestTapSamplingIsDeterministicAndProportional(t *testing.T) {
	tests := []struct {
		name   string
		rate   float64
		lo, hi int // accepted count of 20000 offsets: rate × 20000 ± 4σ (binomial)
	}{
		{"everything", 1, 20000, 20000},
		{"a quarter", 0.25, 4755, 5245}, // σ = √(20000·0.25·0.75) ≈ 61
		{"one percent", 0.01, 145, 255}, // σ ≈ 14
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTap(&pathDeps{}, "tap", tc.rate, "collector", nil)
			n := 0
			for off := int64(0); off < 20000; off++ {
				a := tp.sampled("orders", int32(off%3), off)
				// A re-read after a restart must make the same decision, or re-delivered rows would not collapse.
				if a != tp.sampled("orders", int32(off%3), off) {
					t.Fatalf("offset %d sampled differently on a second look", off)
				}
				if a {
					n++
				}
			}
			if n < tc.lo || n > tc.hi {
				t.Fatalf("sampled %d of 20000 at rate %v, want %d..%d", n, tc.rate, tc.lo, tc.hi)
			}
		})
	}
}

// TestTapTraceParent: a malformed traceparent header is counted and the record kept without trace context; a valid
// one gives the row its trace and span ids; a missing one is neither counted nor an error.
func TestTapTraceParent(t *testing.T) {
	deps, sink, _ := newTestDeps(t, time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	tp := newTap(deps, "tap", 1, "collector", nil)
	hdr := func(v string) []kafka.Header {
		return []kafka.Header{{Key: []byte(instrument.HeaderTraceParent), Value: []byte(v)}}
	}
	at := time.Date(2026, 11, 29, 11, 59, 59, 0, time.UTC)
	recs := []kafka.Record{
		{Topic: "orders", Offset: 0, Timestamp: at, Headers: hdr("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		{Topic: "orders", Offset: 1, Timestamp: at, Headers: hdr("00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01")}, // not hex
		{Topic: "orders", Offset: 2, Timestamp: at, Headers: hdr("00-00000000000000000000000000000000-00f067aa0ba902b7-01")}, // zero trace id
		{Topic: "orders", Offset: 3, Timestamp: at}, // no header
	}
	if err := tp.HandleBatch(context.Background(), kafka.Batch{Topic: "orders", Records: recs}, func(int64) {}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(deps.metrics.BadTraceParent.WithLabelValues(PathTap)); got != 2 {
		t.Errorf("bad traceparent count %v, want 2", got)
	}
	rows := sink.rows[0].Latency
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4 (malformed headers keep their records)", len(rows))
	}
	if rows[0].TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || rows[0].SpanID != "00f067aa0ba902b7" {
		t.Errorf("valid header: trace %q span %q", rows[0].TraceID, rows[0].SpanID)
	}
	for _, r := range rows[1:] {
		if r.TraceID != "" || r.SpanID != "" {
			t.Errorf("offset %d: trace %q span %q, want none", r.Offset, r.TraceID, r.SpanID)
		}
	}
}

// TestTapBatchOverFakes drives the tap's batch handling through fakes (sink, dead-letter topic, metadata: a
// LogAppendTime topic whose appends broker 1 stamped). Record 0 carries a valid produce-time header, record 1 a
// header that does not decode, record 2 none. The bad header is dead-lettered, yet its record keeps its row (the
// append stamp is still the broker's): three rows, one dead letter. The offsets are marked only once the sink
// acknowledged the rows.
func TestTapBatchOverFakes(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	deps, sink, dlq := newTestDeps(t, now)
	tp := newTap(deps, "tap", 1, "collector", nil)
	produced := now.Add(-30 * time.Millisecond)
	good, err := instrument.ProduceHeader{Time: produced, Host: "app-1"}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(v []byte) []kafka.Header {
		return []kafka.Header{{Key: []byte(instrument.HeaderProduceTime), Value: v}}
	}
	appended := now.Add(-20 * time.Millisecond)
	recs := []kafka.Record{
		{Topic: "orders", Partition: 2, Offset: 40, Timestamp: appended, Headers: hdr(good)},
		{Topic: "orders", Partition: 2, Offset: 41, Timestamp: appended, Headers: hdr([]byte{1, 2})},
		{Topic: "orders", Partition: 2, Offset: 42, Timestamp: appended},
	}
	var marks []int64
	b := kafka.Batch{Topic: "orders", Partition: 2, Records: recs}
	if err := tp.HandleBatch(context.Background(), b, func(n int64) { marks = append(marks, n) }); err != nil {
		t.Fatal(err)
	}
	if len(dlq.recs) != 1 || dlq.recs[0].Offset != 41 || !errors.Is(dlq.reasons[0], instrument.ErrMalformed) {
		t.Fatalf("dead letters %+v %v, want offset 41 (malformed header)", dlq.recs, dlq.reasons)
	}
	if len(sink.rows) != 1 || len(sink.rows[0].Latency) != 3 {
		t.Fatalf("writes %+v, want one write of 3 rows", sink.rows)
	}
	rows := sink.rows[0].Latency
	// Row 0: produce stamp from the header on app-1's clock, append stamp from broker 1, receive on the reference clock.
	if r := rows[0]; r.Offset != 40 || r.Source != store.SourceTap || r.Group != "tap" || r.ProducerHost != "app-1" ||
		r.BrokerHost != "broker-1" || r.EventMs != produced.UnixMilli() || r.AppendMs != appended.UnixMilli() ||
		r.ReceiveMs != now.UnixMilli() || r.IngestNaiveMs != 10 || r.Class != store.ClassLive {
		t.Errorf("row 0 %+v", r)
	}
	// Rows 1 and 2: no produce stamp (a bad header is no stamp), the broker's append stamp still stored.
	for _, r := range rows[1:] {
		if r.ProducerHost != "" || r.EventMs != 0 || r.AppendMs != appended.UnixMilli() || r.BrokerHost != "broker-1" {
			t.Errorf("row %d %+v, want no produce stamp, broker 1's append stamp", r.Offset, r)
		}
	}
	m := deps.metrics
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"records", testutil.ToFloat64(m.Records.WithLabelValues(PathTap)), 3},
		{"rows", testutil.ToFloat64(m.Rows.WithLabelValues(PathTap)), 3},
		{"dead letters", testutil.ToFloat64(m.DeadLetters.WithLabelValues(PathTap, "malformed")), 1},
		{"live", testutil.ToFloat64(m.Classes.WithLabelValues(PathTap, "live")), 3},
		{"acked before the ack", testutil.ToFloat64(m.RowsAcked.WithLabelValues(PathTap)), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if len(marks) != 0 {
		t.Fatalf("marked %v before the sink acknowledged", marks)
	}
	sink.acks[0](nil)
	if len(marks) != 1 || marks[0] != 43 {
		t.Fatalf("marks %v, want [43] after the ack", marks)
	}
	if got := testutil.ToFloat64(m.RowsAcked.WithLabelValues(PathTap)); got != 3 {
		t.Errorf("rows acked %v, want 3", got)
	}
}
