package prometheus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/promexport"
	"github.com/tidemark/tidemark/lagexporter/timeline"
)

// These tests feed the alert rules what the real lag exporter exposes: a timeline (docs/lag-timeline.md) is replayed
// through lagexporter.Eval, the same poll-loop code as a live cluster, every poll's snapshot is rendered by the real
// Collector, and the series become the input of a generated promtool test, one poll per minute. So the rules are
// checked against the exporter's actual names, labels and values, not against hand-written series.

var tlStart = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// obs is one timeline observation line (the fields these scenarios use).
type obs struct {
	Time   time.Time  `json:"time"`
	Topics []tlTopic  `json:"topics"`
	Groups []tlGroup  `json:"groups"`
	Log    []tlRecord `json:"log,omitempty"`
}

type tlTopic struct {
	Topic      string        `json:"topic"`
	ID         string        `json:"id"`
	Partitions []tlPartition `json:"partitions"`
	Retention  *tlRetention  `json:"retention,omitempty"`
}

type tlRetention struct {
	CleanupPolicy  string `json:"cleanup_policy"`
	RetentionMs    int64  `json:"retention_ms"`
	RetentionBytes int64  `json:"retention_bytes"`
}

type tlPartition struct {
	Partition  int32 `json:"partition"`
	Leader     int32 `json:"leader"`
	LogStart   int64 `json:"log_start"`
	HW         int64 `json:"high_watermark"`
	LastStable int64 `json:"last_stable,omitempty"`
}

type tlGroup struct {
	Group   string     `json:"group"`
	State   string     `json:"state"`
	Members []tlMember `json:"members,omitempty"`
	Offsets []tlOffset `json:"offsets"`
}

type tlMember struct {
	MemberID   string             `json:"member_id"`
	ClientID   string             `json:"client_id"`
	Host       string             `json:"host"`
	Assignment map[string][]int32 `json:"assignment"`
}

type tlOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

type tlRecord struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	From      int64  `json:"from"`
	To        int64  `json:"to"`
	Timestamp string `json:"timestamp,omitempty"`
	StepMs    int64  `json:"step_ms,omitempty"`
	Kind      string `json:"kind,omitempty"`
}

