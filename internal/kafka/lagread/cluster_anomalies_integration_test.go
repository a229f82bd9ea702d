package lagread

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/timeline"
)

// observe returns the reader's current metadata of topic.
func (e *lagEnv) observe(topic string) lagexporter.TopicObservation {
	e.t.Helper()
	md, err := e.reader.Metadata(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, to := range md {
		if to.Topic == topic {
			return to
		}
	}
	e.t.Fatalf("topic %s not in metadata", topic)
	return lagexporter.TopicObservation{}
}

// waitLeader waits (up to 30 s) until a fresh client's metadata names leader for topic/0.
func waitLeader(t *testing.T, topic string, leader int32) {
	t.Helper()
	client, err := sarama.NewClient(testenv.Kafka(t), testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := client.RefreshMetadata(topic); err != nil {
			return err
		}
		b, err := client.Leader(topic, 0)
		if err != nil {
			return err
		}
		if b.ID() != leader {
			return fmt.Errorf("leader of %s/0 is %d, want %d", topic, b.ID(), leader)
		}
		return nil
	})
}

// waitHW waits (up to 30 s) until the partition's leader named in obs answers ListOffsets with high watermark hw.
func waitHW(t *testing.T, r *ClusterReader, obs lagexporter.TopicObservation, hw int64) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		got, err := r.ListOffsets(context.Background(), []lagexporter.TopicObservation{obs})
		if err == nil && got[0].Partitions[0].HighWatermark == hw && got[0].Partitions[0].Leader == obs.Partitions[0].Leader {
			return nil
		}
		return fmt.Errorf("leader %d: %+v (%v), want high watermark %d", obs.Partitions[0].Leader, got, err, hw)
	})
}

// TestClusterLeaderMovedMidCycle: the partition's leader moves between the cycle's metadata read
// and its ListOffsets. The old leader answers NOT_LEADER_OR_FOLLOWER; the reader refreshes the topic's metadata and
// asks the new leader in the same call, so the cycle has the offsets and no error: no stale cycle.
func TestClusterLeaderMovedMidCycle(t *testing.T) {
	e := newLagEnv(t, nil)
	testenv.NeedBrokers(t, 2)
	ids := e.reader.Brokers()
	if len(ids) < 2 {
		if _, err := e.reader.Metadata(context.Background()); err != nil {
			t.Fatal(err)
		}
		ids = e.reader.Brokers()
	}
	a, b := ids[0], ids[1]
	topic := e.prefix + "_moved"
	adm := testenv.Admin(t)
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: -1, ReplicationFactor: -1,
		ReplicaAssignment: map[int32][]int32{0: {a, b}}}, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.DeleteTopic(topic) })
	testenv.WaitTopicReady(t, topic, 1)
	waitLeader(t, topic, a)
	e.waitLeadersKnow(topic, 1)
	produce(t, topic, []int32{0}, 25, time.Time{})
	stale := e.observe(topic)      // what the cycle's metadata read said: leader a
	waitHW(t, e.reader, stale, 25) // both replicas have the records (the high watermark waits for the follower)
	if stale.Partitions[0].Leader != a {
		t.Fatalf("leader %d, want %d", stale.Partitions[0].Leader, a)
	}

	// move the leadership to b: b first in the replica list, then a preferred-leader election
	if err := adm.AlterPartitionReassignments(topic, [][]int32{{b, a}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st, err := adm.ListPartitionReassignments(topic, []int32{0})
		if err == nil && len(st[topic]) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reassignment of %s not done after 30s: %v %v", topic, st, err)
		}
	}
	if _, err := adm.ElectLeaders(sarama.PreferredElection, map[string][]int32{topic: {0}}); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, topic, b)
	// a new leader's high watermark catches up with the old one's once its follower fetches again (it may answer 0
	// for a moment: a falling end offset); wait for it so the numbers below are the log's
	fresh := stale
	fresh.Partitions = []lagexporter.PartitionObservation{{Partition: 0, Leader: b}}
	waitHW(t, e.reader, fresh, 25)

	before, retries := e.reader.Requests(), e.reader.LeaderRetries()
	got, err := e.reader.ListOffsets(context.Background(), []lagexporter.TopicObservation{stale})
	if err != nil {
		t.Fatalf("ListOffsets after the move: %v, want no error (retried on the new leader)", err)
	}
	p := got[0].Partitions[0]
	if !p.Known() || p.Leader != b || p.HighWatermark != 25 || p.ErrorCode != "" {
		t.Fatalf("partition %+v, want read on leader %d: HW 25, no error", p, b)
	}
	if n := e.reader.LeaderRetries() - retries; n != 1 {
		t.Errorf("%d partitions retried, want 1", n)
	}
	// 3 ListOffsets to the old leader, 1 Metadata of the topic, 3 ListOffsets to the new one (the topic's settings
	// were cached by waitLeadersKnow's ListOffsets)
	if n := e.reader.Requests() - before; n != 7 {
		t.Errorf("%d requests, want 7", n)
	}
}

