package query_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/store/query"
	"github.com/tidemark/tidemark/internal/store/query/querytest"
	"github.com/tidemark/tidemark/internal/testenv"
)

var t0 = querytest.T0

func seeded(t *testing.T) *query.Reader {
	t.Helper()
	db, conn := testenv.ClickHouseDB(t)
	querytest.Schema(t, db)
	querytest.SeedFixture(t, conn)
	return query.NewReader(conn)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// twoMinutes covers the whole fixture in one-minute buckets.
var twoMinutes = query.Window{From: t0, To: t0.Add(2 * time.Minute), Step: time.Minute}

type pp = query.PercentilePoint

// exact gives points the band the fixture's exact intervals have: each level's lower and upper ends are its value.
func exact(ps ...pp) []pp {
	for i := range ps {
		ps[i].LowerMs, ps[i].UpperMs = ps[i].ValuesMs, ps[i].ValuesMs
	}
	return ps
}

func TestStagePercentilesRawAndRollupAgree(t *testing.T) {
	r := seeded(t)
	for _, src := range []query.Source{query.SourceRaw, query.SourceRollup} {
		t.Run(string(src), func(t *testing.T) {
			res, err := r.StagePercentiles(ctx(t), query.PercentileQuery{Window: twoMinutes, Stage: query.StageE2E,
				Levels: []float64{0.5, 0.99}, GroupBy: query.DimTopic, Source: src})
			if err != nil {
				t.Fatal(err)
			}
			// Replays (50000) and the invalid e2e rows (99999) are left out: every bucket holds one repeated value.
			want := exact(
				pp{Time: t0, Key: "orders", ValuesMs: []float64{100, 100}, Count: 10},
				pp{Time: t0.Add(time.Minute), Key: "orders", ValuesMs: []float64{300, 300}, Count: 10},
				pp{Time: t0, Key: "payments", ValuesMs: []float64{1000, 1000}, Count: 5},
			)
			if res.Source != src || res.Step != time.Minute || !reflect.DeepEqual(res.Points, want) {
				t.Fatalf("got %s step %s %+v\nwant %+v", res.Source, res.Step, res.Points, want)
			}
		})
	}
}

// TestStagePercentilesHourlyTier: hour-wide buckets pick latency_1h, and the three sources answer the fixture's hour
// with the same counts and, where a bucket holds one repeated value, the same value.
func TestStagePercentilesHourlyTier(t *testing.T) {
	r := seeded(t)
	w := query.Window{From: t0.Add(-time.Hour), To: t0.Add(2 * time.Hour), Step: time.Hour}
	auto, err := r.StagePercentiles(ctx(t), query.PercentileQuery{Window: w, Stage: query.StageE2E,
		Levels: []float64{0.5, 0.99}, GroupBy: query.DimTopic})
	if err != nil {
		t.Fatal(err)
	}
	if auto.Source != query.SourceRollup1h || auto.Step != time.Hour {
		t.Fatalf("auto source %s step %s, want rollup_1h 1h", auto.Source, auto.Step)
	}
	for _, src := range []query.Source{query.SourceRaw, query.SourceRollup, query.SourceRollup1h} {
		t.Run(string(src), func(t *testing.T) {
			res, err := r.StagePercentiles(ctx(t), query.PercentileQuery{Window: w, Stage: query.StageE2E,
				Levels: []float64{0.5, 0.99}, GroupBy: query.DimTopic, Source: src})
			if err != nil {
				t.Fatal(err)
			}
			// One bucket per topic at T0's hour: orders holds 10 x 100 ms and 10 x 300 ms (its two minutes), payments
			// 5 x 1000 ms; the hour before is empty and left out.
			if len(res.Points) != 2 || res.Step != time.Hour {
				t.Fatalf("got step %s %+v", res.Step, res.Points)
			}
			orders, payments := res.Points[0], res.Points[1]
			if orders.Key != "orders" || !orders.Time.Equal(t0) || orders.Count != 20 {
				t.Fatalf("orders bucket %+v, want T0 with 20 samples", orders)
			}
			if p50 := orders.ValuesMs[0]; p50 < 100 || p50 > 300 || orders.ValuesMs[1] != 300 {
				t.Fatalf("orders p50 %v p99 %v, want p50 within [100, 300] and p99 300", p50, orders.ValuesMs[1])
			}
			if !reflect.DeepEqual(payments, exact(pp{Time: t0, Key: "payments", ValuesMs: []float64{1000, 1000}, Count: 5})[0]) {
				t.Fatalf("payments bucket %+v", payments)
			}
			// By host: ingest belongs to the producer's host; p2 sent the 5 payments at 100 ms; p1's hour holds 12 + 10
			// ingest samples (the invalid-e2e rows are valid for ingest).
			res, err = r.StagePercentiles(ctx(t), query.PercentileQuery{Window: w, Stage: query.StageProduceAppend,
				Levels: []float64{0.9}, GroupBy: query.DimHost, Source: src})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Points) != 2 || res.Points[0].Key != "p1" || res.Points[0].Count != 22 ||
				!reflect.DeepEqual(res.Points[1], exact(pp{Time: t0, Key: "p2", ValuesMs: []float64{100}, Count: 5})[0]) {
				t.Fatalf("by host: %+v", res.Points)
			}
		})
	}
}