// timelineText renders a config line (may be empty) and observations as a timeline file's text.
func timelineText(t *testing.T, config string, lines []obs) string {
	t.Helper()
	var b strings.Builder
	if config != "" {
		b.WriteString(config + "\n")
	}
	for _, o := range lines {
		j, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// snapSource serves one snapshot with the health of a loop that has just published it.
type snapSource struct {
	s     *lagexporter.Snapshot
	cycle uint64
}

func (f snapSource) Latest() *lagexporter.Snapshot { return f.s }
func (f snapSource) Health() lagexporter.Health {
	return lagexporter.Health{Cycles: f.cycle, Errors: map[lagexporter.ErrorKind]uint64{}, LastDuration: 100 * time.Millisecond,
		LastSuccess: f.s.Time}
}

// exposition replays a timeline and returns, for every series the collector exposed in any poll, its value in each
// poll (absent: missing). Timestamps in seconds are shifted so that the timeline's start is promtool's time 0.
func exposition(t *testing.T, text string) (map[string][]*float64, int) {
	t.Helper()
	tl, err := timeline.Read(strings.NewReader(text), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	cfg := &lagexporter.Config{Cluster: "prod"}
	if err := tl.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	series := map[string][]*float64{}
	step := 0
	err = timeline.Eval(context.Background(), tl, cfg, func(_ int, s *lagexporter.Snapshot) error {
		if want := tlStart.Add(time.Duration(step) * time.Minute); !s.Time.Equal(want) {
			return fmt.Errorf("poll %d at %s, want one poll a minute from %s", step, s.Time, tlStart)
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(promexport.NewCollector(cfg, snapSource{s: s, cycle: uint64(step + 1)}))
		mfs, err := reg.Gather()
		if err != nil {
			return err
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				v := value(mf, m)
				if strings.HasSuffix(mf.GetName(), "_timestamp_seconds") {
					v -= float64(tlStart.Unix())
				}
				key := seriesKey(mf.GetName(), m.GetLabel())
				if series[key] == nil {
					series[key] = make([]*float64, step, step+1)
				}
				for len(series[key]) < step {
					series[key] = append(series[key], nil)
				}
				series[key] = append(series[key], &v)
			}
		}
		step++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return series, step
}

func value(mf *dto.MetricFamily, m *dto.Metric) float64 {
	switch mf.GetType() {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	}
	return m.GetUntyped().GetValue()
}

func seriesKey(name string, labels []*dto.LabelPair) string {
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = l.GetName() + "=" + strconv.Quote(l.GetValue())
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// promtoolValues writes one series' values in promtool's notation: a number per poll, "stale" where the series
// disappeared (as a scrape marks it) and "_" while it stays absent.
func promtoolValues(vs []*float64, steps int) string {
	out := make([]string, steps)
	for i := range steps {
		switch {
		case i < len(vs) && vs[i] != nil:
			out[i] = strconv.FormatFloat(*vs[i], 'g', -1, 64)
		case i > 0 && i-1 < len(vs) && vs[i-1] != nil:
			out[i] = "stale"
		default:
			out[i] = "_"
		}
	}
	return strings.Join(out, " ")
}

// check is one expectation at a poll (minutes from the start): the expression's exact samples ("" for none).
type check struct {
	at   int
	expr string
	want map[string]float64 // series labels → value
}

// runScenario writes the generated promtool test and runs it.
func runScenario(t *testing.T, config string, lines []obs, checks []check) {
	t.Helper()
	runTimeline(t, timelineText(t, config, lines), checks)
}

// runTimeline replays a timeline's text through the exporter and runs the promtool test of checks on its series.
func runTimeline(t *testing.T, text string, checks []check) {
	t.Helper()
	pt := promtool(t)
	series, steps := exposition(t, text)
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "rule_files: [%q]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n", rules)
	keys := make([]string, 0, len(series))
	for k := range series {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "      - series: %s\n        values: %q\n", strconv.Quote(k), promtoolValues(series[k], steps))
	}
	b.WriteString("    promql_expr_test:\n")
	for _, c := range checks {
		fmt.Fprintf(&b, "      - expr: %s\n        eval_time: %dm\n        exp_samples:", strconv.Quote(c.expr), c.at)
		if len(c.want) == 0 {
			b.WriteString(" []\n")
			continue
		}
		b.WriteString("\n")
		for l, v := range c.want {
			fmt.Fprintf(&b, "          - labels: %s\n            value: %v\n", strconv.Quote(l), v)
		}
	}
	file := filepath.Join(t.TempDir(), "scenario.test.yml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := execPromtool(pt, "test", "rules", file)
	if err != nil {
		t.Fatalf("promtool test rules on the exporter's series: %v\n%s\n--- generated test ---\n%s", err, out, b.String())
	}
}

const firing = `ALERTS{alertstate="firing"}`

// alert is the ALERTS series of a firing alert with the given labels (alertname first).
func alert(name, labels string) string {
	return `ALERTS{alertname="` + name + `",alertstate="firing",` + labels + `}`
}

// TestRulesOnExporterReplay (case C30): group g is reset to earliest one minute in and replays a week of records at
// 2000 records/s, so its time lag jumps to 604860 s and drains; nothing may fire for it. Group stuck on another topic
// is really stuck (its member commits nothing while the producer writes 1 record/s): every freshness alert fires.
func TestRulesOnExporterReplay(t *testing.T) {
	const steps = 40
	base := tlStart.Add(-7 * 24 * time.Hour) // record k of orders was produced at base + (k − 1000000) s
	member := func(topic string) []tlMember {
		return []tlMember{{MemberID: "m-" + topic, ClientID: "app", Host: "/10.0.0.1", Assignment: map[string][]int32{topic: {0}}}}
	}
	var lines []obs
	for i := range steps {
		now := tlStart.Add(time.Duration(i) * time.Minute)
		hw := int64(1604800 + 60*i)
		committed := hw // caught up before the reset and again once the replay has passed the boundary
		if i >= 1 {
			committed = min(hw, 1000000+120000*int64(i-1))
		}
		o := obs{Time: now,
			Topics: []tlTopic{
				{Topic: "orders", ID: "o1", Partitions: []tlPartition{{Leader: 1, LogStart: 1000000, HW: hw}}},
				{Topic: "payments", ID: "p1", Partitions: []tlPartition{{Leader: 1, HW: int64(600 + 60*i)}}},
			},
			Groups: []tlGroup{
				{Group: "g", State: "Stable", Members: member("orders"), Offsets: []tlOffset{{Topic: "orders", Offset: committed}}},
				{Group: "stuck", State: "Stable", Members: member("payments"), Offsets: []tlOffset{{Topic: "payments", Offset: 100}}},
			}}
		if i == 0 {
			o.Log = []tlRecord{
				{Topic: "orders", From: 1000000, To: 2000000, Timestamp: base.Format(time.RFC3339), StepMs: 1000},
				// payments record k was produced at start − 600 s + k s: offset 100 waits 500 s at the start.
				{Topic: "payments", From: 0, To: 10000, Timestamp: tlStart.Add(-600 * time.Second).Format(time.RFC3339), StepMs: 1000},
			}
		}
		lines = append(lines, o)
	}
	stuck := `cluster="prod",group="stuck"`
	runScenario(t, "", lines, []check{
		// The exporter does report the replay's time lag: a rule on tidemark_lag_group_seconds would page.
		{at: 39, expr: `max_over_time(tidemark_lag_group_seconds{group="g"}[40m])`,
			want: map[string]float64{`{cluster="prod",group="g"}`: 604860}},
		{at: 3, expr: `tidemark:lag_group_replaying:bool`, want: map[string]float64{`tidemark:lag_group_replaying:bool{cluster="prod",group="g"}`: 1}},
		// Replay over (committed caught up from minute 7): nothing replays, and g's live time lag is 0.
		{at: 20, expr: `tidemark:lag_group_replaying:bool`},
		{at: 20, expr: `tidemark:lag_group_live_seconds:max{group="g"}`,
			want: map[string]float64{`tidemark:lag_group_live_seconds:max{cluster="prod",group="g"}`: 0}},
		// stuck: 500 s behind at the start, 60 s more each minute; STOP once its commit is 5 minutes old.
		{at: 5, expr: firing},
		{at: 12, expr: firing, want: map[string]float64{
			alert("TidemarkConsumerGroupTimeLagHigh", stuck+`,severity="ticket"`):         1,
			alert("TidemarkConsumerGroupStalled", stuck+`,severity="page",status="STOP"`): 1,
		}},
		// 500 + 60·22 = 1820 s > 1800 s at minute 22; the page fires 5 minutes later. g never fires.
		{at: 39, expr: firing, want: map[string]float64{
			alert("TidemarkConsumerGroupTimeLagHigh", stuck+`,severity="ticket"`):         1,
			alert("TidemarkConsumerGroupTimeLagCritical", stuck+`,severity="page"`):       1,
			alert("TidemarkConsumerGroupStalled", stuck+`,severity="page",status="STOP"`): 1,
		}},
	})
}

// TestRulesOnExporterTransactions (case C01 and its druid variant): read_committed groups on transactional topics
// whose consumers have left. g1 and druid-5 consumed everything but the transaction markers: raw lag 1 and 0,
// effective lag 0, so nothing fires for 40 minutes. druid-2 has one real record (offset 4) left: it has a backlog and
// no consumer, its commit is stale, and the record's age grows, so those alerts fire.
func TestRulesOnExporterTransactions(t *testing.T) {
	const steps = 40
	var lines []obs
	for i := range steps {
		o := obs{Time: tlStart.Add(time.Duration(i) * time.Minute),
			Topics: []tlTopic{
				{Topic: "tx-orders", ID: "tx1", Partitions: []tlPartition{{Leader: 1, HW: 6, LastStable: 6}}},
				{Topic: "tx-druid", ID: "tx2", Partitions: []tlPartition{{Leader: 1, HW: 5, LastStable: 5}}},
			},
			Groups: []tlGroup{
				{Group: "g1", State: "Empty", Offsets: []tlOffset{{Topic: "tx-orders", Offset: 5}}},
				{Group: "druid-2", State: "Empty", Offsets: []tlOffset{{Topic: "tx-druid", Offset: 2}}},
				{Group: "druid-5", State: "Empty", Offsets: []tlOffset{{Topic: "tx-druid", Offset: 5}}},
			}}
		if i == 0 {
			at := func(d time.Duration) string { return tlStart.Add(d).Format(time.RFC3339) }
			o.Log = []tlRecord{
				{Topic: "tx-orders", From: 0, To: 5, Timestamp: at(-time.Minute), StepMs: 1000},
				{Topic: "tx-orders", From: 5, To: 6, Kind: "control"},
				{Topic: "tx-druid", From: 0, To: 1, Timestamp: at(-2 * time.Minute)},
				{Topic: "tx-druid", From: 1, To: 2, Kind: "control"},
				{Topic: "tx-druid", From: 2, To: 3, Kind: "aborted", Timestamp: at(-110 * time.Second)},
				{Topic: "tx-druid", From: 3, To: 4, Kind: "control"},
				{Topic: "tx-druid", From: 4, To: 5, Timestamp: at(-30 * time.Second)},
			}
		}
		lines = append(lines, o)
	}
	druid := `cluster="prod",group="druid-2"`
	runScenario(t, `{"config":{"cluster":"prod","groups":[{"match":"g1|druid-.*","isolation":"read_committed"}]}}`, lines, []check{
		// The raw lag a naive rule would alert on is there: 1 for g1, 3 for druid-2.
		{at: 39, expr: `tidemark_lag_partition_raw_offsets`, want: map[string]float64{
			`tidemark_lag_partition_raw_offsets{cluster="prod",group="g1",partition="0",topic="tx-orders"}`:     1,
			`tidemark_lag_partition_raw_offsets{cluster="prod",group="druid-2",partition="0",topic="tx-druid"}`: 3,
		}},
		{at: 39, expr: `tidemark:lag_group_live_offsets:sum`, want: map[string]float64{
			`tidemark:lag_group_live_offsets:sum{cluster="prod",group="g1"}`:      0,
			`tidemark:lag_group_live_offsets:sum{cluster="prod",group="druid-2"}`: 1,
			`tidemark:lag_group_live_offsets:sum{cluster="prod",group="druid-5"}`: 0,
		}},
		// Record 4 was produced 30 s before the start: 30 + 60·39 = 2370 s at minute 39.
		{at: 39, expr: `tidemark:lag_group_live_seconds:max{group="druid-2"}`,
			want: map[string]float64{`tidemark:lag_group_live_seconds:max{cluster="prod",group="druid-2"}`: 2370}},
		// Only druid-2 ever alerts: time lag above 300 s from minute 5 (330 s) and above 1800 s from minute 30 (1830 s),
		// STOP, and no consumer for its backlog.
		{at: 39, expr: firing, want: map[string]float64{
			alert("TidemarkConsumerGroupTimeLagHigh", druid+`,severity="ticket"`):         1,
			alert("TidemarkConsumerGroupTimeLagCritical", druid+`,severity="page"`):       1,
			alert("TidemarkConsumerGroupStalled", druid+`,severity="page",status="STOP"`): 1,
			alert("TidemarkConsumerGroupNoConsumers", druid+`,severity="ticket"`):         1,
		}},
	})
}

// TestRulesOnExporterRewindThenDied: the "rewound and then died" timeline of the lag exporter's own
// tests (lagexporter/timeline/testdata/i01_rewind_then_died.jsonl): group g is reset to earliest at minute 1,
// replays until minute 3, and from minute 4 has no members and commits nothing. Its status is STOP from minute 9
// while it still replays, so TidemarkConsumerGroupStalled pages at minute 14; it has a backlog and no consumers, so
// TidemarkConsumerGroupNoConsumers fires at minute 19. The replay's week-old time lag fires nothing.
func TestRulesOnExporterRewindThenDied(t *testing.T) {
	b, err := os.ReadFile("../../lagexporter/timeline/testdata/i01_rewind_then_died.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	g := `cluster="prod",group="g"`
	runTimeline(t, string(b), []check{
		{at: 3, expr: `tidemark:lag_group_replaying:bool`, want: map[string]float64{`tidemark:lag_group_replaying:bool{` + g + `}`: 1}},
		{at: 3, expr: `tidemark_lag_group_status == 1`, want: map[string]float64{`tidemark_lag_group_status{` + g + `,status="REWIND"}`: 1}},
		{at: 9, expr: `tidemark_lag_group_status == 1`, want: map[string]float64{`tidemark_lag_group_status{` + g + `,status="STOP"}`: 1}},
		{at: 13, expr: firing},
		{at: 14, expr: firing, want: map[string]float64{
			alert("TidemarkConsumerGroupStalled", g+`,severity="page",status="STOP"`): 1,
		}},
		// NoConsumers is pending until minute 18 and fires at minute 19, and still fires at the end.
		{at: 18, expr: firing, want: map[string]float64{
			alert("TidemarkConsumerGroupStalled", g+`,severity="page",status="STOP"`): 1,
		}},
		{at: 19, expr: firing, want: map[string]float64{
			alert("TidemarkConsumerGroupStalled", g+`,severity="page",status="STOP"`): 1,
			alert("TidemarkConsumerGroupNoConsumers", g+`,severity="ticket"`):         1,
		}},
		{at: 24, expr: firing, want: map[string]float64{
			alert("TidemarkConsumerGroupStalled", g+`,severity="page",status="STOP"`): 1,
			alert("TidemarkConsumerGroupNoConsumers", g+`,severity="ticket"`):         1,
		}},
		// still replaying at the end: the replay did not end, the group died
		{at: 24, expr: `tidemark:lag_group_replaying:bool`, want: map[string]float64{`tidemark:lag_group_replaying:bool{` + g + `}`: 1}},
	})
}

// TestRulesOnExporterRetentionRisk: topic ret keeps records 6 hours. Group slow sits on a record
// produced 5 h 10 m before the start: 50 minutes of margin, one less each minute, so TidemarkConsumerGroupRetentionRisk
// pages after 5 minutes; at minute 10 retention deletes up to 100 offsets past its commit. Group fresh is 10 s
// behind. Group replay was reset to earliest at minute 1: its first record is about to be deleted, but it was
// delivered before, so no alert for it.
func TestRulesOnExporterRetentionRisk(t *testing.T) {
	base := tlStart.Add(-6 * time.Hour) // record k of ret was produced at base + k s
	ret := &tlRetention{CleanupPolicy: "delete", RetentionMs: 6 * 3600 * 1000, RetentionBytes: -1}
	var lines []obs
	for i := range 13 {
		hw := int64(21600 + 60*i) // one record a second
		logStart := int64(0)
		if i >= 10 {
			logStart = 3100 // retention deleted 3000..3099, which slow never read
		}
		replay := hw
		if i >= 1 {
			replay = logStart
		}
		o := obs{Time: tlStart.Add(time.Duration(i) * time.Minute),
			Topics: []tlTopic{{Topic: "ret", ID: "r1", Retention: ret, Partitions: []tlPartition{{Leader: 1, LogStart: logStart, HW: hw}}}},
			Groups: []tlGroup{
				{Group: "slow", State: "Empty", Offsets: []tlOffset{{Topic: "ret", Offset: 3000}}},
				{Group: "fresh", State: "Empty", Offsets: []tlOffset{{Topic: "ret", Offset: hw - 10}}},
				{Group: "replay", State: "Empty", Offsets: []tlOffset{{Topic: "ret", Offset: replay}}},
			}}
		if i == 0 {
			o.Log = []tlRecord{{Topic: "ret", From: 0, To: 30000, Timestamp: base.Format(time.RFC3339), StepMs: 1000}}
		}
		lines = append(lines, o)
	}
	slow := `cluster="prod",group="slow",topic="ret"`
	runScenario(t, "", lines, []check{
		// record 3000 is 5 h 10 m old at the start: 3000 s of margin, 2760 s four minutes later
		{at: 4, expr: `tidemark:lag_retention_margin_seconds:min{group="slow"}`,
			want: map[string]float64{`tidemark:lag_retention_margin_seconds:min{` + slow + `}`: 2760}},
		{at: 4, expr: `ALERTS{alertname="TidemarkConsumerGroupRetentionRisk",alertstate="firing"}`},
		{at: 5, expr: `ALERTS{alertname="TidemarkConsumerGroupRetentionRisk",alertstate="firing"}`, want: map[string]float64{
			alert("TidemarkConsumerGroupRetentionRisk", slow+`,severity="page"`): 1,
		}},
		// the replaying group has a margin too, which the topic's minimum leaves out
		{at: 5, expr: `min by (group) (tidemark_lag_partition_retention_margin_seconds{group="replay"}) < 60`,
			want: map[string]float64{`{group="replay"}`: 0}},
		{at: 10, expr: `ALERTS{alertname="TidemarkConsumerGroupUnreadRecordsDeleted",alertstate="firing"}`, want: map[string]float64{
			alert("TidemarkConsumerGroupUnreadRecordsDeleted", slow+`,severity="ticket"`): 1,
		}},
		{at: 10, expr: `tidemark_lag_topic_unread_records_deleted_total{group="slow"}`,
			want: map[string]float64{`tidemark_lag_topic_unread_records_deleted_total{` + slow + `}`: 100}},
	})
}
