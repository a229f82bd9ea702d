package lagexporter_test

import (
	"cmp"
	"context"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	. "github.com/tidemark/tidemark/lagexporter"
)

// probeCluster is one topic of 6 partitions, each lagging (commit 10, high watermark 20) for group "g"
// (read_uncommitted) and "rc" (read_committed); ReadRecords answers from answer and records what was asked.
type probeCluster struct {
	answer func(RecordRequest, int) RecordProbe // the request and the cycle (1, 2, ...)
	cycle  int
	asked  []RecordRequest
}

func (c *probeCluster) Metadata(context.Context) ([]TopicObservation, error) {
	t := TopicObservation{Topic: "t", ID: "tid"}
	for p := range int32(6) {
		t.Partitions = append(t.Partitions, PartitionObservation{Partition: p})
	}
	return []TopicObservation{t}, nil
}

func (c *probeCluster) Groups(context.Context) ([]GroupObservation, error) {
	return []GroupObservation{{Group: "g", State: "Empty"}, {Group: "rc", State: "Empty"}}, nil
}

func (c *probeCluster) CommittedOffsets(_ context.Context, groups []string) ([]GroupObservation, error) {
	var out []GroupObservation
	for _, g := range groups {
		o := GroupObservation{Group: g}
		for p := range int32(6) {
			o.Offsets = append(o.Offsets, CommittedOffset{Topic: "t", Partition: p, Offset: 10})
		}
		out = append(out, o)
	}
	return out, nil
}

func (c *probeCluster) ListOffsets(_ context.Context, topics []TopicObservation) ([]TopicObservation, error) {
	out := slices.Clone(topics)
	for i := range out {
		out[i].Partitions = slices.Clone(out[i].Partitions)
		for j := range out[i].Partitions {
			p := &out[i].Partitions[j]
			p.LogStart, p.HighWatermark, p.LastStable = 0, 20, 20
		}
	}
	return out, nil
}

func (c *probeCluster) ReadRecords(_ context.Context, reqs []RecordRequest) ([]RecordProbe, error) {
	var out []RecordProbe
	for _, r := range reqs {
		c.asked = append(c.asked, r)
		out = append(out, c.answer(r, c.cycle))
	}
	return out, nil
}

func cmpProbe(a, b RecordProbe) int {
	return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Isolation, b.Isolation))
}

// The cache hands the evaluator, cycle after cycle, exactly the answers the cluster gave (whatever their time's
// location or precision), reads again only what had no valid timestamp, and forgets an answer that failed.
func TestRecordProbeCacheGivesBackAnswers(t *testing.T) {
	ms := time.Unix(1_700_000_000, 0).Add(250 * time.Millisecond) // sarama's: whole ms, time.Local
	stamps := []time.Time{
		ms,
		ms.UTC(),
		ms.In(time.FixedZone("UTC+1", 3600)), // kept whole: the compact form holds Local and UTC only
		ms.Add(time.Microsecond),             // kept whole: not in whole milliseconds
		{},                                   // partition 4: no valid timestamp yet, asked again every cycle
		ms,                                   // partition 5: none yet, then an error, then found
	}
	clock := &AppendClock{Broker: 1, Known: true, Offset: time.Millisecond}
	c := &probeCluster{answer: func(r RecordRequest, cycle int) RecordProbe {
		p := RecordProbe{Topic: r.Topic, TopicID: r.TopicID, Partition: r.Partition, Offset: r.Offset,
			Isolation: r.Isolation, FirstOffset: r.Offset + 1, ScannedTo: r.Offset + 2, TimestampOffset: r.Offset + 1,
			Timestamp: stamps[r.Partition], Gap: true, GapOffsets: 1, MissingTimestamps: int(r.Partition)}
		switch {
		case r.Partition == 1:
			p.AppendClock = clock
		case r.Partition == 4:
			// progress every read, with a count the compact form cannot hold (kept whole)
			p.TimestampOffset, p.Timestamp, p.ScannedTo = -1, time.Time{}, r.Offset+int64(cycle)
			p.MissingTimestamps = math.MaxInt32 + cycle
		case r.Partition == 5 && cycle == 1:
			p.TimestampOffset, p.Timestamp, p.ScannedTo = -1, time.Time{}, r.Offset+3
		case r.Partition == 5 && cycle == 2:
			p = RecordProbe{Topic: r.Topic, TopicID: r.TopicID, Partition: r.Partition, Offset: r.Offset,
				Isolation: r.Isolation, Error: "NOT_LEADER_OR_FOLLOWER"}
		}
		if r.Isolation == ReadUncommitted && r.Partition == 0 {
			p.Isolation = "" // a cluster may answer with Kafka's default left empty
		}
		return p
	}}
	cfg := &Config{Cluster: "test", Groups: []GroupRule{{Match: "rc", Isolation: ReadCommitted}}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	l, err := NewLoop(cfg, c, func() time.Time { return ms.Add(time.Minute) })
	if err != nil {
		t.Fatal(err)
	}
	var seen []RecordProbe
	l.SetRecorder(func(o *Observation) error { seen = slices.Clone(o.Records); return nil })
	type key struct {
		p  int32
		rc bool
	}
	want := map[key]RecordProbe{} // the last answer without an error, as the cluster gave it
	wantAsked := map[int][]int32{1: {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5}, 2: {4, 4, 5, 5}, 3: {4, 4, 5, 5}, 4: {4, 4}}
	for cycle := 1; cycle <= 4; cycle++ {
		c.cycle, c.asked = cycle, nil
		if _, err := l.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
		var asked []int32
		for _, r := range c.asked {
			asked = append(asked, r.Partition)
			k := key{r.Partition, r.Isolation == ReadCommitted}
			if a := c.answer(r, cycle); a.Error == "" {
				want[k] = a
			} else {
				delete(want, k)
			}
		}
		slices.Sort(asked)
		if !slices.Equal(asked, wantAsked[cycle]) {
			t.Errorf("cycle %d asked partitions %v, want %v", cycle, asked, wantAsked[cycle])
		}
		wants := slices.SortedFunc(maps.Values(want), cmpProbe)
		slices.SortFunc(seen, cmpProbe)
		if len(seen) != len(wants) {
			t.Fatalf("cycle %d: %d probes, want %d", cycle, len(seen), len(wants))
		}
		for i := range wants {
			if seen[i] != wants[i] || seen[i].Timestamp.String() != wants[i].Timestamp.String() {
				t.Errorf("cycle %d: probe\n%+v, want\n%+v", cycle, seen[i], wants[i])
			}
		}
	}
}
