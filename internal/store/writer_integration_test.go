package store

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
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

// TestWriterStreamsBatchInBlocks sends one batch of several Writes, larger than insertBlockRows twice over and with
// a duplicate in the middle of a Write, through the real inserter: its rows go to ClickHouse in data blocks of one
// INSERT, which must store every admitted row once, as one part, and leave the Writes' own rows (kept by the
// writer, not copied) as they were.
func TestWriterStreamsBatchInBlocks(t *testing.T) {
	const total = 2*insertBlockRows + 4100
	// No flush ticker: the three Writes must make one batch (taken by the Flush below), however slowly they come.
	s, conn := migratedStore(t, func(c *Config) {
		c.Writer = WriterConfig{BatchRows: total, MaxRows: total, FlushInterval: time.Hour}
	})
	ctx := testCtx(t)
	w := newTestWriter(t, s, nil, nil)
	row := func(off int64) LatencyRow {
		r := fullLatencyRow()
		r.Offset, r.Class = off, ClassLive
		r.E2EMs = off % 1000
		r.ProducerHost = fmt.Sprintf("p%d", off%3)
		r.TraceID = fmt.Sprintf("%032x", off)
		return r
	}
	var writes [][]LatencyRow
	off := int64(0)
	for _, n := range []int{7000, insertBlockRows + 1, total - 7000 - insertBlockRows - 1} {
		rs := make([]LatencyRow, n)
		for i := range rs {
			rs[i] = row(off)
			off++
		}
		writes = append(writes, rs)
	}
	writes[1][100] = row(5) // repeats a row of the first Write: dropped, the rest of its Write kept
	var before [][]LatencyRow
	acks := make(chan error, len(writes))
	for _, rs := range writes {
		before = append(before, slices.Clone(rs))
		if err := w.Write(ctx, Rows{Latency: rs}, func(err error) { acks <- err }); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for range writes {
		if err := <-acks; err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if n := testutil.ToFloat64(w.m.batches.WithLabelValues(TableLatency)); n != 1 {
		t.Fatalf("%v inserts into latency_events, want 1", n)
	}
	for i := range writes {
		if !slices.Equal(writes[i], before[i]) {
			t.Fatalf("Write %d's rows were modified by the writer", i)
		}
	}
	rs, err := conn.Query(ctx, "SELECT offset, e2e_ms, producer_host, trace_id FROM latency_events ORDER BY offset")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var got []int64
	for rs.Next() {
		var o, e2e int64
		var host, trace string
		if err := rs.Scan(&o, &e2e, &host, &trace); err != nil {
			t.Fatal(err)
		}
		if want := row(o); e2e != want.E2EMs || host != want.ProducerHost || trace != want.TraceID {
			t.Fatalf("offset %d read back as e2e %d host %s trace %s, want %+v", o, e2e, host, trace, want)
		}
		got = append(got, o)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	var want []int64
	for o := int64(0); o < total; o++ {
		if o != 7000+100 { // the dropped row's own offset was never written
			want = append(want, o)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%d rows read back (first %v), want offsets 0..%d without 7100, each once", len(got), got[:min(5, len(got))], total-1)
	}
	var parts uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.parts WHERE database = currentDatabase() AND "+
		"table = 'latency_events'").Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts != 1 {
		t.Fatalf("the batch's INSERT made %d parts in latency_events, want 1 (its blocks squashed by the server)", parts)
	}
}
