package store

import (
	"testing"
	"time"

	"github.com/tidemark/tidemark/lagexporter"
)

func TestLagRows(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := &lagexporter.Snapshot{Cluster: "prod", Time: at, Groups: []lagexporter.GroupLag{
		{Group: "orders", GroupType: lagexporter.GroupShare, Status: lagexporter.StatusStop, Partitions: []lagexporter.PartitionLag{
			{Topic: "t", Partition: 0, HasCommit: true, Committed: 90, LogStart: 10, End: 100, Lag: 10, TimeLagKnown: true,
				TimeLag: 1500 * time.Millisecond, Status: lagexporter.StatusStop},
			{Topic: "t", Partition: 1, LogStart: 5, End: 7, Lag: 2, Status: lagexporter.StatusAhead},
		}},
		{Group: "app", GroupType: lagexporter.GroupStreams, Status: lagexporter.StatusRewind, Partitions: []lagexporter.PartitionLag{
			{Topic: "app-x-repartition", HasCommit: true, Committed: 3, End: 3, Status: lagexporter.StatusRewind},
		}},
	}}
	s.Groups[1].Partitions[0].SetStreams(&lagexporter.StreamsTopic{Subtopology: "1", Internal: true})
	got := LagRows(s)
	want := []LagRow{
		{At: at, Cluster: "prod", Group: "orders", Topic: "t", Partition: 0, Committed: 90, LogStart: 10, End: 100, Lag: 10,
			TimeLagMs: 1500, Status: StatusStop, PartitionStatus: StatusStop, GroupType: GroupShare},
		{At: at, Cluster: "prod", Group: "orders", Topic: "t", Partition: 1, Committed: -1, LogStart: 5, End: 7, Lag: 2,
			Status: StatusStop, PartitionStatus: StatusUnknown, GroupType: GroupShare},
		{At: at, Cluster: "prod", Group: "app", Topic: "app-x-repartition", Committed: 3, End: 3, Status: StatusRewind,
			PartitionStatus: StatusRewind, GroupType: GroupStreams, Subtopology: "1", Internal: true},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestLagStatusOfEveryStatus(t *testing.T) {
	want := map[string]LagStatus{"OK": StatusOK, "REWIND": StatusRewind, "AHEAD": StatusUnknown, "WARN": StatusWarn,
		"STALL": StatusStall, "STOP": StatusStop, "ERR": StatusErr}
	for i, name := range lagexporter.StatusNames {
		if got := LagStatusOf(lagexporter.Status(i)); got != want[name] {
			t.Errorf("LagStatusOf(%s) = %v, want %v", name, got, want[name])
		}
		// every stored status reads back under the lag exporter's name
		if got := LagStatusOf(lagexporter.Status(i)); got != StatusUnknown && got.String() != name {
			t.Errorf("LagStatusOf(%s).String() = %q", name, got.String())
		}
	}
	for _, gt := range []string{"", lagexporter.GroupClassic, "unknown-type"} {
		if got := GroupTypeOf(gt); got != GroupClassic {
			t.Errorf("GroupTypeOf(%q) = %v, want classic", gt, got)
		}
	}
}