func TestStagePercentilesByHostAndStage(t *testing.T) {
	r := seeded(t)
	for _, src := range []query.Source{query.SourceRaw, query.SourceRollup} {
		// ingest is keyed by the producer's host; the invalid-e2e rows are valid for ingest and count here (12).
		res, err := r.StagePercentiles(ctx(t), query.PercentileQuery{Window: twoMinutes, Stage: query.StageProduceAppend,
			Levels: []float64{0.9}, GroupBy: query.DimHost, Source: src})
		if err != nil {
			t.Fatal(err)
		}
		want := exact(
			pp{Time: t0, Key: "p1", ValuesMs: []float64{10}, Count: 12},
			pp{Time: t0.Add(time.Minute), Key: "p1", ValuesMs: []float64{20}, Count: 10},
			pp{Time: t0, Key: "p2", ValuesMs: []float64{100}, Count: 5},
		)
		if !reflect.DeepEqual(res.Points, want) {
			t.Fatalf("%s: got %+v\nwant %+v", src, res.Points, want)
		}
	}
}

func TestStagePercentilesFiltersAndReplays(t *testing.T) {
	r := seeded(t)
	res, err := r.StagePercentiles(ctx(t), query.PercentileQuery{Window: twoMinutes, Stage: query.StageReceiveProcess,
		Levels: []float64{0.5}, Filter: query.Filter{Topics: []string{"orders"}, Hosts: []string{"c1"}}, IncludeReplays: true})
	if err != nil {
		t.Fatal(err)
	}
	// Including replays forces raw rows; bucket T0 of orders then holds 10 live + 2 invalid-e2e (process valid) + 5
	// replays = 17 samples, and its maximum is the replays' 50000.
	if res.Source != query.SourceRaw || len(res.Points) != 2 || res.Points[0].Count != 17 || res.Points[1].Count != 10 {
		t.Fatalf("got %s %+v", res.Source, res.Points)
	}
	// A filter that matches nothing returns no points, not an error.
	res, err = r.StagePercentiles(ctx(t), query.PercentileQuery{Window: twoMinutes, Stage: query.StageE2E,
		Levels: []float64{0.5}, Filter: query.Filter{Groups: []string{"nobody' OR 1=1 --"}}})
	if err != nil || len(res.Points) != 0 {
		t.Fatalf("injection-shaped filter: %v %+v", err, res.Points)
	}
}

func TestDistribution(t *testing.T) {
	r := seeded(t)
	src, series, err := r.Distribution(ctx(t), query.DistributionQuery{Window: twoMinutes, Stage: query.StageE2E,
		GroupBy: query.DimTopic, Filter: query.Filter{Topics: []string{"payments"}}})
	if err != nil {
		t.Fatal(err)
	}
	if src != query.SourceRollup || len(series) != 1 || series[0].Key != "payments" || series[0].Count != 5 {
		t.Fatalf("got %s %+v", src, series)
	}
	for i, v := range series[0].ValuesMs {
		if v != 1000 {
			t.Fatalf("level %v = %v, want 1000", query.DistributionLevels()[i], v)
		}
	}
}

