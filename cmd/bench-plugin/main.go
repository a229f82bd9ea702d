// Command bench-plugin measures what the plugin's rollups buy: it seeds at least 20 million raw latency rows spread
// over 7 days into a scratch ClickHouse database through store.Writer, the collector's writer, at the batch size
// `tidemark run` uses on its recommended memory budget (-batch-rows, default 10,000: memory_limit_mb 250), in time
// order, so both rollup tiers fill through their real materialized views in as many small inserts, states and parts
// as real ingest makes; then it answers a 7-day stage-percentile panel through
// internal/store/query (the plugin's own read path) from raw rows and from the source query.ChooseSource picks, and
// checks the rollup answer against the raw rows: for every bucket and level, the rank of the rollup's value among the
// bucket's raw values must lie within RankErrorBound of the level.
//
// The headline panel has hour-wide buckets (168 points over 7 days), which ChooseSource answers from the hourly tier
// latency_1h. The same 7 days at 10-minute buckets (what Grafana asks for at ~1000 points) is measured too, from the
// minute tier latency_1m, and reported in the minute_* fields.
//
// The last line printed is a JSON object: rows, source, raw_query_s, rollup_query_s, rollup_speedup,
// max_rank_error, rank_error_bound, within_error, the minute_* figures, and more. Run by `make bench-plugin`; it needs
// TIDEMARK_CLICKHOUSE_ADDR (`make up`).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/internal/benchproc"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/store/query"
)

// RankErrorBound is the error the comparison allows: ClickHouse documents quantileTDigest's error as at most 1%,
// which for a t-digest is an error in rank (the quantile level a returned value actually has).
const RankErrorBound = 0.01

type result struct {
	Rows           int64   `json:"rows"`
	RollupRows     uint64  `json:"rollup_rows"`    // latency_1m rows
	Rollup1hRows   uint64  `json:"rollup_1h_rows"` // latency_1h rows
	SeedS          float64 `json:"seed_s"`
	Source         string  `json:"source"` // what query.ChooseSource picked for the headline panel
	Buckets        int     `json:"buckets"`
	StepS          int     `json:"step_s"`
	RawQueryS      float64 `json:"raw_query_s"`
	RollupQueryS   float64 `json:"rollup_query_s"`
	RollupSpeedup  float64 `json:"rollup_speedup"`
	MaxRankError   float64 `json:"max_rank_error"`
	RankErrorBound float64 `json:"rank_error_bound"`
	WithinError    bool    `json:"within_error"`
	MaxRelDiff     float64 `json:"max_rel_diff_raw_vs_rollup"`
	// The same 7 days in 10-minute buckets, answered from the minute tier.
	MinuteStepS        int     `json:"minute_step_s"`
	MinuteRawQueryS    float64 `json:"minute_raw_query_s"`
	MinuteRollupQueryS float64 `json:"minute_rollup_query_s"`
	MinuteSpeedup      float64 `json:"minute_rollup_speedup"`
	MinuteMaxRankError float64 `json:"minute_max_rank_error"`
	Runs               int     `json:"runs"`
	// BatchRows is the writer's batch_rows the rows were seeded with, Inserts the INSERTs ClickHouse acknowledged
	// (the writer's tidemark_store_writer_batches_total).
	BatchRows int     `json:"seed_batch_rows"`
	Inserts   float64 `json:"seed_inserts"`
	*benchproc.Provenance
}