// TestClusterPartitionErrorCode: a partition the broker does not know is answered
// UNKNOWN_TOPIC_OR_PARTITION; the metadata refresh names no leader for it, so it is not asked again, and its error
// carries Kafka's name for the per-partition error counter.
func TestClusterPartitionErrorCode(t *testing.T) {
	e := newLagEnv(t, nil)
	topic := e.topic("code", 1, nil)
	obs := e.observe(topic)
	ghost := obs.Partitions[0]
	ghost.Partition = 7 // the topic has one partition
	obs.Partitions = append(obs.Partitions, ghost)
	retries := e.reader.LeaderRetries()
	got, err := e.reader.ListOffsets(context.Background(), []lagexporter.TopicObservation{obs})
	var ce lagexporter.CycleErrors
	if !errors.As(err, &ce) || len(ce) != 1 || ce[0].Subject != topic+"/7" {
		t.Fatalf("err = %v, want one error naming %s/7", err, topic)
	}
	if p := got[0].Partitions[1]; p.Known() || p.ErrorCode != "UNKNOWN_TOPIC_OR_PARTITION" {
		t.Fatalf("ghost partition %+v, want error code UNKNOWN_TOPIC_OR_PARTITION", p)
	}
	if p := got[0].Partitions[0]; !p.Known() {
		t.Fatalf("real partition %+v, want its offsets", p)
	}
	if n := e.reader.LeaderRetries() - retries; n != 0 {
		t.Errorf("%d retries, want 0 (no leader to ask again)", n)
	}
}

