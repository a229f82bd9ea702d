package plugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/backend/instancemgmt"
	"github.com/grafana/grafana-plugin-sdk-go/data"
	"github.com/grafana/grafana-plugin-sdk-go/experimental/datasourcetest"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/store/query/querytest"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/plugin/pkg/plugin"
)

var (
	t0  = querytest.T0
	uid atomic.Int64
)

// The backend runs once per test binary as Grafana would run it, a gRPC plugin server (the SDK registers its
// metrics globally, so a second server in one process would panic); each test is its own datasource instance, told
// apart by the settings' UID.
var (
	serveOnce sync.Once
	client    *datasourcetest.TestPluginClient
	serveErr  error
)

func served(t *testing.T) *datasourcetest.TestPluginClient {
	t.Helper()
	serveOnce.Do(func() {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			serveErr = err
			return
		}
		addr := l.Addr().String()
		_ = l.Close()
		factory := func(ctx context.Context, s backend.DataSourceInstanceSettings) (instancemgmt.Instance, error) {
			// the resources' 7-day window is measured from a clock just after the fixture
			return plugin.NewDatasourceWithClock(s, func() time.Time { return t0.Add(time.Hour) }), nil
		}
		tp, err := datasourcetest.Manage(factory, datasourcetest.ManageOpts{Address: addr})
		if err != nil {
			serveErr = err
			return
		}
		client = tp.Client
	})
	if serveErr != nil {
		t.Fatalf("start plugin: %v", serveErr)
	}
	return client
}

// settingsFor is a datasource pointing at the test server's database; mod edits the JSON settings.
func settingsFor(t *testing.T, db, password string, mod map[string]any) *backend.DataSourceInstanceSettings {
	js := map[string]any{"address": testenv.ClickHouseAddr(t), "database": db, "tracingDatasourceUid": "tempo",
		"traceUrl": "http://127.0.0.1:16686/trace/${__value.raw}"}
	for k, v := range mod {
		js[k] = v
	}
	raw, _ := json.Marshal(js)
	// Grafana keeps one instance per datasource until its settings' Updated time changes; a fresh UID per settings
	// value gives every variant its own instance.
	return &backend.DataSourceInstanceSettings{
		ID: 1, UID: fmt.Sprintf("tm-%s-%d", db, uid.Add(1)), Name: "Tidemark", JSONData: raw, Updated: time.Now(),
		DecryptedSecureJSONData: map[string]string{"password": password},
	}
}

func pctx(s *backend.DataSourceInstanceSettings) backend.PluginContext {
	return backend.PluginContext{OrgID: 1, PluginID: plugin.ID, DataSourceInstanceSettings: s}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func seeded(t *testing.T) (*datasourcetest.TestPluginClient, *backend.DataSourceInstanceSettings) {
	db, conn := testenv.ClickHouseDB(t)
	querytest.Schema(t, db)
	querytest.SeedFixture(t, conn)
	return served(t), settingsFor(t, db, "", nil)
}

// dq is a DataQuery over the fixture's two minutes in one-minute buckets.
func dq(refID, js string) backend.DataQuery {
	return backend.DataQuery{RefID: refID, JSON: json.RawMessage(js), Interval: time.Minute, MaxDataPoints: 1000,
		TimeRange: backend.TimeRange{From: t0, To: t0.Add(2 * time.Minute)}}
}

func queryData(t *testing.T, c *datasourcetest.TestPluginClient, s *backend.DataSourceInstanceSettings, qs ...backend.DataQuery) *backend.QueryDataResponse {
	t.Helper()
	resp, err := c.QueryData(ctx(t), &backend.QueryDataRequest{PluginContext: pctx(s), Queries: qs})
	if err != nil {
		t.Fatalf("QueryData over gRPC: %v", err)
	}
	return resp
}

// series renders frames as "name{labels} field=v1,v2" lines, which compare exactly and read well in a diff.
func series(t *testing.T, r backend.DataResponse) []string {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("response error: %v", r.Error)
	}
	var out []string
	for _, f := range r.Frames {
		for _, fld := range f.Fields {
			if fld.Type() == data.FieldTypeTime {
				continue
			}
			var vals []string
			for i := 0; i < fld.Len(); i++ {
				// ten significant digits: exact for the fixture's values, blind to float rounding in the last bits
				switch v := fld.At(i).(type) {
				case float64:
					vals = append(vals, fmt.Sprintf("%.10g", v))
				case *float64: // a nullable field: an interval's open side
					if v == nil {
						vals = append(vals, "null")
					} else {
						vals = append(vals, fmt.Sprintf("%.10g", *v))
					}
				default:
					vals = append(vals, fmt.Sprint(fld.At(i)))
				}
			}
			out = append(out, fmt.Sprintf("%s%s %s=%s", f.Name, labelString(fld.Labels), fld.Name, strings.Join(vals, ",")))
		}
	}
	return out
}

