package collector

import (
	"context"
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
	if err := c.FollowLag(context.Background(), snaps, nil); err != nil {
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
