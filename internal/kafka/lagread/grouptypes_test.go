package lagread

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/lagexporter"
)

// TestUnsupportedGroupRPCs: a broker that lists every group type but has none of the new describe RPCs (a
// version-skewed cluster, or a proxy that filters APIs). The cycle keeps every result it can get: the classic group is
// described, the other three are listed with their state and no members; each refused RPC is logged once (not once per
// cycle), reported by Unsupported, and counted as kind unsupported each cycle. No request for a refused RPC is sent.
func TestUnsupportedGroupRPCs(t *testing.T) {
	b := sarama.NewMockBroker(t, 1)
	defer b.Close()
	b.SetHandlerByMap(map[string]sarama.MockResponse{
		"ApiVersionsRequest": sarama.NewMockApiVersionsResponse(t).SetApiKeys([]sarama.ApiVersionsResponseKey{
			{ApiKey: 3, MinVersion: 0, MaxVersion: 12},   // Metadata
			{ApiKey: 15, MinVersion: 0, MaxVersion: 5},   // DescribeGroups
			{ApiKey: 16, MinVersion: 0, MaxVersion: 5},   // ListGroups
			{ApiKey: 18, MinVersion: 0, MaxVersion: 3}}), // ApiVersions; no 69, 77, 89, 90
		"MetadataRequest": sarama.NewMockMetadataResponse(t).SetBroker(b.Addr(), 1).SetController(1),
		"ListGroupsRequest": sarama.NewMockWrapper(&sarama.ListGroupsResponse{Version: 5,
			Groups: map[string]string{"old": "consumer", "new": "consumer", "work": "share", "app": "streams", "conn": "connect"},
			GroupsData: map[string]sarama.GroupData{"old": {GroupState: "Empty", GroupType: "classic"},
				"new": {GroupState: "Stable", GroupType: "consumer"}, "work": {GroupState: "Stable", GroupType: "share"},
				"app": {GroupState: "Stable", GroupType: "streams"}, "conn": {GroupState: "Stable", GroupType: "classic"}}}),
		"DescribeGroupsRequest": sarama.NewMockDescribeGroupsResponse(t).AddGroupDescription("old",
			&sarama.GroupDescription{GroupId: "old", State: "Empty", ProtocolType: "consumer"}),
	})
	var logs bytes.Buffer
	r, err := NewClusterReader([]string{b.Addr()}, NewReaderConfig("test"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.Metadata(ctx); err != nil {
		t.Fatal(err)
	}
	for cycle := range 2 {
		gs, err := r.Groups(ctx)
		types := map[string]string{}
		for _, g := range gs {
			types[g.Group] = g.Type() + "/" + g.State
			if len(g.Members) != 0 {
				t.Errorf("cycle %d: %s has members %v, want none (not described)", cycle, g.Group, g.Members)
			}
		}
		// Connect's classic group is not a consumer group: not listed
		want := map[string]string{"old": "classic/Empty", "new": "consumer/Stable", "work": "share/Stable", "app": "streams/Stable"}
		if len(types) != len(want) {
			t.Fatalf("cycle %d: groups %v, want %v", cycle, types, want)
		}
		for g, w := range want {
			if types[g] != w {
				t.Errorf("cycle %d: %s is %s, want %s", cycle, g, types[g], w)
			}
		}
		var kinds []string
		for _, ce := range err.(lagexporter.CycleErrors) {
			kinds = append(kinds, string(ce.Kind)+": "+ce.Message[:strings.Index(ce.Message, ":")])
		}
		slices.Sort(kinds)
		wantKinds := []string{"unsupported: describe 1 consumer groups", "unsupported: describe 1 share groups",
			"unsupported: describe 1 streams groups"}
		if !slices.Equal(kinds, wantKinds) {
			t.Fatalf("cycle %d: errors %v, want %v", cycle, kinds, wantKinds)
		}
	}
	if got, want := r.Unsupported(), []string{"ConsumerGroupDescribe", "ShareGroupDescribe", "StreamsGroupDescribe"}; !slices.Equal(got, want) {
		t.Fatalf("Unsupported() = %v, want %v", got, want)
	}
	if n := strings.Count(logs.String(), "cannot answer a group read"); n != 3 {
		t.Fatalf("%d warnings in two cycles, want 3 (one per RPC):\n%s", n, logs.String())
	}
	// the share group's position cannot be read either: its error says so, without failing the other groups
	offs, err := r.CommittedOffsets(ctx, []string{"work"})
	if len(offs) != 1 || offs[0].Error == "" || !strings.Contains(offs[0].Error, "DescribeShareGroupOffsets") {
		t.Fatalf("share offsets = %+v (%v), want one group whose error names DescribeShareGroupOffsets", offs, err)
	}
}

// TestDecodeShareOffsets: uninitialized share-partitions (start offset -1) are left out, a v0 answer (Kafka 4.0/4.1)
// or a -1 lag has no lag, and a partition error marks its group.
func TestDecodeShareOffsets(t *testing.T) {
	part := func(p int32, start, lag int64, code int16) kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition {
		return kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition{Partition: p, StartOffset: start, Lag: lag, ErrorCode: code}
	}
	resp := func(v int16) *kmsg.DescribeShareGroupOffsetsResponse {
		return &kmsg.DescribeShareGroupOffsetsResponse{Version: v, Groups: []kmsg.DescribeShareGroupOffsetsResponseGroup{
			{GroupID: "g", Topics: []kmsg.DescribeShareGroupOffsetsResponseGroupTopic{{Topic: "t",
				Partitions: []kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition{part(1, 50, 7, 0), part(0, -1, -1, 0), part(2, 9, -1, 0)}}}},
			{GroupID: "bad", Topics: []kmsg.DescribeShareGroupOffsetsResponseGroupTopic{{Topic: "t",
				Partitions: []kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition{part(0, 5, 1, 3)}}}},
			{GroupID: "gone", ErrorCode: 69},
		}}
	}
	got := decodeShareOffsets(resp(1))
	want := []ShareOffset{{Topic: "t", Partition: 1, StartOffset: 50, Lag: 7}, {Topic: "t", Partition: 2, StartOffset: 9, Lag: -1}}
	if !slices.Equal(got["g"].offsets, want) || got["g"].err != "" {
		t.Fatalf("v1: %+v, want %+v", got["g"], want)
	}
	if got["bad"].err == "" || !strings.Contains(got["gone"].err, "GROUP_ID_NOT_FOUND") {
		t.Fatalf("errors: bad %q, gone %q; want a partition error and GROUP_ID_NOT_FOUND", got["bad"].err, got["gone"].err)
	}
	// v0 has no lag field: whatever the decoder defaulted, the lag is unknown
	if v0 := decodeShareOffsets(resp(0))["g"].offsets; v0[0].Lag != -1 || v0[0].StartOffset != 50 {
		t.Fatalf("v0: %+v, want start offset 50 without lag", v0)
	}
}

// TestStreamsTopology: subtopology 0 reads a user topic and writes a repartition topic that subtopology 1 reads; the
// member's active tasks map onto those topics' partitions, standby tasks onto none.
func TestStreamsTopology(t *testing.T) {
	st := decodeTopology(&kmsg.StreamsGroupDescribeResponseGroupTopology{Epoch: 2, Subtopologies: []kmsg.StreamsGroupDescribeResponseGroupTopologySubtopology{
		{SubtopologyID: "0", SourceTopics: []string{"in"}, RepartitionSinkTopics: []string{"app-x-repartition"}},
		{SubtopologyID: "1", RepartitionSourceTopics: []kmsg.TopicInfo{{Topic: "app-x-repartition"}},
			StateChangelogTopics: []kmsg.TopicInfo{{Topic: "app-x-changelog"}}},
	}})
	wantReads := map[string]StreamsTopicRole{"in": {Subtopology: "0"}, "app-x-repartition": {Subtopology: "1", Internal: true}}
	if !maps.Equal(st.reads, wantReads) || !slices.Equal(st.changelogs, []string{"app-x-changelog"}) {
		t.Fatalf("topology %+v, want reads %v and one changelog", st, wantReads)
	}
	got := st.taskPartitions([]kmsg.TaskIDs{{SubtopologyID: "0", Partitions: []int32{2, 0}}, {SubtopologyID: "1", Partitions: []int32{1}}})
	want := map[string][]int32{"in": {0, 2}, "app-x-repartition": {1}}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("active tasks read %v, want %v", got, want)
	}
	if (*streamsTopology)(nil).taskPartitions([]kmsg.TaskIDs{{SubtopologyID: "0", Partitions: []int32{0}}}) != nil {
		t.Fatal("tasks without a topology must map to nothing")
	}
}