func labelString(l data.Labels) string {
	if len(l) == 0 {
		return ""
	}
	return "{" + l.String() + "}"
}

func TestQueryDataOverGRPC(t *testing.T) {
	c, s := seeded(t)
	resp := queryData(t, c, s,
		dq("P", `{"queryType":"stage_percentiles","stage":"e2e","percentiles":[0.5,0.99],"groupBy":"topic"}`),
		dq("L", `{"queryType":"consumer_lag","groupBy":"group"}`),
		dq("S", `{"queryType":"slo","sloThresholdMs":500,"sloObjective":0.9}`),
		dq("C", `{"queryType":"clock_offsets","host":"c1"}`),
		dq("E", `{"queryType":"clock_offsets","host":"b1"}`),
		dq("H", `{"queryType":"probe_health"}`),
		dq("D", `{"queryType":"e2e_distribution","topic":"orders","groupBy":"none","stage":"receive_process"}`),
		dq("F", `{"queryType":"slo","sloThresholdMs":500,"sloObjective":0.9,"fields":["burn_rate"]}`),
	)
	for _, tc := range []struct {
		ref  string
		want []string
	}{
		// buckets T0 and T0+1m; the interval of one minute selects the rollups, which agree with raw rows here. The
		// fixture's intervals are exact, so each band is its estimate and no sample is unbounded.
		{"P", []string{
			"stage_percentiles{stage=e2e, topic=orders} p50=100,300",
			"stage_percentiles{stage=e2e, topic=orders} p99=100,300",
			"stage_percentiles{stage=e2e, topic=orders} p50_lower=100,300",
			"stage_percentiles{stage=e2e, topic=orders} p50_upper=100,300",
			"stage_percentiles{stage=e2e, topic=orders} p99_lower=100,300",
			"stage_percentiles{stage=e2e, topic=orders} p99_upper=100,300",
			"stage_percentiles{stage=e2e, topic=orders} samples=10,10",
			"stage_percentiles{stage=e2e, topic=orders} unbounded=0,0",
			"stage_percentiles{stage=e2e, topic=payments} p50=1000",
			"stage_percentiles{stage=e2e, topic=payments} p99=1000",
			"stage_percentiles{stage=e2e, topic=payments} p50_lower=1000",
			"stage_percentiles{stage=e2e, topic=payments} p50_upper=1000",
			"stage_percentiles{stage=e2e, topic=payments} p99_lower=1000",
			"stage_percentiles{stage=e2e, topic=payments} p99_upper=1000",
			"stage_percentiles{stage=e2e, topic=payments} samples=5",
			"stage_percentiles{stage=e2e, topic=payments} unbounded=0",
		}},
		// billing at T0: last snapshot per partition (3 + 4 + 100); time lag is the max, 9 s
		{"L", []string{
			"consumer_lag{group=billing} lag=107", "consumer_lag{group=billing} time_lag=9",
			"consumer_lag{group=billing} expired=50", "consumer_lag{group=billing} partitions=3",
			"consumer_lag{group=idle-group} lag=1", "consumer_lag{group=idle-group} time_lag=60",
			"consumer_lag{group=idle-group} expired=0", "consumer_lag{group=idle-group} partitions=1",
		}},
		// T0: 10 of 15 good → compliance 2/3, burn (5/15)/0.1 = 3.33…, budget 1 − 5/(0.1·15) = −2.33…;
		// T0+1m: 10 of 10 good → burn 0, budget over both buckets 1 − 5/(0.1·25) = −1
		{"S", []string{
			"slo compliance=0.6666666667,1", "slo burn_rate=3.333333333,0",
			"slo error_budget_remaining=-2.333333333,-1", "slo good=10,10", "slo total=15,10",
			"slo compliance_min=0.6666666667,1", "slo compliance_max=0.6666666667,1", "slo unbounded=0,0",
		}},
		// an alert rule's query keeps only the number its threshold is about
		{"F", []string{"slo burn_rate=3.333333333,0"}},
		// c1's last bracketed estimate in the bucket: 13 ± 0.5, an interval closed on both sides
		{"C", []string{
			"clock_offsets{host=c1, kind=bracketed} offset=13", "clock_offsets{host=c1, kind=bracketed} estimate=13",
			"clock_offsets{host=c1, kind=bracketed} lower=12.5", "clock_offsets{host=c1, kind=bracketed} upper=13.5",
			"clock_offsets{host=c1, kind=bracketed} uncertainty=0.5",
		}},
		// b1's envelope bounds it from above only (at most -3.9 ms): the lower bound and the half-width are null, not a
		// number, and the estimate is the bound moved by the probe path's 1.5 ms toward the open side
		{"E", []string{
			"clock_offsets{host=b1, kind=envelope} offset=-4", "clock_offsets{host=b1, kind=envelope} estimate=-5.5",
			"clock_offsets{host=b1, kind=envelope} lower=null", "clock_offsets{host=b1, kind=envelope} upper=-3.9",
			"clock_offsets{host=b1, kind=envelope} uncertainty=null",
		}},
		{"H", []string{
			"probe_health{broker=1} sent=5", "probe_health{broker=1} lost=1", "probe_health{broker=1} loss_ratio=0.2",
			"probe_health{broker=1} duplicates=1", "probe_health{broker=1} p50=20", "probe_health{broker=1} p99=20",
			"probe_health{broker=2} sent=2", "probe_health{broker=2} lost=0", "probe_health{broker=2} loss_ratio=0",
			"probe_health{broker=2} duplicates=0", "probe_health{broker=2} p50=40", "probe_health{broker=2} p99=40",
		}},
	} {
		if got := series(t, resp.Responses[tc.ref]); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.ref, got, tc.want)
		}
	}
	// processing of orders: 12 samples at 60 ms (T0, invalid-e2e rows included) and 10 at 200 ms (T0+1m)
	d := resp.Responses["D"]
	if d.Error != nil || len(d.Frames) != 1 {
		t.Fatalf("distribution: %v %d frames", d.Error, len(d.Frames))
	}
	lat := d.Frames[0].Fields[1]
	if lat.At(0).(float64) != 60 || lat.At(lat.Len()-1).(float64) != 200 {
		t.Errorf("distribution p5 %v, p99.9 %v; want 60 and 200", lat.At(0), lat.At(lat.Len()-1))
	}
}

