package plugin

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/store/query"
)

func TestParseQuery(t *testing.T) {
	for _, tc := range []struct {
		name      string
		json      string
		queryType string
		want      ParsedQuery
		err       string
	}{
		{
			name: "defaults",
			json: `{"queryType":"stage_percentiles"}`,
			want: ParsedQuery{Type: QueryStagePercentiles, Stage: query.StageE2E, Levels: []float64{0.5, 0.99},
				GroupBy: query.DimNone, ThresholdMs: 500, Objective: 0.999, Limit: 20},
		},
		{
			// Grafana sets DataQuery.QueryType from the same JSON field; a query saved without it in JSON still works
			name: "type from the DataQuery", json: `{}`, queryType: "consumer_lag",
			want: ParsedQuery{Type: QueryConsumerLag, Stage: query.StageE2E, Levels: []float64{0.5, 0.99},
				GroupBy: query.DimNone, ThresholdMs: 500, Objective: 0.999, Limit: 20},
		},
		{
			name: "multi-value variable filters split on commas; All means no filter",
			json: `{"queryType":"slo","topic":"orders, payments","group":"$__all","host":"h1","groupBy":"topic",` +
				`"sloThresholdMs":250,"sloObjective":0.99,"includeReplays":true,"stage":"append_receive","percentiles":[0.9],"limit":5}`,
			want: ParsedQuery{Type: QuerySLO, Filter: query.Filter{Topics: []string{"orders", "payments"}, Hosts: []string{"h1"}},
				Stage: query.StageAppendReceive, Levels: []float64{0.9}, GroupBy: query.DimTopic, ThresholdMs: 250,
				Objective: 0.99, Limit: 5, IncludeReplays: true},
		},
		{
			name: "tier pinned to minute",
			json: `{"queryType":"stage_percentiles","tier":"minute"}`,
			want: ParsedQuery{Type: QueryStagePercentiles, Stage: query.StageE2E, Levels: []float64{0.5, 0.99},
				GroupBy: query.DimNone, ThresholdMs: 500, Objective: 0.999, Limit: 20, Source: query.SourceRollup},
		},
		{name: "unknown tier", json: `{"queryType":"stage_percentiles","tier":"day"}`,
			err: `unknown tier "day": choose auto, raw, minute or hour`},
		{name: "a rollup tier with replays", json: `{"queryType":"stage_percentiles","tier":"hour","includeReplays":true}`,
			err: `tier hour holds live samples only: a query including replays reads raw rows (tier auto or raw)`},
		{name: "unknown type", json: `{"queryType":"lag_forecast"}`,
			err: `unknown query type "lag_forecast": choose one of stage_percentiles, e2e_distribution, consumer_lag, slo, slowest_messages, clock_offsets, probe_health`},
		{name: "no type", json: `{}`,
			err: `unknown query type "": choose one of stage_percentiles, e2e_distribution, consumer_lag, slo, slowest_messages, clock_offsets, probe_health`},
		{name: "malformed filter", json: `{"queryType":"slo","topic":"orders,,payments"}`,
			err: `topic filter "orders,,payments" is malformed: an empty name between commas`},
		{name: "not a topic name", json: `{"queryType":"slo","topic":"orders; DROP TABLE x"}`,
			err: `topic filter "orders; DROP TABLE x" is not a Kafka topic name (letters, digits, '.', '_', '-')`},
		{
			// an alert rule has no dashboard variables: say so rather than match nothing
			name: "unresolved variable", json: `{"queryType":"consumer_lag","group":"${group}"}`,
			err: `group filter "${group}" holds the template variable ${group}, which was not replaced: alert rules and Explore have no dashboard variables, so write the group name`,
		},
		// 100,001 names came back as ClickHouse's "Max query size exceeded" (a 502) before the bound
		{name: "too many filter names", json: `{"queryType":"consumer_lag","group":"` + strings.Repeat("g,", 100000) + `g"}`,
			err: `group filter has 100001 names: at most 1000 per query; filter by fewer or use All`},
		{name: "filter names too long in total", json: `{"queryType":"slo","host":"` + strings.Repeat(strings.Repeat("h", 200)+",", 200) + `h"}`,
			err: `host filter names total 40001 bytes: at most 32768 per query; filter by fewer or use All`},
		{name: "control character", json: `{"queryType":"slo","host":"a\u0000b"}`, err: `host filter "a\x00b" holds a control character`},
		{name: "unknown stage", json: `{"queryType":"stage_percentiles","stage":"commit"}`,
			err: `unknown stage "commit": choose one of produce_append, append_receive, receive_process, e2e`},
		{name: "percentile as percent", json: `{"queryType":"stage_percentiles","percentiles":[99]}`,
			err: `percentile 99 is outside (0, 1): write 0.99 for p99`},
		// percentiles are rounded to 3 decimals of a percent, so a field's name is what the user typed
		{name: "percentiles rounded", json: `{"queryType":"stage_percentiles","percentiles":[0.07,0.29,0.999,0.9999,0.123456],"fields":["p7","p29","p12.346"]}`,
			want: ParsedQuery{Type: QueryStagePercentiles, Stage: query.StageE2E, Levels: []float64{0.07, 0.29, 0.999, 0.9999, 0.12346},
				GroupBy: query.DimNone, ThresholdMs: 500, Objective: 0.999, Limit: 20, Fields: []string{"p7", "p29", "p12.346"}}},
		// the bounds themselves are accepted
		{name: "percentiles at the bounds", json: `{"queryType":"stage_percentiles","percentiles":[0.00001,0.99999]}`,
			want: ParsedQuery{Type: QueryStagePercentiles, Stage: query.StageE2E, Levels: []float64{0.00001, 0.99999},
				GroupBy: query.DimNone, ThresholdMs: 500, Objective: 0.999, Limit: 20}},
		// two levels would make two fields of one name
		{name: "duplicate percentile", json: `{"queryType":"stage_percentiles","percentiles":[0.5,0.5]}`,
			err: `percentiles 0.5 and 0.5 are both p50 (percentiles keep 3 decimals of a percent): ask for each once`},
		{name: "percentiles equal after rounding", json: `{"queryType":"stage_percentiles","percentiles":[0.99,0.990001]}`,
			err: `percentiles 0.99 and 0.990001 are both p99 (percentiles keep 3 decimals of a percent): ask for each once`},
		// the smallest subnormal: 326 characters in the SQL, a ClickHouse syntax error (a 502) before the bound
		{name: "subnormal percentile", json: `{"queryType":"stage_percentiles","percentiles":[5e-324]}`,
			err: `percentile 5e-324 is outside 1e-05 to 0.99999 (p0.001 to p99.999)`},
		{name: "percentile rounding to p100", json: `{"queryType":"stage_percentiles","percentiles":[0.999996]}`,
			err: `percentile 0.999996 is outside 1e-05 to 0.99999 (p0.001 to p99.999)`},
		{name: "lag by host", json: `{"queryType":"consumer_lag","groupBy":"host"}`,
			err: `consumer lag cannot be grouped by host (lag belongs to a group and topic): choose none, group, topic, group_type or subtopology`},
		// Kafka 4's group types: consumer lag of share and streams groups, per streams subtopology
		{name: "lag by subtopology of share and streams groups", json: `{"queryType":"consumer_lag","groupType":"share, streams","groupBy":"subtopology"}`,
			want: ParsedQuery{Type: QueryConsumerLag, Filter: query.Filter{GroupTypes: []string{"share", "streams"}}, Stage: query.StageE2E,
				Levels: []float64{0.5, 0.99}, GroupBy: query.DimSubtopology, ThresholdMs: 500, Objective: 0.999, Limit: 20}},
		{name: "unknown group type", json: `{"queryType":"consumer_lag","groupType":"dynamic"}`,
			err: `unknown group type "dynamic": choose one of classic, consumer, share, streams`},
		// latency rows carry no group type: only lag can be split by it
		{name: "latency by group type", json: `{"queryType":"stage_percentiles","groupBy":"group_type"}`,
			err: `only consumer lag can be grouped by group_type (latency rows carry no group type): choose none, topic, group or host`},
		{name: "objective as percent", json: `{"queryType":"slo","sloObjective":99.9}`,
			err: `SLO objective 99.9 is outside (0, 1): write 0.999 for 99.9%`},
		{name: "zero threshold", json: `{"queryType":"slo","sloThresholdMs":0}`,
			err: `SLO threshold 0 ms must be a positive number of milliseconds`},
		// bound as cast(5e-324, 'Float64'), which ClickHouse 18.16 cannot parse
		{name: "subnormal threshold", json: `{"queryType":"slo","sloThresholdMs":5e-324}`,
			err: `SLO threshold 5e-324 ms is outside 0.001 to 6.048e+08 ms (a microsecond to a week)`},
		{name: "threshold over a week", json: `{"queryType":"slo","sloThresholdMs":1e9}`,
			err: `SLO threshold 1e+09 ms is outside 0.001 to 6.048e+08 ms (a microsecond to a week)`},
		{name: "limit too large", json: `{"queryType":"slowest_messages","limit":5000}`, err: `limit 5000 must be from 1 to 1000`},
		{
			// an alert rule keeps the one number its threshold is about
			name: "fields", json: `{"queryType":"slo","fields":["burn_rate"]}`,
			want: ParsedQuery{Type: QuerySLO, Stage: query.StageE2E, Levels: []float64{0.5, 0.99}, GroupBy: query.DimNone,
				ThresholdMs: 500, Objective: 0.999, Limit: 20, Fields: []string{"burn_rate"}},
		},
		{name: "field the type does not have", json: `{"queryType":"consumer_lag","fields":["burn_rate"]}`,
			err: `consumer_lag has no field "burn_rate": choose from lag, time_lag, expired, partitions`},
		// percentile fields are named after the levels asked for
		{name: "percentile field not asked for", json: `{"queryType":"stage_percentiles","percentiles":[0.5],"fields":["p99"]}`,
			err: `stage_percentiles has no field "p99": choose from p50, p50_lower, p50_upper, samples, unbounded`},
		{name: "fields on a table", json: `{"queryType":"slowest_messages","fields":["latency"]}`,
			err: `slowest_messages has no fields to choose: remove "fields"`},
		{name: "wrong JSON type", json: `{"queryType":"slo","limit":"many"}`,
			err: `the query is not valid JSON for a Tidemark query: json: cannot unmarshal string into Go struct field Query.limit of type int`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseQuery([]byte(tc.json), tc.queryType)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("got error %v\nwant %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func FuzzParseQuery(f *testing.F) {
	f.Add([]byte(`{"queryType":"slo","topic":"a,b","percentiles":[0.5]}`), "")
	f.Add([]byte(`{"queryType":"stage_percentiles","group":"${g}"}`), "slo")
	f.Add([]byte(`{"queryType":"stage_percentiles","percentiles":[0.07,0.29,5e-324]}`), "")
	f.Add([]byte(`{"queryType":"slo","sloThresholdMs":5e-324}`), "")
	f.Fuzz(func(t *testing.T, raw []byte, qt string) {
		p, err := ParseQuery(raw, qt)
		if err != nil {
			return
		}
		// whatever parses must be something the reader accepts: known type, levels in (0, 1), sane limit
		if !knownType(p.Type) || len(p.Levels) == 0 || p.Limit < 1 || p.Limit > query.MaxSlowest {
			t.Fatalf("accepted %+v", p)
		}
		// levels are in range, already rounded, and name distinct fields; the threshold is in range
		names := map[string]bool{}
		for _, l := range p.Levels {
			if !(l >= query.MinLevel && l <= query.MaxLevel) || roundLevel(l) != l || names[levelName(l)] {
				t.Fatalf("accepted level %v of %v", l, p.Levels)
			}
			names[levelName(l)] = true
		}
		if !(p.ThresholdMs >= query.MinThresholdMs && p.ThresholdMs <= query.MaxThresholdMs) {
			t.Fatalf("accepted threshold %v", p.ThresholdMs)
		}
	})
}