// TestClusterRetentionMargins: a topic keeping records one hour or 10 MB; the group's first
// unconsumed record was produced 30 minutes ago. The margins come from DescribeConfigs (read once, then cached) and
// DescribeLogDirs; DeleteRecords past the commit counts the records deleted unread. The broker's own time retention
// would delete the records 30 minutes after they were produced, longer than the package's test timeout, so only the
// test's DeleteRecords moves the log start.
func TestClusterRetentionMargins(t *testing.T) {
	e := newLagEnv(t, nil)
	topic := e.topic("ret", 1, map[string]string{"retention.ms": "3600000", "retention.bytes": "10000000", "segment.bytes": "1048576"})
	old := time.Now().Add(-30 * time.Minute).Truncate(time.Millisecond)
	produce(t, topic, []int32{0}, 100, old)
	group := e.prefix + "_g"
	e.commit(group, map[string]map[int32]int64{topic: {0: 10}})
	g := e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && len(g.Partitions) == 1 })
	s := e.loop.Latest()
	p := partLag(t, g, topic, 0)
	want := lagexporter.TopicRetention{CleanupPolicy: "delete", RetentionMs: 3600000, RetentionBytes: 10000000, SegmentMs: 604800000, SegmentBytes: 1048576}
	var size int64
	for _, to := range s.Topics {
		if to.Topic == topic {
			if to.Retention == nil || *to.Retention != want {
				t.Fatalf("retention settings %+v, want %+v", to.Retention, want)
			}
			size = to.Partitions[0].SizeBytes
		}
	}
	// the size is the leader's log size, as Kafka's own admin client reads it
	dirs, err := testenv.Admin(t).DescribeLogDirs([]int32{s.Topics[0].Partitions[0].Leader})
	if err != nil {
		t.Fatal(err)
	}
	var adminSize int64
	for _, ds := range dirs {
		for _, d := range ds {
			for _, dt := range d.Topics {
				if dt.Topic == topic {
					adminSize = dt.Partitions[0].Size
				}
			}
		}
	}
	if size <= 0 || size != adminSize {
		t.Fatalf("log size %d, want DescribeLogDirs' %d (> 0)", size, adminSize)
	}
	wantMargin := lagexporter.RetentionMargin{Time: time.Hour - p.TimeLag, TimeKnown: true,
		Bytes: 10000000 - int64(float64(size)*90/100), BytesKnown: true}
	if p.Lag != 90 || p.TimeLag < 30*time.Minute || p.Retention != wantMargin {
		t.Fatalf("lag %d time lag %v margin %+v, want 90, >= 30m, %+v", p.Lag, p.TimeLag, p.Retention, wantMargin)
	}
	// cached: the next cycles send no DescribeConfigs (the same requests each; DescribeLogDirs every cycle)
	before := e.reader.Requests()
	e.cycle()
	mid := e.reader.Requests()
	e.cycle()
	if a, b := mid-before, e.reader.Requests()-mid; a != b {
		t.Errorf("requests per cycle %d then %d, want equal (settings cached)", a, b)
	}
	// retention (here DeleteRecords) deletes records the group never read: 10..39, then 40..59
	adm := testenv.Admin(t)
	for i, upTo := range []int64{40, 60} {
		if err := adm.DeleteRecords(topic, map[int32]int64{0: upTo}); err != nil {
			t.Fatal(err)
		}
		g = e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return partLag(t, g, topic, 0).LogStart == upTo })
		if tl := g.Topic(topic); tl.UnreadRecordsDeleted != upTo-10 || partLag(t, g, topic, 0).ExpiredOffsets != upTo-10 {
			t.Fatalf("after DeleteRecords %d: unread deleted %d expired %d, want %d", i+1, tl.UnreadRecordsDeleted,
				partLag(t, g, topic, 0).ExpiredOffsets, upTo-10)
		}
	}
}

// TestClusterWrongUnitTimestamp: a producer that stamps records in seconds. The exporter counts the
// stamp as wrong_unit and takes the time lag from the next record, flagged lower_bound, never 56 years.
//
// The topic keeps its records forever (retention.ms=-1): a stamp in 1970 makes the broker roll the segment at the
// next append (segment.ms counts from the segment's first timestamp) and, under time retention, delete it at its next
// retention check; TestClusterWrongUnitTimestampExpires covers that outcome.
func TestClusterWrongUnitTimestamp(t *testing.T) {
	e := newLagEnv(t, nil)
	topic := e.topic("unit", 1, map[string]string{"retention.ms": "-1"})
	now := time.Now()
	produce(t, topic, []int32{0}, 1, time.UnixMilli(now.Unix())) // seconds written as milliseconds: 1970-01-21
	ok := now.Add(-10 * time.Second).Truncate(time.Millisecond)
	produce(t, topic, []int32{0}, 1, ok)
	group := e.prefix + "_g"
	e.commit(group, map[string]map[int32]int64{topic: {0: 0}})
	g := e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && len(g.Partitions) == 1 })
	p := partLag(t, g, topic, 0)
	if p.LogStart != 0 || p.Lag != 2 || !p.TimeLagKnown || !p.Flags.Has(lagexporter.FlagLowerBound) || p.TimeLag != e.loop.Latest().Time.Sub(ok) {
		t.Fatalf("%+v, want log start 0, lag 2 with the time lag of record 1 (%v ago), lower bound", *p, e.loop.Latest().Time.Sub(ok))
	}
	if n := e.loop.Health().InvalidTimestamps[lagexporter.TimestampWrongUnit]; n != 1 {
		t.Fatalf("wrong_unit timestamps counted %d, want 1 (the record is read once; its answer is cached)", n)
	}
}