// TestConsumerLagByGroupTypeOverGRPC: the lag query of Kafka 4's group types as Grafana sends it (the consumer-group
// dashboard's "Lag by subtopology" panel and a group-type filter): lag snapshots of a classic, a KIP-848, a share and
// a streams group are summed alike, split by group type, and a streams group's lag per subtopology while the other
// groups keep one series each; an unknown type is the user's error.
func TestConsumerLagByGroupTypeOverGRPC(t *testing.T) {
	db, conn := testenv.ClickHouseDB(t)
	querytest.Schema(t, db)
	at := t0.Add(10 * time.Second)
	querytest.InsertLag(t, conn, []querytest.Lag{
		{At: at, Cluster: "c", Group: "billing", Topic: "orders", Lag: 5, TimeLagMs: 1000},
		{At: at, Cluster: "c", Group: "billing-848", Topic: "orders", Lag: 7, TimeLagMs: 2000, GroupType: "consumer"},
		{At: at, Cluster: "c", Group: "workers", Topic: "jobs", Lag: 30, TimeLagMs: 60000, GroupType: "share"},
		{At: at, Cluster: "c", Group: "app", Topic: "clicks", Lag: 4, TimeLagMs: 500, GroupType: "streams", Subtopology: "0"},
		{At: at, Cluster: "c", Group: "app", Topic: "app-count-repartition", Lag: 2, TimeLagMs: 800, GroupType: "streams", Subtopology: "1"},
	})
	c, s := served(t), settingsFor(t, db, "", nil)
	resp := queryData(t, c, s,
		dq("T", `{"queryType":"consumer_lag","groupBy":"group_type","fields":["lag"]}`),
		dq("S", `{"queryType":"consumer_lag","groupType":"streams,share","groupBy":"subtopology","fields":["lag","time_lag"]}`),
		dq("X", `{"queryType":"consumer_lag","groupType":"dynamic"}`),
	)
	for ref, want := range map[string][]string{
		"T": {"consumer_lag{group_type=classic} lag=5", "consumer_lag{group_type=consumer} lag=7",
			"consumer_lag{group_type=share} lag=30", "consumer_lag{group_type=streams} lag=6"},
		"S": {"consumer_lag{subtopology=app/0} lag=4", "consumer_lag{subtopology=app/0} time_lag=0.5",
			"consumer_lag{subtopology=app/1} lag=2", "consumer_lag{subtopology=app/1} time_lag=0.8",
			"consumer_lag{subtopology=workers} lag=30", "consumer_lag{subtopology=workers} time_lag=60"},
	} {
		if got := series(t, resp.Responses[ref]); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\ngot  %q\nwant %q", ref, got, want)
		}
	}
	x := resp.Responses["X"]
	if want := `unknown group type "dynamic": choose one of classic, consumer, share, streams`; x.Error == nil ||
		x.Error.Error() != want || x.ErrorSource != backend.ErrorSourceDownstream {
		t.Errorf("unknown group type: %v (%s), want the downstream error %q", x.Error, x.ErrorSource, want)
	}
}

