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
// backfill window (at most maxHeldSnapshots); the first snapshot after it turns active writes them, oldest first, then
// itself. With window 0 nothing is held.
func TestFollowLagBackfillsTheFailoverGap(t *testing.T) {
	cases := []struct {
		name    string
		window  time.Duration
		standby []int64 // snapshot times (s) taken while standby
		active  []int64 // then these, after turning active
		want    []int64 // the snapshots written, in order
	}{
		{"gap filled", 3 * time.Second, seq(1, 10), []int64{11, 12}, []int64{7, 8, 9, 10, 11, 12}},
		{"no backfill", 0, seq(1, 3), []int64{4}, []int64{4}},
		{"bounded count", time.Hour, seq(1, 40), []int64{41}, append(seq(40-maxHeldSnapshots+1, 40), 41)},
		{"standby again", 3 * time.Second, seq(1, 2), []int64{3}, []int64{1, 2, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []int64
			write := func(s *lagexporter.Snapshot) error { got = append(got, s.Time.Unix()); return nil }
			b := &backfiller{window: tc.window}
			for _, sec := range tc.standby {
				if err := b.handle(&lagexporter.Snapshot{Time: time.Unix(sec, 0)}, false, write); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != 0 {
				t.Fatalf("standby wrote %v", got)
			}
			if len(b.held) > maxHeldSnapshots {
				t.Fatalf("%d snapshots held", len(b.held))
			}
			for _, sec := range tc.active {
				if err := b.handle(&lagexporter.Snapshot{Time: time.Unix(sec, 0)}, true, write); err != nil {
					t.Fatal(err)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("wrote %v, want %v", got, tc.want)
			}
			if len(b.held) != 0 {
				t.Fatalf("%d snapshots still held once active", len(b.held))
			}
			// standby again: held afresh, nothing of the first standby written twice
			got = nil
			_ = b.handle(&lagexporter.Snapshot{Time: time.Unix(100, 0)}, false, write)
			_ = b.handle(&lagexporter.Snapshot{Time: time.Unix(101, 0)}, true, write)
			want := "[101]"
			if tc.window > 0 {
				want = "[100 101]"
			}
			if fmt.Sprint(got) != want {
				t.Fatalf("second failover wrote %v, want %s", got, want)
			}
		})
	}
}

// TestFollowLagStandbyWritesNothing: through FollowLag, a standby replica's snapshots write no rows, and after it
// turns active its rows are written (each snapshot's lag_snapshots rows through the sink).
func TestFollowLagStandbyWritesNothing(t *testing.T) {
	engine, err := latency.NewEngine(latency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sink := &flushingFake{}
	c, err := New(Config{}, Options{Kafka: kafka.ClientConfig{Brokers: []string{"127.0.0.1:9"}}, Engine: engine, Sink: sink, Cluster: "c"})
	if err != nil {
		t.Fatal(err)
	}
	snap := func(sec int64) *lagexporter.Snapshot {
		return &lagexporter.Snapshot{Cluster: "c", Time: time.Unix(sec, 0), Groups: []lagexporter.GroupLag{{Group: "g",
			Partitions: []lagexporter.PartitionLag{{Topic: "t", HasCommit: true, Committed: sec, End: 100, Lag: 100 - sec}}}}}
	}
	activity := lagexporter.NewActivity(true) // standby until Set(true)
	snaps := make(chan *lagexporter.Snapshot, 2)
	snaps <- snap(1)
	snaps <- snap(2)
	close(snaps)
	if err := c.FollowLag(context.Background(), snaps, activity, 0); err != nil {
		t.Fatal(err)
	}
	if len(sink.rows) != 0 {
		t.Fatalf("standby wrote %d batches", len(sink.rows))
	}
	activity.Set(true)
	snaps2 := make(chan *lagexporter.Snapshot, 1)
	snaps2 <- snap(3)
	close(snaps2)
	if err := c.FollowLag(context.Background(), snaps2, activity, 0); err != nil {
		t.Fatal(err)
	}
	if len(sink.rows) != 1 || len(sink.rows[0].Lag) != 1 || sink.rows[0].Lag[0].At.Unix() != 3 {
		t.Fatalf("active wrote %+v", sink.rows)
	}
}

func seq(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}
