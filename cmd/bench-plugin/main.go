// Command bench-plugin measures what the plugin's rollups buy: it seeds at least 20 million raw latency rows spread
// over 7 days into a scratch ClickHouse database (server-side INSERT ... SELECT from numbers(), so the per-minute
// rollups fill through the real materialized view), then answers the same 7-day stage-percentile panel from raw rows
// and from the rollups through internal/store/query (the plugin's own read path), and checks the rollup answer
// against the raw rows: for every bucket and level, the rank of the rollup's value among the bucket's raw values
// must lie within RankErrorBound of the level.
//
// The last line printed is a JSON object: rows, raw_query_s, rollup_query_s, rollup_speedup, max_rank_error,
// rank_error_bound, within_error, and more. Run by `make bench-plugin`; it needs TIDEMARK_CLICKHOUSE_ADDR (`make up`).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/store/query"
)

// RankErrorBound is the error the comparison allows: ClickHouse documents quantileTDigest's error as at most 1%,
// which for a t-digest is an error in rank (the quantile level a returned value actually has).
const RankErrorBound = 0.01

type result struct {
	Rows           int64   `json:"rows"`
	RollupRows     uint64  `json:"rollup_rows"`
	SeedS          float64 `json:"seed_s"`
	Buckets        int     `json:"buckets"`
	StepS          int     `json:"step_s"`
	RawQueryS      float64 `json:"raw_query_s"`
	RollupQueryS   float64 `json:"rollup_query_s"`
	RollupSpeedup  float64 `json:"rollup_speedup"`
	MaxRankError   float64 `json:"max_rank_error"`
	RankErrorBound float64 `json:"rank_error_bound"`
	WithinError    bool    `json:"within_error"`
	MaxRelDiff     float64 `json:"max_rel_diff_raw_vs_rollup"`
	Runs           int     `json:"runs"`
}

func main() {
	addr := flag.String("addr", os.Getenv("TIDEMARK_CLICKHOUSE_ADDR"), "ClickHouse native host:port")
	db := flag.String("db", "tidemark_bench_plugin", "scratch database (dropped and recreated)")
	rows := flag.Int64("rows", 20_000_000, "raw rows to seed (at least 20 M for the reported figure)")
	runs := flag.Int("runs", 3, "timed runs of each query; the median is reported")
	keep := flag.Bool("keep", false, "keep the scratch database afterwards")
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "bench-plugin: TIDEMARK_CLICKHOUSE_ADDR is not set: run `make up` first")
		os.Exit(2)
	}
	if err := run(*addr, *db, *rows, *runs, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "bench-plugin:", err)
		os.Exit(1)
	}
}

func run(addr, db string, rows int64, runs int, keep bool) error {
	ctx := context.Background()
	admin, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, Settings: clickhouse.Settings{"max_execution_time": 600}})
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
		return fmt.Errorf("drop %s: %w", db, err)
	}
	if !keep {
		defer func() { _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db) }()
	}
	st, err := store.Open(ctx, store.Config{Addr: []string{addr}, Database: db, MaxExecutionTime: 600 * time.Second})
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", db, err)
	}
	conn := st.Conn()

	// The panel: 7 days ending at end, 1000 points at most → 605 s buckets, which the rollup path widens to 10 min;
	// the raw path gets the same 10 min step so both answer the same buckets.
	end := time.Date(2026, 11, 8, 0, 0, 0, 0, time.UTC)
	start := end.Add(-7 * 24 * time.Hour)
	res := result{Rows: rows, RankErrorBound: RankErrorBound, Runs: runs}
	t := time.Now()
	if err := seed(ctx, conn, start, rows); err != nil {
		return err
	}
	res.SeedS = time.Since(t).Seconds()
	if err := conn.QueryRow(ctx, "SELECT count() FROM latency_1m").Scan(&res.RollupRows); err != nil {
		return err
	}
	fmt.Printf("seeded %d raw rows (%d rollup rows) in %.1f s\n", rows, res.RollupRows, res.SeedS)

	r := query.NewReader(conn)
	levels := []float64{0.5, 0.9, 0.99}
	q := query.PercentileQuery{Window: query.Window{From: start, To: end, Step: 10 * time.Minute}, Stage: query.StageE2E,
		Levels: levels, GroupBy: query.DimNone}
	var raw, roll query.PercentileResult
	var rawT, rollT []float64
	for i := 0; i < runs; i++ {
		// alternate so neither path always runs on the warmer cache
		q.Source = query.SourceRaw
		t = time.Now()
		if raw, err = r.StagePercentiles(ctx, q); err != nil {
			return err
		}
		rawT = append(rawT, time.Since(t).Seconds())
		q.Source = query.SourceRollup
		t = time.Now()
		if roll, err = r.StagePercentiles(ctx, q); err != nil {
			return err
		}
		rollT = append(rollT, time.Since(t).Seconds())
		fmt.Printf("run %d: raw %.3f s, rollup %.3f s\n", i+1, rawT[i], rollT[i])
	}
	res.RawQueryS, res.RollupQueryS = median(rawT), median(rollT)
	res.RollupSpeedup = res.RawQueryS / res.RollupQueryS
	res.Buckets, res.StepS = len(roll.Points), int(roll.Step/time.Second)
	if len(raw.Points) != len(roll.Points) {
		return fmt.Errorf("raw answered %d buckets, rollup %d", len(raw.Points), len(roll.Points))
	}
	for i := range raw.Points {
		if raw.Points[i].Count != roll.Points[i].Count || !raw.Points[i].Time.Equal(roll.Points[i].Time) {
			return fmt.Errorf("bucket %d: raw %v n=%d, rollup %v n=%d", i, raw.Points[i].Time, raw.Points[i].Count,
				roll.Points[i].Time, roll.Points[i].Count)
		}
		for k := range levels {
			a, b := raw.Points[i].ValuesMs[k], roll.Points[i].ValuesMs[k]
			res.MaxRelDiff = math.Max(res.MaxRelDiff, math.Abs(a-b)/math.Max(math.Abs(a), 1))
		}
	}
	if res.MaxRankError, err = rankError(ctx, conn, roll, levels, q.Window); err != nil {
		return err
	}
	res.WithinError = res.MaxRankError <= RankErrorBound
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	return nil
}