func TestRawAndRollupChosenByRange(t *testing.T) {
	c, s := seeded(t)
	short := dq("A", `{"queryType":"stage_percentiles","groupBy":"host","stage":"produce_append","percentiles":[0.5]}`)
	short.Interval = 30 * time.Second // under a minute over a short range: raw rows
	long := dq("B", `{"queryType":"stage_percentiles","groupBy":"host","stage":"produce_append","percentiles":[0.5]}`)
	long.TimeRange = backend.TimeRange{From: t0.Add(-7 * 24 * time.Hour), To: t0.Add(2 * time.Minute)}
	long.Interval, long.MaxDataPoints = 10*time.Second, 1 // one bucket over 7 days: hour or wider, the hourly rollups
	resp := queryData(t, c, s, short, long)
	// 30 s buckets: T0 holds offsets 0..9, T0+30s the two invalid-e2e rows (valid for ingest), T0+60s offsets 10..19
	if got, want := series(t, resp.Responses["A"]), []string{
		"stage_percentiles{host=p1, stage=produce_append} p50=10,10,20",
		"stage_percentiles{host=p1, stage=produce_append} p50_lower=10,10,20", "stage_percentiles{host=p1, stage=produce_append} p50_upper=10,10,20",
		"stage_percentiles{host=p1, stage=produce_append} samples=10,2,10", "stage_percentiles{host=p1, stage=produce_append} unbounded=0,0,0",
		"stage_percentiles{host=p2, stage=produce_append} p50=100",
		"stage_percentiles{host=p2, stage=produce_append} p50_lower=100", "stage_percentiles{host=p2, stage=produce_append} p50_upper=100",
		"stage_percentiles{host=p2, stage=produce_append} samples=5", "stage_percentiles{host=p2, stage=produce_append} unbounded=0",
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("short range:\ngot  %q\nwant %q", got, want)
	}
	if src := resp.Responses["A"].Frames[0].Meta.Custom.(map[string]any)["source"]; src != "raw" {
		t.Errorf("short range source %v, want raw", src)
	}
	b := resp.Responses["B"]
	if got := series(t, b); !slices.Contains(got, "stage_percentiles{host=p1, stage=produce_append} samples=22") {
		t.Errorf("long range: %q", got)
	}
	if src := b.Frames[0].Meta.Custom.(map[string]any)["source"]; src != "rollup_1h" {
		t.Errorf("long range source %v, want rollup_1h", src)
	}
}

