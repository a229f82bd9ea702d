package lagexporter

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkApplyWithRecords evaluates cmd/bench-lag's shape (5,000 groups × 20 partitions over 10 topics, commits
// spread over 201 offsets of each partition) with a record read for every distinct offset a group waits at, as a
// steady cycle of the daemon has them: the evaluation behind cycle_eval_p50_s.
func BenchmarkApplyWithRecords(b *testing.B) {
	cfg := &Config{Cluster: "bench"}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	const groups, parts, topics, records = 5000, 20, 10, 200
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	obs := &Observation{Time: at}
	for t := range topics {
		to := TopicObservation{Topic: fmt.Sprintf("topic-%d", t), ID: fmt.Sprint(t)}
		for p := range parts {
			to.Partitions = append(to.Partitions, PartitionObservation{Partition: int32(p), HighWatermark: records, LastStable: records})
		}
		obs.Topics = append(obs.Topics, to)
	}
	seen := map[probeKey]bool{}
	for g := range groups {
		gr := GroupObservation{Group: fmt.Sprintf("group-%05d", g), State: "Empty"}
		topic := fmt.Sprintf("topic-%d", g%topics)
		for p := range parts {
			off := int64((g*7 + p*13) % (records + 1))
			gr.Offsets = append(gr.Offsets, CommittedOffset{Topic: topic, Partition: int32(p), Offset: off})
			if k := (probeKey{topic, int32(p), off, ReadUncommitted}); off < records && !seen[k] {
				seen[k] = true
				obs.Records = append(obs.Records, RecordProbe{Topic: topic, TopicID: fmt.Sprint(g % topics), Partition: int32(p),
					Offset: off, FirstOffset: off, ScannedTo: off + 1, TimestampOffset: off, Timestamp: at.Add(-time.Minute)})
			}
		}
		obs.Groups = append(obs.Groups, gr)
	}
	e := NewEvaluator(cfg)
	e.Apply(obs)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		obs.Time = obs.Time.Add(30 * time.Second)
		e.Apply(obs)
	}
}
