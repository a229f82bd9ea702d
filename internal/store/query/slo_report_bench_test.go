package query_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/store/query"
	"github.com/tidemark/tidemark/internal/store/query/querytest"
	"github.com/tidemark/tidemark/internal/testenv"
)

// BenchmarkSLOReport measures `tidemark slo report`'s query over benchRows raw rows spread over 30 days and 20 topic
// and group pairs, against a baseline in the same run: the cheapest query that still answers one window (a plain
// countIf/count per topic and group, without FINAL and without the other windows and exclusions). It reports
// rows_per_s of the report query and ratio = report time / baseline time, the price of exact, duplicate-free counts
// for every window.
//
//	go test -run '^$' -bench SLOReport -benchtime 5x ./internal/store/query/
func BenchmarkSLOReport(b *testing.B) {
	const benchRows = 1_000_000
	db, conn := testenv.ClickHouseDB(b)
	querytest.Schema(b, db)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	period := 30 * 24 * time.Hour
	for start := 0; start < benchRows; start += 200_000 {
		batch, err := conn.PrepareBatch(ctx, "INSERT INTO latency_events (record_time, observed_time, consumer_group, topic, "+
			"partition, offset, replay_class, source, e2e_ms, valid, flags, ver)")
		if err != nil {
			b.Fatal(err)
		}
		for i := start; i < start+200_000 && i < benchRows; i++ {
			at := sloEnd.Add(-time.Duration(int64(period) / benchRows * int64(i+1)))
			class := "live"
			if i%50 == 0 {
				class = "replay"
			}
			if err := batch.Append(at, at, "group-"+string(rune('a'+i%4)), "topic-"+string(rune('a'+i%5)), int32(i%12),
				int64(i), class, "receipt", int64(i%1000), uint8(15|15<<4), uint32(0), uint64(1)); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Send(); err != nil {
			b.Fatal(err)
		}
	}
	r := query.NewReader(conn)
	q := query.SLOReportQuery{End: sloEnd, Period: period, Windows: sloWindows, ThresholdMs: 500}
	baseline := "SELECT topic, consumer_group, countIf(e2e_ms <= 500), count() FROM latency_events " +
		"WHERE observed_time >= toDateTime(?) AND observed_time < toDateTime(?) GROUP BY topic, consumer_group"
	var reportTime, baseTime time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		rows, err := r.SLOReport(ctx, q)
		if err != nil || len(rows) != 20 {
			b.Fatalf("report: %d rows, %v", len(rows), err)
		}
		t1 := time.Now()
		res, err := conn.Query(ctx, baseline, sloEnd.Add(-period).Unix(), sloEnd.Unix())
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for res.Next() {
			n++
		}
		res.Close()
		if n != 20 {
			b.Fatalf("baseline: %d rows", n)
		}
		reportTime += t1.Sub(t0)
		baseTime += time.Since(t1)
	}
	b.ReportMetric(float64(benchRows)*float64(b.N)/reportTime.Seconds(), "rows_per_s")
	b.ReportMetric(reportTime.Seconds()/float64(b.N), "report_s")
	b.ReportMetric(reportTime.Seconds()/baseTime.Seconds(), "ratio")
}