func TestSlowestMessagesLinkToTraces(t *testing.T) {
	c, s := seeded(t)
	r := queryData(t, c, s, dq("A", `{"queryType":"slowest_messages","stage":"e2e","limit":2}`)).Responses["A"]
	if r.Error != nil || len(r.Frames) != 1 {
		t.Fatalf("%v", r.Error)
	}
	f := r.Frames[0]
	trace, _ := f.FieldByName("trace_id")
	lat, _ := f.FieldByName("latency")
	first, _ := trace.At(0).(*string)
	if f.Rows() != 2 || first == nil || *first != querytest.TraceID("payments", 0) || lat.At(0).(float64) != 1000 {
		t.Fatalf("rows %d first trace %v latency %v", f.Rows(), trace.At(0), lat.At(0))
	}
	// One link into Grafana's tracing datasource, one out to the tracing UI.
	links := trace.Config.Links
	if len(links) != 2 || links[0].Internal == nil || links[0].Internal.DatasourceUID != "tempo" ||
		links[1].URL != "http://127.0.0.1:16686/trace/${__value.raw}" {
		t.Fatalf("trace links %+v", links)
	}
}

func TestBadQueriesAreDownstreamErrors(t *testing.T) {
	c, s := seeded(t)
	resp := queryData(t, c, s,
		dq("A", `{"queryType":"lag_forecast"}`),
		dq("B", `{"queryType":"consumer_lag","topic":"orders,,x"}`),
		dq("C", `{"queryType":"consumer_lag","topic":"orders"}`), // a good query next to bad ones still answers
		// these three reached ClickHouse and came back as 502s (a syntax error, max_query_size) before the bounds
		dq("D", `{"queryType":"stage_percentiles","percentiles":[5e-324]}`),
		dq("E", `{"queryType":"slo","sloThresholdMs":5e-324}`),
		dq("F", `{"queryType":"consumer_lag","group":"`+strings.Repeat("g,", 100000)+`g"}`),
		// an injection attempt in a name that is not a topic is bound, matching nothing, and answered
		dq("G", `{"queryType":"consumer_lag","group":"x') OR 1=1 --","groupBy":"group"}`),
	)
	for ref, want := range map[string]string{
		"A": `unknown query type "lag_forecast": choose one of stage_percentiles, e2e_distribution, consumer_lag, slo, slowest_messages, clock_offsets, probe_health`,
		"B": `topic filter "orders,,x" is malformed: an empty name between commas`,
		"D": `percentile 5e-324 is outside 1e-05 to 0.99999 (p0.001 to p99.999)`,
		"E": `SLO threshold 5e-324 ms is outside 0.001 to 6.048e+08 ms (a microsecond to a week)`,
		"F": `group filter has 100001 names: at most 1000 per query; filter by fewer or use All`,
	} {
		r := resp.Responses[ref]
		if r.Error == nil || r.Error.Error() != want || r.ErrorSource != backend.ErrorSourceDownstream || r.Status != backend.StatusBadRequest {
			t.Errorf("%s: got %v (%s, %d)\nwant %s", ref, r.Error, r.ErrorSource, r.Status, want)
		}
	}
	if got := series(t, resp.Responses["C"]); len(got) != 4 || got[0] != "consumer_lag lag=7" {
		t.Errorf("good query: %q", got)
	}
	if r := resp.Responses["G"]; r.Error != nil || len(r.Frames) != 0 {
		t.Errorf("injection attempt: got %v, %d frames; want no error and no series", r.Error, len(r.Frames))
	}
}

