package plugin

import (
	"flag"
	"math"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/data"
	"github.com/grafana/grafana-plugin-sdk-go/experimental"

	"github.com/tidemark/tidemark/internal/store/query"
)

// go test ./plugin/pkg/plugin -run Golden -update rewrites testdata/golden/*.jsonc from the current frames.
var update = flag.Bool("update", false, "rewrite golden frame files")

var g0 = time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)

func mustParse(t *testing.T, js string) ParsedQuery {
	t.Helper()
	p, err := ParseQuery([]byte(js), "")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func golden(t *testing.T, name string, frames data.Frames) {
	t.Helper()
	dr := backend.DataResponse{Frames: frames}
	experimental.CheckGoldenJSONResponse(t, "testdata/golden", name, &dr, *update)
}

func TestGoldenStagePercentiles(t *testing.T) {
	q := mustParse(t, `{"queryType":"stage_percentiles","groupBy":"topic","percentiles":[0.5,0.999]}`)
	day := query.Window{From: g0.Add(-24 * time.Hour), To: g0, Step: 10 * time.Minute}
	golden(t, "stage_percentiles_rollup", percentileFrames(query.PercentileResult{Source: query.SourceRollup, Step: 10 * time.Minute,
		Points: []query.PercentilePoint{
			{Time: g0, Key: "orders", ValuesMs: []float64{12.5, 480}, Count: 1200,
				LowerMs: []float64{11, 470}, UpperMs: []float64{14, 495}},
			// p99.9 falls among the 3 samples whose upper end is unbounded: its upper is null, not dropped
			{Time: g0.Add(10 * time.Minute), Key: "orders", ValuesMs: []float64{13, 510.25}, Count: 1100, Unbounded: 3,
				LowerMs: []float64{12, 500}, UpperMs: []float64{15, math.Inf(1)}},
			{Time: g0, Key: "payments", ValuesMs: []float64{40, 900}, Count: 30},
		}}, q, day))
	f := percentileFrames(query.PercentileResult{Source: query.SourceRollup, Step: 10 * time.Minute,
		Points: []query.PercentilePoint{{Time: g0, Key: "orders", ValuesMs: []float64{13, 510.25}, Count: 1100, Unbounded: 3,
			LowerMs: []float64{12, 500}, UpperMs: []float64{15, math.Inf(1)}}}}, q, day)[0]
	lo, _ := f.FieldByName("p99.9_lower")
	hi, _ := f.FieldByName("p99.9_upper")
	p50hi, _ := f.FieldByName("p50_upper")
	unb, _ := f.FieldByName("unbounded")
	if lo == nil || hi == nil || p50hi == nil || unb == nil || *lo.At(0).(*float64) != 500 || hi.At(0).(*float64) != nil ||
		*p50hi.At(0).(*float64) != 15 || unb.At(0) != 3.0 {
		t.Fatalf("band fields: %v %v %v %v", lo, hi, p50hi, unb)
	}
	// hour buckets are answered by the hourly tier, which the notice names
	week := query.Window{From: g0.Add(-7 * 24 * time.Hour), To: g0, Step: time.Hour}
	golden(t, "stage_percentiles_rollup_1h", percentileFrames(query.PercentileResult{Source: query.SourceRollup1h, Step: time.Hour,
		Points: []query.PercentilePoint{{Time: g0, Key: "orders", ValuesMs: []float64{12.5, 480}, Count: 72000}}}, q, week))
	// Grafana's 7-day default asks for 10-minute buckets: the hourly tier answers for cost, and the notice says so
	week.Step = 10 * time.Minute
	golden(t, "stage_percentiles_rollup_1h_cost", percentileFrames(query.PercentileResult{Source: query.SourceRollup1h, Step: time.Hour,
		Points: []query.PercentilePoint{{Time: g0, Key: "orders", ValuesMs: []float64{12.5, 480}, Count: 72000}}}, q, week))
	pinned := mustParse(t, `{"queryType":"stage_percentiles","groupBy":"topic","percentiles":[0.5,0.999],"tier":"minute"}`)
	golden(t, "stage_percentiles_rollup_pinned", percentileFrames(query.PercentileResult{Source: query.SourceRollup, Step: 10 * time.Minute,
		Points: []query.PercentilePoint{{Time: g0, Key: "orders", ValuesMs: []float64{12.5, 480}, Count: 1200}}}, pinned, week))
	q = mustParse(t, `{"queryType":"stage_percentiles","stage":"append_receive","percentiles":[0.99]}`)
	golden(t, "stage_percentiles_raw_none", percentileFrames(query.PercentileResult{Source: query.SourceRaw, Step: 15 * time.Second,
		Points: []query.PercentilePoint{{Time: g0, ValuesMs: []float64{7}, Count: 3}}}, q, query.Window{From: g0.Add(-time.Hour), To: g0, Step: 15 * time.Second}))
}

func TestGoldenLag(t *testing.T) {
	q := mustParse(t, `{"queryType":"consumer_lag","groupBy":"group"}`)
	golden(t, "consumer_lag", lagFrames([]query.LagPoint{
		{Time: g0, Key: "billing", Lag: 107, Expired: 50, TimeLagMs: 9000, Partitions: 3},
		{Time: g0.Add(time.Minute), Key: "billing", Lag: 0, TimeLagMs: 0, Partitions: 3},
	}, q))
}

func TestGoldenSLO(t *testing.T) {
	q := mustParse(t, `{"queryType":"slo","sloObjective":0.75}`)
	// objective 0.75 leaves a budget of exactly 0.25, so every derived number is exact in binary:
	// T0 12 of 16 good → compliance 0.75, burn (4/16)/0.25 = 1, budget 1 − 4/(0.25·16) = 0;
	// T1 16 of 16 good → burn 0, budget 1 − 4/(0.25·32) = 0.5
	// The band: T0 8 of 16 surely good (upper end), 14 possibly (lower end) → [0.5, 0.875], 2 unbounded; T1 exact.
	pts := []query.SLOPoint{{Time: g0, Good: 12, Total: 16, GoodMin: 8, GoodMax: 14, Unbounded: 2},
		{Time: g0.Add(time.Minute), Good: 16, Total: 16, GoodMin: 16, GoodMax: 16}}
	golden(t, "slo", sloFrames(pts, q))
	f := sloFrames(pts, q)[0]
	cmin, _ := f.FieldByName("compliance_min")
	cmax, _ := f.FieldByName("compliance_max")
	unb, _ := f.FieldByName("unbounded")
	if cmin == nil || cmax == nil || cmin.At(0) != 0.5 || cmax.At(0) != 0.875 || cmin.At(1) != 1.0 || cmax.At(1) != 1.0 || unb.At(0) != 2.0 {
		t.Fatalf("compliance band %v %v unbounded %v", cmin, cmax, unb)
	}
	burn, _ := f.FieldByName("burn_rate")
	remain, _ := f.FieldByName("error_budget_remaining")
	if burn.At(0) != 1.0 || burn.At(1) != 0.0 || remain.At(0) != 0.0 || remain.At(1) != 0.5 {
		t.Fatalf("burn %v %v remaining %v %v", burn.At(0), burn.At(1), remain.At(0), remain.At(1))
	}
}

func TestGoldenSlowest(t *testing.T) {
	q := mustParse(t, `{"queryType":"slowest_messages","limit":2}`)
	golden(t, "slowest_messages", data.Frames{slowestFrame([]query.Message{
		{ObservedTime: g0, Topic: "orders", Group: "billing", Partition: 3, Offset: 42, LatencyMs: 1900, ReplayClass: "live",
			TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", ProducerHost: "p1", ConsumerHost: "c1"},
		// no trace context: a null trace id, which Grafana shows without a link
		{ObservedTime: g0, Topic: "orders", Group: "billing", Partition: 3, Offset: 43, LatencyMs: 1800, ReplayClass: "live",
			ProducerHost: "p1", ConsumerHost: "c1"},
	}, q, "tempo", "http://jaeger:16686/trace/${__value.raw}")})
	// without a tracing datasource or URL the trace id is plain text
	f := slowestFrame(nil, q, "", "")
	if tr, _ := f.FieldByName("trace_id"); len(tr.Config.Links) != 0 {
		t.Fatalf("links without a tracing datasource: %+v", tr.Config.Links)
	}
}

func TestGoldenClockAndProbe(t *testing.T) {
	golden(t, "clock_offsets", clockFrames([]query.ClockOffsetPoint{
		{Time: g0, Host: "b1", Kind: "bracketed", OffsetMs: -4.5, UncertaintyMs: 0.25, LowerMs: -4.75, UpperMs: -4.25, EstimateMs: -4.5},
		// A producer's envelope: at least 13 ms, no upper bound; the estimate adds the probe path's 1.5 ms.
		{Time: g0, Host: "c1", Kind: "envelope", OffsetMs: 13, UncertaintyMs: math.Inf(1), LowerMs: 12.9, UpperMs: math.Inf(1), EstimateMs: 14.5},
	}))
	golden(t, "probe_health", probeFrames([]query.ProbePoint{
		{Time: g0, Broker: "1", Sent: 8, Lost: 2, Duplicates: 1, P50Ms: 3, P99Ms: 9.5},
	}))
	golden(t, "e2e_distribution", distributionFrames(query.SourceRaw, []query.DistributionSeries{
		{Key: "", ValuesMs: make([]float64, len(query.DistributionLevels())), Count: 0},
	}, mustParse(t, `{"queryType":"e2e_distribution"}`), query.Window{From: g0.Add(-time.Hour), To: g0, Step: 15 * time.Second}))
}

func TestLevelName(t *testing.T) {
	for _, tc := range []struct {
		level float64
		want  string
	}{
		{0.5, "p50"},
		{0.99, "p99"},
		{0.999, "p99.9"},
		{0.9999, "p99.99"},
		{0.05, "p5"},
		{0.07, "p7"},          // 0.07*100 is 7.000000000000001 in float64
		{0.29, "p29"},         // 0.29*100 is 28.999999999999996
		{0.123456, "p12.346"}, // 3 decimals of a percent
		{0.00001, "p0.001"},   // query.MinLevel
		{0.99999, "p99.999"},  // query.MaxLevel
	} {
		if got := levelName(tc.level); got != tc.want {
			t.Errorf("%v: got %s want %s", tc.level, got, tc.want)
		}
	}
}

func TestWindow(t *testing.T) {
	for _, tc := range []struct {
		name     string
		q        backend.DataQuery
		wantStep time.Duration
	}{
		{"the panel's interval", backend.DataQuery{Interval: 15 * time.Second, MaxDataPoints: 1000,
			TimeRange: backend.TimeRange{From: g0, To: g0.Add(time.Hour)}}, 15 * time.Second},
		// 7 days in at most 1000 points: 604.8 s, rounded up to whole seconds
		{"widened to the point budget", backend.DataQuery{Interval: time.Second, MaxDataPoints: 1000,
			TimeRange: backend.TimeRange{From: g0, To: g0.Add(7 * 24 * time.Hour)}}, 605 * time.Second},
		// alert rules may send neither: MaxPoints bounds the buckets, and a step is never under a second
		{"no interval or budget", backend.DataQuery{TimeRange: backend.TimeRange{From: g0, To: g0.Add(10 * time.Minute)}}, time.Second},
		{"sub-second interval", backend.DataQuery{Interval: 200 * time.Millisecond, MaxDataPoints: 100000,
			TimeRange: backend.TimeRange{From: g0, To: g0.Add(time.Minute)}}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if w := window(tc.q); w.Step != tc.wantStep || !w.From.Equal(tc.q.TimeRange.From) {
				t.Fatalf("got %+v, want step %s", w, tc.wantStep)
			}
		})
	}
}

// BenchmarkPercentileFrames measures the rows → frames hot path for a 7-day panel: 1008 buckets × 16 series × 3
// levels, the shape cmd/bench-plugin queries.
func BenchmarkPercentileFrames(b *testing.B) {
	q, err := ParseQuery([]byte(`{"queryType":"stage_percentiles","groupBy":"host","percentiles":[0.5,0.9,0.99]}`), "")
	if err != nil {
		b.Fatal(err)
	}
	var res query.PercentileResult
	for s := 0; s < 16; s++ {
		for i := 0; i < 1008; i++ {
			res.Points = append(res.Points, query.PercentilePoint{Time: g0.Add(time.Duration(i) * 10 * time.Minute),
				Key: string(rune('a' + s)), ValuesMs: []float64{1, 2, 3}, Count: 100})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if f := percentileFrames(res, q, query.Window{From: g0, To: g0.Add(7 * 24 * time.Hour), Step: 10 * time.Minute}); len(f) != 16 {
			b.Fatal(len(f))
		}
	}
}