func main() {
	addr := flag.String("addr", os.Getenv("TIDEMARK_CLICKHOUSE_ADDR"), "ClickHouse native host:port")
	db := flag.String("db", "tidemark_bench_plugin", "scratch database (dropped and recreated)")
	rows := flag.Int64("rows", 20_000_000, "raw rows to seed (at least 20 M for the reported figure)")
	flag.IntVar(&batchRows, "batch-rows", batchRows, "the writer's batch_rows while seeding (`tidemark run` at memory_limit_mb 250: 10000)")
	runs := flag.Int("runs", 7, "timed runs of each query; the median is reported (7: the machine is shared and a 40 ms query is noisy)")
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

	// Both panels cover the 7 days ending at end; compare gives raw rows and the rollup the same step, so both
	// answer the same buckets.
	end := time.Date(2026, 11, 8, 0, 0, 0, 0, time.UTC)
	start := end.Add(-7 * 24 * time.Hour)
	prov := benchproc.NewProvenance(ctx, "github.com/ClickHouse/clickhouse-go/v2")
	prov.Rounds = runs
	if major, minor, patch, err := st.ServerVersion(); err == nil {
		prov.Peers["clickhouse"] = fmt.Sprintf("%d.%d.%d", major, minor, patch)
	}
	res := result{Rows: rows, RankErrorBound: RankErrorBound, Runs: runs, BatchRows: batchRows, Provenance: prov}
	t := time.Now()
	if res.Inserts, err = seed(ctx, st, start, rows); err != nil {
		return err
	}
	res.SeedS = time.Since(t).Seconds()
	prov.Phase("seed")
	if err := conn.QueryRow(ctx, "SELECT count() FROM latency_1m").Scan(&res.RollupRows); err != nil {
		return err
	}
	if err := conn.QueryRow(ctx, "SELECT count() FROM latency_1h").Scan(&res.Rollup1hRows); err != nil {
		return err
	}
	fmt.Printf("seeded %d raw rows (%d minute, %d hourly rollup rows) in %.1f s\n", rows, res.RollupRows, res.Rollup1hRows, res.SeedS)

	r := query.NewReader(conn)
	levels := []float64{0.5, 0.9, 0.99}
	// The headline panel: 7 days in hour buckets, the source left to ChooseSource.
	q := query.PercentileQuery{Window: query.Window{From: start, To: end, Step: time.Hour}, Stage: query.StageE2E,
		Levels: levels, GroupBy: query.DimNone}
	c, err := compare(ctx, conn, r, q, query.SourceAuto, runs)
	if err != nil {
		return err
	}
	res.Source, res.Buckets, res.StepS = string(c.source), c.buckets, c.stepS
	res.RawQueryS, res.RollupQueryS, res.RollupSpeedup = c.rawS, c.rollS, c.rawS/c.rollS
	res.MaxRankError, res.MaxRelDiff = c.rankErr, c.relDiff
	res.WithinError = res.MaxRankError <= RankErrorBound
	// The same week at 10-minute buckets from the minute tier, asked for by name: ChooseSource answers a week this
	// fine from the hourly tier by cost (query.ByCost), in hour buckets.
	q.Window.Step = 10 * time.Minute
	m, err := compare(ctx, conn, r, q, query.SourceRollup, runs)
	if err != nil {
		return err
	}
	res.MinuteStepS, res.MinuteRawQueryS, res.MinuteRollupQueryS = m.stepS, m.rawS, m.rollS
	res.MinuteSpeedup, res.MinuteMaxRankError = m.rawS/m.rollS, m.rankErr
	prov.Phase("queries")
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	return nil
}

// comparison is one panel answered from raw rows and from the source ChooseSource picks.
type comparison struct {
	source      query.Source
	buckets     int
	stepS       int
	rawS, rollS float64 // median seconds
	rankErr     float64 // worst |rank − level| of the rollup's values among the raw values
	relDiff     float64 // worst |raw − rollup| / max(|raw|, 1) over buckets and levels
}

// compare answers q runs times from raw rows and from the rollup tier src (query.SourceAuto: ChooseSource's pick),
// alternating so neither path always runs on the warmer cache, checks the two answer the same buckets with the same
// counts, and measures the rollup's error against the raw rows.
func compare(ctx context.Context, conn driver.Conn, r *query.Reader, q query.PercentileQuery, src query.Source, runs int) (comparison, error) {
	var c comparison
	c.source = src
	if src == query.SourceAuto {
		c.source = query.ChooseSource(q.Window, q.IncludeReplays)
	}
	if !c.source.IsRollup() {
		return c, fmt.Errorf("panel %+v: ChooseSource picked %s, want a rollup tier", q.Window, c.source)
	}
	var raw, roll query.PercentileResult
	var rawT, rollT []float64
	var err error
	for i := 0; i < runs; i++ {
		q.Source = query.SourceRaw
		t := time.Now()
		if raw, err = r.StagePercentiles(ctx, q); err != nil {
			return c, err
		}
		rawT = append(rawT, time.Since(t).Seconds())
		q.Source = src
		t = time.Now()
		if roll, err = r.StagePercentiles(ctx, q); err != nil {
			return c, err
		}
		rollT = append(rollT, time.Since(t).Seconds())
		fmt.Printf("step %s run %d: raw %.3f s, %s %.3f s\n", q.Window.Step, i+1, rawT[i], roll.Source, rollT[i])
	}
	if roll.Source != c.source {
		return c, fmt.Errorf("answered from %s, asked for %s", roll.Source, c.source)
	}
	c.rawS, c.rollS = median(rawT), median(rollT)
	c.buckets, c.stepS = len(roll.Points), int(roll.Step/time.Second)
	if len(raw.Points) != len(roll.Points) {
		return c, fmt.Errorf("raw answered %d buckets, %s %d", len(raw.Points), roll.Source, len(roll.Points))
	}
	for i := range raw.Points {
		if raw.Points[i].Count != roll.Points[i].Count || !raw.Points[i].Time.Equal(roll.Points[i].Time) {
			return c, fmt.Errorf("bucket %d: raw %v n=%d, %s %v n=%d", i, raw.Points[i].Time, raw.Points[i].Count,
				roll.Source, roll.Points[i].Time, roll.Points[i].Count)
		}
		for k := range q.Levels {
			a, b := raw.Points[i].ValuesMs[k], roll.Points[i].ValuesMs[k]
			c.relDiff = math.Max(c.relDiff, math.Abs(a-b)/math.Max(math.Abs(a), 1))
		}
	}
	c.rankErr, err = rankError(ctx, conn, roll, q.Levels, q.Window)
	return c, err
}

