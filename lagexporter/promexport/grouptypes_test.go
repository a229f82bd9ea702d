package promexport

import (
	"slices"
	"testing"
	"time"

	. "github.com/tidemark/tidemark/lagexporter"
)

// TestGroupTypeSeries: every group gets exactly one group-type info series (old snapshots without a type are
// classic), a streams group one topic-info series per topic it reads, naming subtopology and internal marking, and an
// RPC a broker refused one unsupported series; the lag families themselves are the same for every type.
func TestGroupTypeSeries(t *testing.T) {
	cfg := &Config{Cluster: "c"}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	part := func(topic string, lag int64) PartitionLag {
		return PartitionLag{Topic: topic, Known: true, Lag: lag, RawLag: lag, HasCommit: true, Committed: 10, TimeLagKnown: true}
	}
	s := &Snapshot{Cluster: "c", Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Unsupported: []string{"StreamsGroupDescribe"},
		Groups: []GroupLag{
			{Group: "old", Partitions: []PartitionLag{part("t", 1)}, Topics: []TopicLag{{Topic: "t"}}},
			{Group: "orders", GroupType: GroupConsumer, Partitions: []PartitionLag{part("t", 2)}, Topics: []TopicLag{{Topic: "t"}}},
			{Group: "work", GroupType: GroupShare, Partitions: []PartitionLag{part("t", 3)}, Topics: []TopicLag{{Topic: "t"}}},
			{Group: "app", GroupType: GroupStreams, Partitions: []PartitionLag{part("in", 4), part("app-x-repartition", 5)},
				Topics: []TopicLag{{Topic: "app-x-repartition", Subtopology: "1", Internal: true}, {Topic: "in", Subtopology: "0"}}},
		}}
	ss := gatherSeries(t, NewCollector(cfg, fixedSource{s}))
	var info, topics, unsupported []string
	lagSeries := 0
	for _, x := range ss {
		switch x.name {
		case "tidemark_lag_group_info":
			info = append(info, x.labels)
		case "tidemark_lag_streams_topic_info":
			topics = append(topics, x.labels)
		case "tidemark_lag_exporter_unsupported_rpc":
			unsupported = append(unsupported, x.labels)
		case "tidemark_lag_partition_offsets":
			lagSeries++
		}
	}
	slices.Sort(info)
	slices.Sort(topics)
	wantInfo := []string{`cluster="c",group="app",group_type="streams"`, `cluster="c",group="old",group_type="classic"`,
		`cluster="c",group="orders",group_type="consumer"`, `cluster="c",group="work",group_type="share"`}
	wantTopics := []string{`cluster="c",group="app",internal="false",subtopology="0",topic="in"`,
		`cluster="c",group="app",internal="true",subtopology="1",topic="app-x-repartition"`}
	if !slices.Equal(info, wantInfo) || !slices.Equal(topics, wantTopics) || lagSeries != 5 {
		t.Fatalf("group info %v\nstreams topics %v\nlag series %d\nwant %v\n%v\n5", info, topics, lagSeries, wantInfo, wantTopics)
	}
	if want := []string{`cluster="c",rpc="StreamsGroupDescribe"`}; !slices.Equal(unsupported, want) {
		t.Fatalf("unsupported %v, want %v", unsupported, want)
	}
}