// TestClusterWrongUnitTimestampExpires: under time retention the broker deletes a record stamped in seconds at once
// (its segment's largest timestamp is in 1970, KIP-937), so an unconsumed record disappears without ever being old.
// The exporter reports it as expired, not as lag, and takes the time lag from the first record that is left.
func TestClusterWrongUnitTimestampExpires(t *testing.T) {
	e := newLagEnv(t, nil)
	// A week, the broker's default, pinned: the 1970 stamp is past any retention a cluster would set.
	topic := e.topic("unitexp", 1, map[string]string{"retention.ms": "604800000"})
	now := time.Now()
	produce(t, topic, []int32{0}, 1, time.UnixMilli(now.Unix())) // seconds written as milliseconds: 1970-01-21
	ok := now.Add(-10 * time.Second).Truncate(time.Millisecond)
	produce(t, topic, []int32{0}, 1, ok) // rolls the segment: the 1970 one is now closed and eligible for deletion
	group := e.prefix + "_g"
	e.commit(group, map[string]map[int32]int64{topic: {0: 0}})
	// The broker's retention check (every 5 s on the local stack) moves the log start to 1.
	g := e.waitGroup(group, func(g *lagexporter.GroupLag) bool {
		return g != nil && len(g.Partitions) == 1 && g.Partitions[0].LogStart == 1
	})
	p := partLag(t, g, topic, 0)
	if p.Lag != 1 || p.ExpiredOffsets != 1 || !p.Flags.Has(lagexporter.FlagExpired) || p.Flags.Has(lagexporter.FlagLowerBound) ||
		!p.TimeLagKnown || p.TimeLag != e.loop.Latest().Time.Sub(ok) {
		t.Fatalf("%+v, want lag 1, 1 expired offset, the exact time lag of record 1 (%v ago)", *p, e.loop.Latest().Time.Sub(ok))
	}
}

// TestClusterRecordIncidentThenEval: an incident recorded from the real cluster (a cycle that ran
// out of time before it could read anything) replays through `lag eval` with the live counters.
func TestClusterRecordIncidentThenEval(t *testing.T) {
	e := newLagEnv(t, nil)
	e.recordingFixture("incident")
	var buf bytes.Buffer
	tw := e.recorder(&buf)
	// a fresh loop, so its counters start with the recording
	cfg := &lagexporter.Config{Cluster: "it", GroupAllow: []string{e.prefix + ".*"}, TopicAllow: []string{e.prefix + ".*"}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	loop, err := lagexporter.NewLoop(cfg, e.reader, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	loop.SetRecorder(tw.Write)
	var live []lagexporter.Health
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if i == 1 {
			cancel()
			ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second)) // out of time
		}
		_, err := loop.Cycle(ctx)
		cancel()
		if (err != nil) != (i == 1) {
			t.Fatalf("cycle %d: err %v", i+1, err)
		}
		live = append(live, loop.Health())
	}
	if h := live[1]; h.Errors[lagexporter.ErrKindCycleTimeout] != 1 || h.Errors[lagexporter.ErrKindMetadata] != 1 {
		t.Fatalf("live health after the incident %+v, want 1 cycle_timeout and 1 metadata error", h)
	}
	tl, err := timeline.Read(&buf, "recorded")
	if err != nil {
		t.Fatal(err)
	}
	rcfg := &lagexporter.Config{}
	if err := tl.Configure(rcfg); err != nil {
		t.Fatal(err)
	}
	i := 0
	err = timeline.Play(context.Background(), tl, rcfg, func(p timeline.Poll) error {
		w := live[i]
		if p.Health.Cycles != w.Cycles || !maps.Equal(p.Health.Errors, w.Errors) || !maps.Equal(p.Health.PartitionErrors, w.PartitionErrors) ||
			!maps.Equal(p.Health.InvalidTimestamps, w.InvalidTimestamps) || (p.Err != nil) != (i == 1) {
			t.Errorf("poll %d: replayed health %+v (err %v), live %+v", i+1, p.Health, p.Err, w)
		}
		i++
		return nil
	})
	if err != nil || i != 3 {
		t.Fatalf("play: %v after %d of 3 polls", err, i)
	}
}