func TestCheckHealth(t *testing.T) {
	db, conn := testenv.ClickHouseDB(t)
	c := served(t)
	check := func(s *backend.DataSourceInstanceSettings) *backend.CheckHealthResult {
		t.Helper()
		res, err := c.CheckHealth(ctx(t), &backend.CheckHealthRequest{PluginContext: pctx(s)})
		if err != nil {
			t.Fatalf("CheckHealth over gRPC: %v", err)
		}
		return res
	}
	addr := testenv.ClickHouseAddr(t)
	for _, tc := range []struct {
		name   string
		s      *backend.DataSourceInstanceSettings
		status backend.HealthStatus
		msg    string
	}{
		{"empty database", settingsFor(t, db, "", nil), backend.HealthStatusError,
			fmt.Sprintf("database %q on %s has no Tidemark schema: run `tidemark migrate` against it, or correct the Database setting", db, addr)},
		{"wrong password", settingsFor(t, db, "not-the-password", nil), backend.HealthStatusError,
			fmt.Sprintf(`ClickHouse at %s refused user "default": check the user and password in the datasource settings`, addr)},
		{"bad address", settingsFor(t, db, "", map[string]any{"address": "clickhouse"}), backend.HealthStatusError,
			`Address "clickhouse": enter host:port, e.g. clickhouse:9000`},
		{"database that does not exist", settingsFor(t, "tm_nothing_here", "", nil), backend.HealthStatusError,
			fmt.Sprintf("database \"tm_nothing_here\" on %s has no Tidemark schema: run `tidemark migrate` against it, or correct the Database setting", addr)},
	} {
		if res := check(tc.s); res.Status != tc.status || res.Message != tc.msg {
			t.Errorf("%s: got %v %q\nwant %v %q", tc.name, res.Status, res.Message, tc.status, tc.msg)
		}
	}
	// unreachable: a loopback port nothing listens on
	res := check(settingsFor(t, db, "", map[string]any{"address": "127.0.0.1:1"}))
	if res.Status != backend.HealthStatusError || !strings.HasPrefix(res.Message, "cannot reach ClickHouse at 127.0.0.1:1 (") ||
		!strings.Contains(res.Message, "connection refused") {
		t.Errorf("unreachable: %q", res.Message)
	}
	// an older Tidemark's schema
	querytest.SchemaAt(t, conn, store.CurrentSchemaVersion-1)
	res = check(settingsFor(t, db, "", map[string]any{"queryTimeoutSeconds": 7}))
	want := fmt.Sprintf("database %q was migrated by an older Tidemark (schema version %d, this build needs %d): run `tidemark migrate` to upgrade it",
		db, store.CurrentSchemaVersion-1, store.CurrentSchemaVersion)
	if res.Status != backend.HealthStatusError || res.Message != want {
		t.Errorf("older schema: got %q\nwant %q", res.Message, want)
	}
	// migrated: healthy
	querytest.SchemaAt(t, conn, store.CurrentSchemaVersion)
	res = check(settingsFor(t, db, "", map[string]any{"queryTimeoutSeconds": 8}))
	want = fmt.Sprintf("Connected to ClickHouse 18.16.1 at %s; database %q has Tidemark schema version %d", addr, db, store.CurrentSchemaVersion)
	if res.Status != backend.HealthStatusOk || res.Message != want {
		t.Errorf("healthy: got %v %q\nwant %q", res.Status, res.Message, want)
	}
}

func TestQueryAgainstOlderSchema(t *testing.T) {
	db, conn := testenv.ClickHouseDB(t)
	querytest.SchemaAt(t, conn, store.CurrentSchemaVersion-1)
	c := served(t)
	r := queryData(t, c, settingsFor(t, db, "", nil), dq("A", `{"queryType":"consumer_lag"}`)).Responses["A"]
	if r.Error == nil || !strings.Contains(r.Error.Error(), "was migrated by an older Tidemark") || r.ErrorSource != backend.ErrorSourceDownstream {
		t.Fatalf("got %v (%s)", r.Error, r.ErrorSource)
	}
}

type sender struct{ got *backend.CallResourceResponse }

func (s *sender) Send(r *backend.CallResourceResponse) error { s.got = r; return nil }

func TestResourcesListVariables(t *testing.T) {
	c, s := seeded(t)
	for _, tc := range []struct {
		path, url string
		status    int
		body      string
	}{
		{"topics", "topics", 200, `{"values":["archive","orders","payments"]}`},
		{"groups", "groups?topic=orders", 200, `{"values":["billing"]}`},
		{"hosts", "hosts?topic=payments", 200, `{"values":["c2","p2"]}`},
		{"hosts", "hosts", 200, `{"values":["b1","c1","c2","p1","p2"]}`},
		{"clusters", "clusters", 200, `{"values":["c","default"]}`}, // the fixture's latency rows name no cluster: the column's default
		{"groups", "groups?cluster=c", 200, `{"values":["billing","idle-group"]}`},
		{"groups", "groups?cluster=elsewhere", 200, `{"values":[]}`},
		{"brokers", "brokers", 404, `{"error":"unknown resource brokers: use topics, groups, hosts or clusters"}`},
		{"groups", "groups?topic=a%20b", 400, `{"error":"topic filter \"a b\" is not a Kafka topic name (letters, digits, '.', '_', '-')"}`},
	} {
		var snd sender
		err := c.CallResource(ctx(t), &backend.CallResourceRequest{PluginContext: pctx(s), Path: tc.path, Method: "GET", URL: tc.url}, &snd)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if snd.got == nil || snd.got.Status != tc.status || string(snd.got.Body) != tc.body {
			t.Errorf("%s: got %+v", tc.url, snd.got)
			if snd.got != nil {
				t.Logf("body %s", snd.got.Body)
			}
		}
	}
}