// batchRows is the writer's batch_rows while seeding (-batch-rows).
var batchRows = 10000

// seed writes rows latency rows, in time order over the 7 days from start, through a store.Writer with batch_rows
// batchRows (its other settings the defaults), in Writes of 1,000 rows (a consumer batch). Row n is at start + n ×
// 7 days / rows, on topic-(n mod 4), group (n div 4) mod 2, partition n mod 12, offset n; 1 % are replays; the
// end-to-end latency is 5–1,005 ms, and 5–25 s for 1 % of rows (a tail), split 10/30/60 % into ingest, queue and
// processing; every stage valid.
//
// It returns the INSERTs ClickHouse acknowledged.
func seed(ctx context.Context, st *store.Store, start time.Time, rows int64) (inserts float64, err error) {
	cfg := st.Config()
	cfg.Writer = store.WriterConfig{BatchRows: batchRows}
	wst, err := store.Open(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer wst.Close()
	reg := prometheus.NewRegistry()
	w, err := store.NewWriter(wst, store.WriterOptions{Registerer: reg})
	if err != nil {
		return 0, err
	}
	var failed atomic.Pointer[error]
	spanMs := float64(7*24*3600*1000) / float64(rows)
	startMs := start.UnixMilli()
	const write = 1000
	for off := int64(0); off < rows; off += write {
		batch := make([]store.LatencyRow, min(write, rows-off))
		for i := range batch {
			n := off + int64(i)
			h := splitmix64(uint64(n))
			e2e := int64(5 + h%1000)
			if h>>32%100 == 0 {
				e2e = 5000 + int64(h>>40%20000)
			}
			ingest, queue := e2e/10, e2e*3/10
			process := e2e - ingest - queue
			ts := startMs + int64(float64(n)*spanMs)
			grp := strconv.FormatInt(n/4%2, 10)
			class := store.ClassLive
			if n%100 == 37 {
				class = store.ClassReplay
			}
			batch[i] = store.LatencyRow{
				Group: grp, Topic: topics[n%4], Partition: int32(n % 12), Offset: n, Class: class, Source: store.SourceReceipt,
				ProcessedMs: ts, ObservedMs: ts, ReceiveMs: ts - process, AppendMs: ts - process - queue, EventMs: ts - e2e,
				IngestMs: ingest, QueueMs: queue, ProcessMs: process, E2EMs: e2e,
				IngestNaiveMs: ingest, QueueNaiveMs: queue, ProcessNaiveMs: process, E2ENaiveMs: e2e,
				Valid: 255, ProducerHost: producers[n%4], ConsumerHost: "c" + grp + strconv.FormatInt(n/8%2, 10),
			}
		}
		if err := w.Write(ctx, store.Rows{Latency: batch}, func(err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		}); err != nil {
			return 0, fmt.Errorf("seed rows %d..: %w", off, err)
		}
		if e := failed.Load(); e != nil {
			return 0, fmt.Errorf("seed: the writer gave up a batch: %w", *e)
		}
	}
	if err := w.Close(ctx); err != nil {
		return 0, fmt.Errorf("seed: close the writer: %w", err)
	}
	if e := failed.Load(); e != nil {
		return 0, fmt.Errorf("seed: the writer gave up a batch: %w", *e)
	}
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == "tidemark_store_writer_batches_total" {
			for _, m := range mf.GetMetric() {
				inserts += m.GetCounter().GetValue()
			}
		}
	}
	return inserts, nil
}

var (
	topics    = [4]string{"topic-0", "topic-1", "topic-2", "topic-3"}
	producers = [4]string{"p0", "p1", "p2", "p3"}
)

// splitmix64 is a fast, well-mixed hash of n (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", 2014): the seed's deterministic randomness.
func splitmix64(n uint64) uint64 {
	z := n + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
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