// seed inserts rows raw latency rows evenly over the 7 days after start in chunks, server-side. Shape: 4 topics, 2
// groups, 2 consumer hosts per group; end-to-end latency 5..1004 ms uniform for 99% of messages and a tail of
// 5..25 s for 1%; the stages split it 1:3:6. 1% of rows are replays (left out of percentiles on both paths).
func seed(ctx context.Context, conn driver.Conn, start time.Time, rows int64) error {
	const chunk = 2_000_000
	span := float64(7 * 24 * 3600)
	for off := int64(0); off < rows; off += chunk {
		n := min(chunk, rows-off)
		sql := `INSERT INTO latency_events (record_time, observed_time, consumer_group, topic, partition, offset,
			replay_class, source, ingest_ms, queue_ms, process_ms, e2e_ms, ingest_naive_ms, queue_naive_ms,
			process_naive_ms, e2e_naive_ms, valid, producer_host, consumer_host, trace_id, ver)
		SELECT ts, ts, grp, topic, toInt32(n % 12), toInt64(n), if(n % 100 = 37, 'replay', 'live'), 'receipt',
			intDiv(e2e, 10), intDiv(e2e * 3, 10), e2e - intDiv(e2e, 10) - intDiv(e2e * 3, 10), e2e,
			intDiv(e2e, 10), intDiv(e2e * 3, 10), e2e - intDiv(e2e, 10) - intDiv(e2e * 3, 10), e2e,
			255, concat('p', toString(n % 4)), concat('c', grp, toString(intDiv(n, 8) % 2)), '', 1
		FROM (
			SELECT number + ? AS n,
				toDateTime(? + toUInt32(n * ?)) AS ts,
				concat('topic-', toString(n % 4)) AS topic,
				toString(intDiv(n, 4) % 2) AS grp,
				toInt64(if(intHash32(n) % 100 = 0, 5000 + intHash32(n + 1) % 20000, 5 + intHash32(n + 2) % 1000)) AS e2e
			FROM numbers(?)
		)`
		if err := conn.Exec(ctx, sql, off, start.Unix(), span/float64(rows), n); err != nil {
			return fmt.Errorf("seed rows %d..%d: %w", off, off+n, err)
		}
	}
	return nil
}

// rankError returns the largest |rank − level| over every bucket and level, where rank is the fraction of the
// bucket's live raw values at or below the rollup's answer. One raw scan: the rollup answers go in as bound arrays.
func rankError(ctx context.Context, conn driver.Conn, roll query.PercentileResult, levels []float64, w query.Window) (float64, error) {
	times := make([]uint32, len(roll.Points))
	vals := make([][]float64, len(levels))
	for k := range levels {
		vals[k] = make([]float64, len(roll.Points))
	}
	for i, p := range roll.Points {
		times[i] = uint32(p.Time.Unix())
		for k := range levels {
			vals[k][i] = p.ValuesMs[k]
		}
	}
	step := int64(roll.Step / time.Second)
	rows, err := conn.Query(ctx, `SELECT t, countIf(e2e_ms <= arrayElement(?, indexOf(?, t))) / count(),
			countIf(e2e_ms <= arrayElement(?, indexOf(?, t))) / count(), countIf(e2e_ms <= arrayElement(?, indexOf(?, t))) / count()
		FROM (SELECT toUInt32(intDiv(toUInt32(observed_time), ?) * ?) AS t, e2e_ms FROM latency_events
			WHERE observed_time >= toDateTime(?) AND observed_time < toDateTime(?) AND replay_class = 'live' AND bitAnd(valid, 8) != 0)
		GROUP BY t ORDER BY t`,
		vals[0], times, vals[1], times, vals[2], times, step, step, w.From.Unix(), w.To.Unix())
	if err != nil {
		return 0, fmt.Errorf("rank check: %w", err)
	}
	defer rows.Close()
	worst := 0.0
	for rows.Next() {
		var t uint32
		var r [3]float64
		if err := rows.Scan(&t, &r[0], &r[1], &r[2]); err != nil {
			return 0, err
		}
		for k, l := range levels {
			worst = math.Max(worst, math.Abs(r[k]-l))
		}
	}
	return worst, rows.Err()
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
