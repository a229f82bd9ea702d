package store

import (
	"context"
	"testing"
	"time"
)

// BenchmarkWriterVsRawInsert measures, in one run on the same rows and server, the Writer's end-to-end rate (Write,
// dedup window, batching, columnar append, acks) against a plain clickhouse-go insert of the same latency rows
// (PrepareBatch with the column list and one Append per row, in batches of the same size). It reports both rates
// and their ratio; each iteration uses a fresh database.
//
//	TIDEMARK_CLICKHOUSE_ADDR=127.0.0.1:19000 go test ./internal/store -run '^$' -bench WriterVsRaw -benchtime 3x
func BenchmarkWriterVsRawInsert(b *testing.B) {
	const total, batchRows = 400_000, 50_000
	rows := make([]LatencyRow, total)
	for i := range rows {
		r := fullLatencyRow()
		r.Class, r.Offset, r.Partition = ClassLive, int64(i), int32(i%12)
		r.AppendMs += int64(i)
		r.ObservedMs += int64(i)
		r.Valid = ValidIngest | ValidQueue | ValidProcess | ValidE2E
		rows[i] = r
	}
	var rawSum, writerSum float64
	for range b.N {
		raw, writer := benchOnce(b, rows, batchRows)
		rawSum, writerSum = rawSum+raw, writerSum+writer
	}
	b.ReportMetric(rawSum/float64(b.N), "raw_rows/s")
	b.ReportMetric(writerSum/float64(b.N), "writer_rows/s")
	b.ReportMetric(writerSum/rawSum, "writer/raw")
}

func benchOnce(b *testing.B, rows []LatencyRow, batchRows int) (rawRate, writerRate float64) {
	ctx := context.Background()
	s, _ := migratedStore(b, func(c *Config) {
		c.Writer = WriterConfig{BatchRows: batchRows, MaxRows: 4 * batchRows, MaxBytes: 256 << 20}
	})

	// Raw: what a caller of clickhouse-go would write by hand.
	start := time.Now()
	for i := 0; i < len(rows); i += batchRows {
		batch, err := s.conn.PrepareBatch(ctx, insertSQL(latencyBatch(nil)))
		if err != nil {
			b.Fatal(err)
		}
		for j := i; j < min(i+batchRows, len(rows)); j++ {
			r := &rows[j]
			if err := batch.Append(r.RecordTime(), r.ObservedTime(), r.Group, r.Topic, r.Partition, r.Offset,
				int8(r.Class), int8(r.Source), r.EventMs, r.AppendMs, r.ReceiveMs, r.ProcessedMs, r.IngestNaiveMs,
				r.QueueNaiveMs, r.ProcessNaiveMs, r.E2ENaiveMs, r.IngestMs, r.QueueMs, r.ProcessMs, r.E2EMs,
				r.UncertaintyMs, uint8(r.Valid), r.Flags, r.ProducerHost, r.BrokerHost, r.ConsumerHost, r.TraceID,
				r.SpanID, uint64(1)); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Send(); err != nil {
			b.Fatal(err)
		}
	}
	rawRate = float64(len(rows)) / time.Since(start).Seconds()

	// Writer: the same rows, 1000 per Write as a consumer loop would hand them over, acks counted.
	w, err := NewWriter(s, WriterOptions{})
	if err != nil {
		b.Fatal(err)
	}
	acked := make(chan struct{}, len(rows)/1000+1)
	start = time.Now()
	for i := 0; i < len(rows); i += 1000 {
		// A different group: the raw pass's rows must not collapse with these.
		chunk := Rows{Latency: make([]LatencyRow, 0, 1000)}
		for j := i; j < min(i+1000, len(rows)); j++ {
			r := rows[j]
			r.Group = "bench-writer"
			chunk.Latency = append(chunk.Latency, r)
		}
		if err := w.Write(ctx, chunk, func(err error) {
			if err != nil {
				b.Error(err)
			}
			acked <- struct{}{}
		}); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		b.Fatal(err)
	}
	writerRate = float64(len(rows)) / time.Since(start).Seconds()
	if len(acked) != cap(acked)-1 {
		b.Fatalf("%d acks, want %d", len(acked), cap(acked)-1)
	}
	return rawRate, writerRate
}
