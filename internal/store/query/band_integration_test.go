package query_test

import (
	"math"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/store/query"
	"github.com/tidemark/tidemark/internal/store/query/querytest"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestStagePercentilesBand reads a stage's percentiles with their band from raw rows and from both rollup tiers:
// the band is the percentiles of the lower and of the upper ends, it holds the estimate, and the samples whose upper
// end is unbounded are counted and open the band where a level falls among them, never dropped.
func TestStagePercentilesBand(t *testing.T) {
	db, conn := testenv.ClickHouseDB(t)
	querytest.Schema(t, db)
	inf := math.Inf(1)
	var rows []querytest.Latency
	// 1000 e2e samples of 1..1000 ms, each within [v − 5, v + 10]; the 20 slowest have an unbounded upper end.
	for i := range 1000 {
		v := int64(i + 1)
		r := querytest.Latency{Observed: t0.Add(time.Duration(i%60) * time.Second), Topic: "orders", Group: "g",
			Offset: int64(i), IngestMs: 1, QueueMs: 1, ProcessMs: v - 2, E2EMs: v, ConsumerHost: "c1", Bounded: true}
		r.Lo = [4]float64{1, 1, float64(v - 2), math.Max(0, float64(v-5))}
		r.Hi = [4]float64{1, 1, float64(v - 2), float64(v + 10)}
		if i >= 980 {
			r.Hi[3] = inf
		}
		rows = append(rows, r)
	}
	querytest.InsertLatency(t, conn, rows)
	r := query.NewReader(conn)
	for _, src := range []query.Source{query.SourceRaw, query.SourceRollup, query.SourceRollup1h} {
		w := query.Window{From: t0, To: t0.Add(time.Hour), Step: time.Hour}
		res, err := r.StagePercentiles(ctx(t), query.PercentileQuery{Window: w, Stage: query.StageE2E,
			Levels: []float64{0.5, 0.9, 0.99}, Source: src})
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if len(res.Points) != 1 {
			t.Fatalf("%s: %d points, want 1", src, len(res.Points))
		}
		p := res.Points[0]
		if p.Count != 1000 || p.Unbounded != 20 {
			t.Errorf("%s: count %d unbounded %d, want 1000 and 20", src, p.Count, p.Unbounded)
		}
		// Exact: p50 500.5, band [495.5, 510.5]; p90 900.5, band [895.5, 910.5]; p99 falls among the unbounded.
		// The t-digest is within 1 % of rank (docs/schema.md): ±10 ms here.
		near := func(got, want float64) bool { return math.Abs(got-want) <= 10 }
		for i, want := range [][3]float64{{495.5, 500.5, 510.5}, {895.5, 900.5, 910.5}} {
			if !near(p.LowerMs[i], want[0]) || !near(p.ValuesMs[i], want[1]) || !near(p.UpperMs[i], want[2]) {
				t.Errorf("%s level %d: %v [%v, %v], want ≈%v [%v, %v]", src, i, p.ValuesMs[i], p.LowerMs[i], p.UpperMs[i],
					want[1], want[0], want[2])
			}
		}
		if !math.IsInf(p.UpperMs[2], 1) || !near(p.LowerMs[2], 985) {
			t.Errorf("%s p99: [%v, %v], want ≈[985, +Inf)", src, p.LowerMs[2], p.UpperMs[2])
		}
		for i := range p.ValuesMs {
			if p.LowerMs[i] > p.ValuesMs[i] || p.ValuesMs[i] > p.UpperMs[i] {
				t.Errorf("%s level %d: band [%v, %v] does not hold %v", src, i, p.LowerMs[i], p.UpperMs[i], p.ValuesMs[i])
			}
		}
	}
}