func TestQueryWithBadConnectionSettings(t *testing.T) {
	db, _ := testenv.ClickHouseDB(t)
	c := served(t)
	for _, tc := range []struct {
		name     string
		s        *backend.DataSourceInstanceSettings
		status   backend.Status
		contains string
	}{
		{"wrong password", settingsFor(t, db, "nope", nil), backend.StatusBadRequest, `refused user "default": check the user and password`},
		{"unreachable", settingsFor(t, db, "", map[string]any{"address": "127.0.0.1:1"}), backend.StatusBadGateway,
			"cannot reach ClickHouse at 127.0.0.1:1 ("},
		{"bad settings", settingsFor(t, db, "", map[string]any{"database": "1st"}), backend.StatusBadRequest,
			`datasource settings: Database "1st": use letters, digits and '_', not starting with a digit`},
	} {
		r := queryData(t, c, tc.s, dq("A", `{"queryType":"consumer_lag"}`)).Responses["A"]
		if r.Error == nil || r.Status != tc.status || r.ErrorSource != backend.ErrorSourceDownstream ||
			!strings.Contains(r.Error.Error(), tc.contains) {
			t.Errorf("%s: got %v (%d, %s), want %d containing %q", tc.name, r.Error, r.Status, r.ErrorSource, tc.status, tc.contains)
		}
	}
}

// TestTimeRangesPastDateTimeAreUserErrors, on the real server: ClickHouse's DateTime is a
// UInt32 of seconds, and a bound past it does not fail there, it wraps: [2107, 2200) would answer the fixture's
// data (2026) and [1970, 2262) nothing, without an error. A range reaching outside 1970-01-01 … 2106-02-07 is
// the user's error, saying which times the columns hold; the whole of that span still answers.
func TestTimeRangesPastDateTimeAreUserErrors(t *testing.T) {
	c, s := seeded(t)
	at := func(v string) time.Time { tm, _ := time.Parse(time.RFC3339, v); return tm }
	over := func(ref, from, to string) backend.DataQuery {
		q := dq(ref, `{"queryType":"consumer_lag","groupBy":"group"}`)
		q.TimeRange = backend.TimeRange{From: at(from), To: at(to)}
		return q
	}
	resp := queryData(t, c, s,
		over("A", "2107-01-01T00:00:00Z", "2200-01-01T00:00:00Z"),
		over("B", "1970-01-01T00:00:00Z", "2262-01-01T00:00:00Z"),
		over("C", "1960-01-01T00:00:00Z", "2026-01-01T00:00:00Z"),
		over("D", "1970-01-01T00:00:00Z", "2106-02-07T06:28:15Z"), // all DateTime holds (the end is exclusive)
	)
	for ref, want := range map[string]string{
		"A": "time range 2107-01-01T00:00:00Z..2200-01-01T00:00:00Z reaches outside the times ClickHouse's DateTime columns hold (1970-01-01T00:00:00Z to 2106-02-07T06:28:15Z): choose a range within them",
		"B": "time range 1970-01-01T00:00:00Z..2262-01-01T00:00:00Z reaches outside the times ClickHouse's DateTime columns hold (1970-01-01T00:00:00Z to 2106-02-07T06:28:15Z): choose a range within them",
		"C": "time range 1960-01-01T00:00:00Z..2026-01-01T00:00:00Z reaches outside the times ClickHouse's DateTime columns hold (1970-01-01T00:00:00Z to 2106-02-07T06:28:15Z): choose a range within them",
	} {
		r := resp.Responses[ref]
		if r.Error == nil || r.Error.Error() != want || r.ErrorSource != backend.ErrorSourceDownstream || r.Status != backend.StatusBadRequest {
			t.Errorf("%s: got %v (%s, %d), %d frames\nwant the user error %s", ref, r.Error, r.ErrorSource, r.Status, len(r.Frames), want)
		}
	}
	if got := series(t, resp.Responses["D"]); len(got) == 0 || !strings.HasPrefix(got[0], "consumer_lag{group=billing} lag=") {
		t.Errorf("the whole DateTime span: %q, want the fixture's lag", got)
	}
}
