package store

import (
	"fmt"
	"testing"
)

// TestWriterManyBatchesReadBackExactly sends batches of shrinking and growing sizes through the real inserter, so
// the pipeline prepares one batch while another is sent and the reused row and column buffers are resliced both
// ways; every row must arrive once with its own values (a stale or shifted buffer would repeat or mix strings).
func TestWriterManyBatchesReadBackExactly(t *testing.T) {
	s, conn := migratedStore(t, func(c *Config) { c.Writer = WriterConfig{BatchRows: 64, MaxRows: 400} })
	ctx := testCtx(t)
	w := newTestWriter(t, s, nil, nil)
	row := func(off int64) LatencyRow {
		r := fullLatencyRow()
		r.Offset, r.Class = off, ClassLive
		r.AppendMs += off
		r.E2EMs = off % 1000
		r.ProducerHost = fmt.Sprintf("p%d", off%5)
		r.TraceID = fmt.Sprintf("%032x", off)
		return r
	}
	var off int64
	acks := make(chan error, 100)
	for _, n := range []int{300, 100, 250, 7, 1, 64, 129, 3} {
		rows := Rows{Latency: make([]LatencyRow, n)}
		for i := range rows.Latency {
			rows.Latency[i] = row(off)
			off++
		}
		if err := w.Write(ctx, rows, func(err error) { acks <- err }); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for range 8 {
		if err := <-acks; err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	rs, err := conn.Query(ctx, "SELECT offset, append_ts_ms, e2e_ms, producer_host, trace_id, toString(replay_class) "+
		"FROM latency_events ORDER BY offset")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var n int64
	for rs.Next() {
		var o, appendMs, e2e int64
		var host, trace, class string
		if err := rs.Scan(&o, &appendMs, &e2e, &host, &trace, &class); err != nil {
			t.Fatal(err)
		}
		want := row(n)
		if o != n || appendMs != want.AppendMs || e2e != want.E2EMs || host != want.ProducerHost ||
			trace != want.TraceID || class != "live" {
			t.Fatalf("row %d read back as offset %d append %d e2e %d host %s trace %s class %s, want %+v",
				n, o, appendMs, e2e, host, trace, class, want)
		}
		n++
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if n != off {
		t.Fatalf("%d rows read back, want %d", n, off)
	}
}