func TestConsumerLag(t *testing.T) {
	r := seeded(t)
	got, err := r.ConsumerLag(ctx(t), query.LagQuery{Window: twoMinutes, GroupBy: query.DimGroup})
	if err != nil {
		t.Fatal(err)
	}
	// billing at T0: each partition's last snapshot, orders 3+4 and payments 100; time lag is the max, 9000.
	want := []query.LagPoint{
		{Time: t0, Key: "billing", Lag: 107, Expired: 50, TimeLagMs: 9000, Partitions: 3},
		{Time: t0.Add(time.Minute), Key: "idle-group", Lag: 1, TimeLagMs: 60000, Partitions: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	got, err = r.ConsumerLag(ctx(t), query.LagQuery{Window: twoMinutes, GroupBy: query.DimTopic,
		Filter: query.Filter{Groups: []string{"billing"}, Topics: []string{"orders"}}})
	if err != nil {
		t.Fatal(err)
	}
	want = []query.LagPoint{{Time: t0, Key: "orders", Lag: 7, TimeLagMs: 2000, Partitions: 2}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

// TestConsumerLagGroupTypes: lag snapshots of every group type are summed alike, selected by group type, grouped by
// type, and a streams group's lag is split per subtopology (other groups keep one series each).
func TestConsumerLagGroupTypes(t *testing.T) {
	db, conn := testenv.ClickHouseDB(t)
	querytest.Schema(t, db)
	rows := []querytest.Lag{
		{Group: "billing", Topic: "orders", Partition: 0, Lag: 5, TimeLagMs: 1000},
		{Group: "billing-848", Topic: "orders", Partition: 0, Lag: 7, TimeLagMs: 2000, GroupType: "consumer"},
		{Group: "workers", Topic: "jobs", Partition: 0, Lag: 30, TimeLagMs: 60000, GroupType: "share"},
		{Group: "workers", Topic: "jobs", Partition: 1, Lag: 20, TimeLagMs: 30000, GroupType: "share"},
		{Group: "app", Topic: "clicks", Partition: 0, Lag: 4, TimeLagMs: 500, GroupType: "streams", Subtopology: "0"},
		{Group: "app", Topic: "app-count-repartition", Partition: 0, Lag: 2, TimeLagMs: 800, GroupType: "streams", Subtopology: "1"},
		{Group: "app", Topic: "app-count-repartition", Partition: 1, Lag: 3, TimeLagMs: 900, GroupType: "streams", Subtopology: "1"},
	}
	for i := range rows {
		rows[i].At, rows[i].Cluster = t0.Add(10*time.Second), "c"
	}
	querytest.InsertLag(t, conn, rows)
	r := query.NewReader(conn)
	run := func(q query.LagQuery) []query.LagPoint {
		t.Helper()
		q.Window = twoMinutes
		got, err := r.ConsumerLag(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	byType := run(query.LagQuery{GroupBy: query.DimGroupType})
	want := []query.LagPoint{
		{Time: t0, Key: "classic", Lag: 5, TimeLagMs: 1000, Partitions: 1},
		{Time: t0, Key: "consumer", Lag: 7, TimeLagMs: 2000, Partitions: 1},
		{Time: t0, Key: "share", Lag: 50, TimeLagMs: 60000, Partitions: 2},
		{Time: t0, Key: "streams", Lag: 9, TimeLagMs: 900, Partitions: 3},
	}
	if !reflect.DeepEqual(byType, want) {
		t.Fatalf("by group type: got %+v\nwant %+v", byType, want)
	}
	perSub := run(query.LagQuery{GroupBy: query.DimSubtopology, Filter: query.Filter{GroupTypes: []string{"streams", "share"}}})
	want = []query.LagPoint{
		{Time: t0, Key: "app/0", Lag: 4, TimeLagMs: 500, Partitions: 1},
		{Time: t0, Key: "app/1", Lag: 5, TimeLagMs: 900, Partitions: 2},
		{Time: t0, Key: "workers", Lag: 50, TimeLagMs: 60000, Partitions: 2},
	}
	if !reflect.DeepEqual(perSub, want) {
		t.Fatalf("per subtopology: got %+v\nwant %+v", perSub, want)
	}
	if _, err := r.ConsumerLag(ctx(t), query.LagQuery{Window: twoMinutes, Filter: query.Filter{GroupTypes: []string{"dynamic"}}}); !errors.Is(err, query.ErrBadInput) {
		t.Fatalf("unknown group type: err %v, want ErrBadInput", err)
	}
}

func TestSLO(t *testing.T) {
	r := seeded(t)
	got, err := r.SLO(ctx(t), query.SLOQuery{Window: twoMinutes, ThresholdMs: 500})
	if err != nil {
		t.Fatal(err)
	}
	// T0: orders' 10 at 100 ms are good, payments' 5 at 1000 ms are not; T0+1m: orders' 10 at 300 ms are good.
	// The fixture's intervals are exact, so the band is the estimate.
	want := []query.SLOPoint{{Time: t0, Good: 10, Total: 15, GoodMin: 10, GoodMax: 10}, {Time: t0.Add(time.Minute), Good: 10, Total: 10, GoodMin: 10, GoodMax: 10}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestSlowest(t *testing.T) {
	r := seeded(t)
	got, err := r.Slowest(ctx(t), query.SlowestQuery{Window: twoMinutes, Stage: query.StageE2E, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range got {
		if m.LatencyMs != 1000 || m.Topic != "payments" || m.TraceID != querytest.TraceID("payments", m.Offset) ||
			m.ConsumerHost != "c2" || m.ReplayClass != "live" {
			t.Fatalf("unexpected message %+v", m)
		}
		keys = append(keys, m.Topic+":"+string(rune('0'+m.Offset)))
	}
	// ties at 1000 ms are broken by partition and offset
	if !reflect.DeepEqual(keys, []string{"payments:0", "payments:1", "payments:2"}) {
		t.Fatalf("got %v", keys)
	}
}

func TestSlowestCollapsesRedelivery(t *testing.T) {
	db, conn := testenv.ClickHouseDB(t)
	querytest.Schema(t, db)
	row := querytest.Latency{Observed: t0, Topic: "t", Group: "g", Offset: 7, E2EMs: 900}
	querytest.InsertLatency(t, conn, []querytest.Latency{row, {Observed: t0, Topic: "t", Group: "g", Offset: 8, E2EMs: 5}})
	querytest.InsertLatency(t, conn, []querytest.Latency{row}) // at-least-once: the same message written again
	got, err := query.NewReader(conn).Slowest(ctx(t), query.SlowestQuery{Window: twoMinutes, Stage: query.StageE2E, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Offset != 7 || got[1].Offset != 8 {
		t.Fatalf("got %+v", got)
	}
}

func TestClockOffsets(t *testing.T) {
	r := seeded(t)
	got, err := r.ClockOffsets(ctx(t), query.ClockOffsetQuery{Window: twoMinutes})
	if err != nil {
		t.Fatal(err)
	}
	want := []query.ClockOffsetPoint{
		// An envelope keeps its open side (-inf) and no half-width (+inf) through ClickHouse.
		{Time: t0.Add(time.Minute), Host: "b1", Kind: "envelope", OffsetMs: -4, UncertaintyMs: math.Inf(1), LowerMs: math.Inf(-1),
			UpperMs: -3.9, EstimateMs: -5.5},
		{Time: t0, Host: "c1", Kind: "bracketed", OffsetMs: 13, UncertaintyMs: 0.5, LowerMs: 12.5, UpperMs: 13.5, EstimateMs: 13}, // the bucket's last estimate
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestProbeHealth(t *testing.T) {
	r := seeded(t)
	got, err := r.ProbeHealth(ctx(t), query.ProbeQuery{Window: twoMinutes})
	if err != nil {
		t.Fatal(err)
	}
	want := []query.ProbePoint{
		{Time: t0, Broker: "1", Sent: 5, Lost: 1, Duplicates: 1, P50Ms: 20, P99Ms: 20},
		{Time: t0, Broker: "2", Sent: 2, P50Ms: 40, P99Ms: 40},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if _, err := r.ProbeHealth(ctx(t), query.ProbeQuery{Window: twoMinutes, Brokers: []string{"b1"}}); !errors.Is(err, query.ErrBadInput) {
		t.Fatalf("broker filter b1: got %v, want ErrBadInput", err)
	}
}

func TestList(t *testing.T) {
	r := seeded(t)
	since := t0.Add(-time.Hour)
	for _, tc := range []struct {
		q    query.ListQuery
		want []string
	}{
		{query.ListQuery{Kind: query.ListTopics, Since: since}, []string{"archive", "orders", "payments"}},
		{query.ListQuery{Kind: query.ListGroups, Since: since}, []string{"billing", "idle-group"}},
		// rollup hosts (producers for ingest, consumers otherwise) and clock-offset hosts
		{query.ListQuery{Kind: query.ListHosts, Since: since}, []string{"b1", "c1", "c2", "p1", "p2"}},
		// narrowed by topic: clock-offset hosts know no topic
		{query.ListQuery{Kind: query.ListHosts, Since: since, Filter: query.Filter{Topics: []string{"payments"}}}, []string{"c2", "p2"}},
		{query.ListQuery{Kind: query.ListTopics, Since: since, Filter: query.Filter{Groups: []string{"idle-group"}}}, []string{"archive"}},
		// nothing since after the data
		{query.ListQuery{Kind: query.ListTopics, Since: t0.Add(time.Hour)}, []string{}},
	} {
		got, err := r.List(ctx(t), tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v: got %v want %v", tc.q, got, tc.want)
		}
	}
}

func TestSchemaChecks(t *testing.T) {
	_, conn := testenv.ClickHouseDB(t)
	r := query.NewReader(conn)
	if _, err := r.CheckSchema(ctx(t)); !errors.Is(err, store.ErrSchemaMissing) {
		t.Fatalf("empty database: got %v, want ErrSchemaMissing", err)
	}
	querytest.SchemaAt(t, conn, store.CurrentSchemaVersion)
	if v, err := r.CheckSchema(ctx(t)); err != nil || v != store.CurrentSchemaVersion {
		t.Fatalf("current schema: got %d %v", v, err)
	}
	// an older Tidemark's database
	querytest.SchemaAt(t, conn, store.CurrentSchemaVersion-1)
	if _, err := r.CheckSchema(ctx(t)); !errors.Is(err, store.ErrSchemaOutdated) {
		t.Fatalf("older schema: got %v", err)
	}
	// a newer Tidemark migrated this database
	querytest.SchemaAt(t, conn, store.CurrentSchemaVersion+1)
	if _, err := r.CheckSchema(ctx(t)); !errors.Is(err, store.ErrSchemaNewer) {
		t.Fatalf("newer schema: got %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	addr := testenv.ClickHouseAddr(t)
	_, err := query.Open(ctx(t), query.Config{Addr: []string{addr}, Database: "default", User: "default", Password: "wrong"})
	if !errors.Is(err, query.ErrAuth) {
		t.Fatalf("wrong password: got %v, want ErrAuth", err)
	}
	// a port on loopback nothing listens on
	_, err = query.Open(ctx(t), query.Config{Addr: []string{"127.0.0.1:1"}, Database: "default", DialTimeout: time.Second})
	if !errors.Is(err, query.ErrUnreachable) {
		t.Fatalf("unreachable: got %v, want ErrUnreachable", err)
	}
	_, err = query.Open(ctx(t), query.Config{Addr: []string{addr}, Database: "no_such_db_tidemark"})
	if !errors.Is(err, store.ErrSchemaMissing) {
		t.Fatalf("missing database: got %v, want ErrSchemaMissing", err)
	}
}

// TestClusterFilter: every query narrows by the cluster column. The fixture's lag snapshots are cluster "c"; its
// latency, probe and clock rows name none, so they read as the column's default, "default".
func TestClusterFilter(t *testing.T) {
	r := seeded(t)
	lag := func(clusters ...string) int {
		t.Helper()
		got, err := r.ConsumerLag(ctx(t), query.LagQuery{Window: twoMinutes, GroupBy: query.DimGroup, Filter: query.Filter{Clusters: clusters}})
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	if all, c, other := lag(), lag("c"), lag("elsewhere"); all != 2 || c != 2 || other != 0 {
		t.Errorf("lag points: all %d, cluster c %d, another cluster %d; want 2, 2, 0", all, c, other)
	}
	for _, tier := range []query.Source{query.SourceRaw, query.SourceRollup} {
		count := func(clusters ...string) uint64 {
			t.Helper()
			res, err := r.StagePercentiles(ctx(t), query.PercentileQuery{Window: twoMinutes, Stage: query.StageE2E,
				Levels: []float64{0.5}, Source: tier, Filter: query.Filter{Clusters: clusters}})
			if err != nil {
				t.Fatal(err)
			}
			var n uint64
			for _, p := range res.Points {
				n += p.Count
			}
			return n
		}
		if all, def, c := count(), count("default"), count("c"); all == 0 || def != all || c != 0 {
			t.Errorf("%s e2e samples: all %d, cluster default %d, cluster c %d; want default = all > 0 and none in c", tier, all, def, c)
		}
	}
	for _, cl := range []struct {
		clusters []string
		some     bool
	}{{nil, true}, {[]string{"default"}, true}, {[]string{"c"}, false}} {
		probes, err := r.ProbeHealth(ctx(t), query.ProbeQuery{Window: twoMinutes, Clusters: cl.clusters})
		if err != nil || (len(probes) > 0) != cl.some {
			t.Errorf("probe health of clusters %v: %v, %d points", cl.clusters, err, len(probes))
		}
		clocks, err := r.ClockOffsets(ctx(t), query.ClockOffsetQuery{Window: twoMinutes, Clusters: cl.clusters})
		if err != nil || (len(clocks) > 0) != cl.some {
			t.Errorf("clock offsets of clusters %v: %v, %d points", cl.clusters, err, len(clocks))
		}
	}
}
