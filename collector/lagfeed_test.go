package collector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/latency"
)

type flushingFake struct{ fakeSink }

func (*flushingFake) Flush(context.Context) error { return nil }
func (*flushingFake) Stalled() error              { return nil }

// TestFollowLagWritesClusterRows: the lag feed writes each snapshot's lag_snapshots rows through the sink, and a
// collector of a named cluster stamps that name on every row of every table it writes.
func TestFollowLagWritesClusterRows(t *testing.T) {
	engine, err := latency.NewEngine(latency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sink := &flushingFake{}
	c, err := New(Config{}, Options{Kafka: kafka.ClientConfig{Brokers: []string{"127.0.0.1:9"}}, Engine: engine, Sink: sink, Cluster: "dr"})
	if err != nil {
		t.Fatal(err)
	}
	snaps := make(chan *lagexporter.Snapshot, 1)
	snaps <- &lagexporter.Snapshot{Cluster: "dr", Time: time.Unix(100, 0), Groups: []lagexporter.GroupLag{{Group: "g",
		Partitions: []lagexporter.PartitionLag{{Topic: "t", HasCommit: true, Committed: 4, End: 9, Lag: 5}}}}}
	close(snaps)
	if err := c.FollowLag(context.Background(), snaps, nil, 0); err != nil {
		t.Fatal(err)
	}
	if len(sink.rows) != 1 || len(sink.rows[0].Lag) != 1 || sink.rows[0].Lag[0].Cluster != "dr" || sink.rows[0].Lag[0].Lag != 5 {
		t.Fatalf("rows %+v", sink.rows)
	}
	// every table's rows get the collector's cluster, whatever they said
	rows := store.Rows{Latency: []store.LatencyRow{{Cluster: "x"}}, Probe: []store.ProbeRow{{}}, Lag: []store.LagRow{{}},
		ClockOffsets: []store.ClockOffsetRow{{}}}
	if err := c.opts.Sink.Write(context.Background(), rows, nil); err != nil {
		t.Fatal(err)
	}
	got := sink.rows[1]
	if got.Latency[0].Cluster != "dr" || got.Probe[0].Cluster != "dr" || got.Lag[0].Cluster != "dr" || got.ClockOffsets[0].Cluster != "dr" {
		t.Fatalf("stamped rows %+v", got)
	}
}

// TestFollowLagBackfillsTheFailoverGap: a standby writes no lag_snapshots rows but keeps the snapshots of the last
// backfill (at most maxHeldSnapshots); the first snapshot after it turns active writes them, oldest first, then
// itself. With backfill 0 nothing is held.
func TestFollowLagBackfillsTheFailoverGap(t *testing.T) {
	snap := func(sec int64) *lagexporter.Snapshot {
		return &lagexporter.Snapshot{Cluster: "c", Time: time.Unix(sec, 0), Groups: []lagexporter.GroupLag{{Group: "g",
			Partitions: []lagexporter.PartitionLag{{Topic: "t", HasCommit: true, Committed: sec, End: 100, Lag: 100 - sec}}}}}
	}
	cases := []struct {
		name     string
		backfill time.Duration
		standby  []int64 // snapshot times (s) received while standby
		active   []int64 // then these, after turning active
		want     []int64 // the times of the rows written, in order
	}{
		{"gap filled", 3 * time.Second, seq(1, 10), []int64{11, 12}, []int64{7, 8, 9, 10, 11, 12}},
		{"no backfill", 0, seq(1, 3), []int64{4}, []int64{4}},
		// the marker (below) is held too, so the oldest of maxHeldSnapshots is one later
		{"bounded count", time.Hour, seq(1, 40), []int64{41}, append(seq(40-maxHeldSnapshots+2, 40), 41)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			engine, err := latency.NewEngine(latency.Config{})
			if err != nil {
				t.Fatal(err)
			}
			sink := &flushingFake{}
			c, err := New(Config{}, Options{Kafka: kafka.ClientConfig{Brokers: []string{"127.0.0.1:9"}}, Engine: engine, Sink: sink, Cluster: "c"})
			if err != nil {
				t.Fatal(err)
			}
			activity := lagexporter.NewActivity(true) // standby until Set(true)
			snaps := make(chan *lagexporter.Snapshot) // unbuffered: a send returns once FollowLag took the snapshot
			done := make(chan error, 1)
			go func() { done <- c.FollowLag(context.Background(), snaps, activity, tc.backfill) }()
			for _, sec := range tc.standby {
				snaps <- snap(sec)
			}
			// A snapshot without groups (no rows) at the last time: taken only once the one before is handled.
			snaps <- &lagexporter.Snapshot{Cluster: "c", Time: time.Unix(tc.standby[len(tc.standby)-1], 0)}
			sink.mu.Lock()
			n := len(sink.rows)
			sink.mu.Unlock()
			if n != 0 {
				t.Fatalf("standby wrote %d batches", n)
			}
			activity.Set(true)
			for _, sec := range tc.active {
				snaps <- snap(sec)
			}
			close(snaps)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, r := range sink.rows {
				for _, l := range r.Lag {
					got = append(got, l.At.Unix())
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("rows at %v, want %v", got, tc.want)
			}
		})
	}
}

func seq(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}
