package main

import (
	"math"
	"testing"
	"time"
)

// Output of Kafka 4.4's consumer-groups command for two groups without members (one table each), with a group of
// another run and a partition without a commit.
const describeOut = `
Consumer group 'benchlag_ab_g00000' has no active members.

GROUP              TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID
benchlag_ab_g00000 benchlag_ab_t00 0          5               12              7               -               -               -
benchlag_ab_g00000 benchlag_ab_t00 1          12              12              0               -               -               -

Consumer group 'other' has no active members.

GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID
other           x               0          1               2               1               -               -               -

GROUP              TOPIC           PARTITION  LEADER-EPOCH  CURRENT-OFFSET  LOG-END-OFFSET  LAG   CONSUMER-ID     HOST            CLIENT-ID
benchlag_ab_g00001 benchlag_ab_t01 0          0             3               9               6     -               -               -
benchlag_ab_g00001 benchlag_ab_t01 1          0             -               9               -     -               -               -
`

func TestParseConsumerGroups(t *testing.T) {
	rows, err := parseConsumerGroups([]byte(describeOut), "benchlag_ab")
	if err != nil {
		t.Fatal(err)
	}
	want := map[gpKey]truthRow{
		{"benchlag_ab_g00000", "benchlag_ab_t00", 0}: {5, 12, 7},
		{"benchlag_ab_g00000", "benchlag_ab_t00", 1}: {12, 12, 0},
		{"benchlag_ab_g00001", "benchlag_ab_t01", 0}: {3, 9, 6}, // columns found by the header, not by position
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %v, want %v", rows, want)
	}
	for k, w := range want {
		if rows[k] != w {
			t.Errorf("%v: %v, want %v", k, rows[k], w)
		}
	}
	if _, err := parseConsumerGroups([]byte("Error: Executing consumer group command failed\n"), "benchlag"); err == nil {
		t.Error("output without a header: no error")
	}
}

func TestParseJmxTool(t *testing.T) {
	out := "Trying to connect to JMX url: service:jmx:rmi:///jndi/rmi://127.0.0.1:1/jmxrmi\n" +
		`"time","kafka.network:type=RequestMetrics,name=RequestsPerSec,request=ApiVersions,version=5:Count",` +
		`"kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Metadata,version=12:Count",` +
		`"kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Metadata,version=13:Count"` + "\n" +
		"1796460335514,6,2,3\n"
	got, err := parseJmxTool([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if got["ApiVersions"] != 6 || got["Metadata"] != 5 || len(got) != 2 {
		t.Errorf("counts %v, want ApiVersions 6, Metadata 5 (versions summed)", got)
	}
	if _, err := parseJmxTool([]byte("Trying to connect\nerror\n")); err == nil {
		t.Error("output without a header: no error")
	}
	net := requestCounts{"Metadata": 9, "Produce": 100, "ListOffsets": 4, "Fetch": 3, "FetchConsumer": 3}.sub(
		requestCounts{"Metadata": 5, "Produce": 10})
	if len(net) != 3 || net["Metadata"] != 4 || net["ListOffsets"] != 4 || net["Fetch"] != 3 {
		t.Errorf("sub: %v, want Metadata 4, ListOffsets 4, Fetch 3, no Produce (the workload's), no FetchConsumer (in Fetch)", net)
	}
}

func TestGroupPartitions(t *testing.T) {
	text := []byte(`# HELP tidemark_lag_partition_offsets x
tidemark_lag_partition_offsets{cluster="bench",group="g\"1",partition="3",topic="t"} 42
tidemark_lag_partition_seconds{cluster="bench",group="g\"1",partition="3",topic="t"} 1.5
tidemark_lag_partition_offsets{cluster="bench",group="g2",partition="0",topic="t"} 0
tidemark_lag_group_offsets{cluster="bench",group="g2"} 0
`)
	got, err := groupPartitions(text, seriesNames{lag: "tidemark_lag_partition_offsets", seconds: "tidemark_lag_partition_seconds",
		group: "group", topic: "topic", partition: "partition"})
	if err != nil {
		t.Fatal(err)
	}
	if e := got[gpKey{`g"1`, "t", 3}]; e.lag != 42 || e.seconds != 1.5 {
		t.Errorf(`g"1/t/3: %+v, want lag 42, 1.5 s`, e)
	}
	if e := got[gpKey{"g2", "t", 0}]; e.lag != 0 || !math.IsNaN(e.seconds) || len(got) != 2 {
		t.Errorf("g2/t/0: %+v (of %d), want lag 0, no time lag, 2 group-partitions", e, len(got))
	}
	if _, err := groupPartitions([]byte(`tidemark_lag_partition_offsets{group="g,partition="1"} 3`+"\n"),
		seriesNames{lag: "tidemark_lag_partition_offsets", partition: "partition"}); err == nil {
		t.Error("broken label set: no error")
	}
}

func TestCompare(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := &truth{start: t0, end: t0.Add(2 * time.Second), rows: map[gpKey]truthRow{
		{"g", "t", 0}: {current: 10, end: 20, lag: 10}, // record 10 written at 990: time lag 11 s at mid-time 1001
		{"g", "t", 1}: {current: 20, end: 20, lag: 0},
		{"g", "t", 2}: {current: 5, end: 30, lag: 25},
	}}
	ts := func(topic string, p int32, off int64) (time.Time, bool) { return time.Unix(980+off, 0), true }
	got := map[gpKey]exported{
		{"g", "t", 0}: {lag: 12, seconds: 12}, // within 3 records, 2 s
		{"g", "t", 1}: {lag: 0, seconds: 0},   // exact
		{"g", "t", 2}: {lag: 40, seconds: 30}, // off by 15 records and 6 s (truth 1001 − 985 = 16 s)
	}
	c := compare(tr, got, true, 3, 2, ts)
	if c.Rows != 3 || c.Missing != 0 || c.LagErrors != 1 || c.TimeRows != 3 || c.TimeErrors != 1 || c.LagAbsErrMax != 15 || c.TimeAbsErrMax != 14 {
		t.Errorf("%+v: want 3 rows, 1 lag error (max 15), 1 time-lag error (max 14 s)", c)
	}
	delete(got, gpKey{"g", "t", 1})
	if c := compare(tr, got, false, 100, 100, ts); c.Missing != 1 || c.TimeRows != 0 || c.LagErrors != 0 {
		t.Errorf("%+v: want 1 missing, time lag not judged", c)
	}
	if lt, tt := tolerance(10*time.Second, 2, 5*time.Second); lt != 51 || tt != 26 {
		t.Errorf("tolerance(10 s, 2/s, 5 s) = %v, %v; want 2×(20+5)+1 = 51 records, 20+5+1 = 26 s", lt, tt)
	}
}
