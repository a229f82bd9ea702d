package collector

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/kafka"
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
