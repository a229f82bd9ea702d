package collector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/latency"
)

// ackSignal is the writer as the collector uses it, telling the test each ack after the collector's own ack ran.
type ackSignal struct {
	*store.Writer
	acks chan error
}

func (s *ackSignal) Write(ctx context.Context, rows store.Rows, ack store.Ack) error {
	return s.Writer.Write(ctx, rows, func(err error) {
		if ack != nil {
			ack(err)
		}
		s.acks <- err
	})
}

// TestFollowLagRewritesGivenUpSnapshots runs the lag feed into the real ClickHouse through a proxy: with the proxy
// down the writer gives the first snapshot's rows up after retry_max_elapsed; the proxy comes back, and the next
// snapshot writes the given-up one first, so lag_snapshots holds both observations and nothing is counted lost.
func TestFollowLagRewritesGivenUpSnapshots(t *testing.T) {
	db, _ := testenv.ClickHouseDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	direct, err := store.Open(ctx, store.Config{Addr: []string{testenv.ClickHouseAddr(t)}, Database: db, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if _, err := direct.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	px := testenv.NewProxy(t, testenv.ClickHouseAddr(t))
	st, err := store.Open(ctx, store.Config{Addr: []string{px.Addr()}, Database: db, DialTimeout: time.Second,
		Writer: store.WriterConfig{FlushInterval: 20 * time.Millisecond, RetryInitial: 20 * time.Millisecond,
			RetryMax: 100 * time.Millisecond, RetryMaxElapsed: 300 * time.Millisecond, InsertTimeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w, err := store.NewWriter(st, store.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close(context.Background()) }()
	engine, err := latency.NewEngine(latency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sink := &ackSignal{Writer: w, acks: make(chan error, 8)}
	m := NewMetrics(nil)
	cluster := testenv.Name(t, "c")
	c, err := New(Config{}, Options{Kafka: kafka.ClientConfig{Brokers: []string{"127.0.0.1:9"}}, Engine: engine, Sink: sink,
		Cluster: cluster, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	snap := func(sec int64) *lagexporter.Snapshot {
		return &lagexporter.Snapshot{Cluster: cluster, Time: time.Unix(1_800_000_000+sec, 0), Groups: []lagexporter.GroupLag{{Group: "g",
			Partitions: []lagexporter.PartitionLag{{Topic: "t", HasCommit: true, Committed: sec, End: 100, Lag: 100 - sec}}}}}
	}

	px.Down()
	snaps := make(chan *lagexporter.Snapshot)
	done := make(chan error, 1)
	go func() { done <- c.FollowLag(ctx, snaps, nil, 0) }()
	snaps <- snap(1)
	if err := <-sink.acks; err == nil {
		t.Fatal("snapshot 1 acknowledged with ClickHouse unreachable")
	}
	px.Up()
	snaps <- snap(2) // writes snapshot 1 again, then 2
	close(snaps)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil { // every accepted write acknowledged
		t.Fatal(err)
	}
	close(sink.acks)
	for err := range sink.acks {
		if err != nil {
			t.Fatalf("write after ClickHouse came back: %v", err)
		}
	}
	var got []int64
	rows, err := direct.Conn().Query(ctx, "SELECT committed FROM lag_snapshots FINAL WHERE cluster = ? ORDER BY at_ms", cluster)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("lag_snapshots holds the commits of snapshots %v, want [1 2]", got)
	}
	if g, l := testutil.ToFloat64(m.SinkErrors.WithLabelValues("lag")), testutil.ToFloat64(m.LagRowsLost); g != 1 || l != 0 {
		t.Fatalf("given up %v, lost %v: want 1 batch given up and no row lost", g, l)
	}
}

// TestFollowLagRetryIsBounded: snapshots given up by the writer are kept for another write up to maxHeldSnapshots;
// older ones are dropped and counted lost, and the next snapshot while active writes the kept ones, oldest first,
// before itself (and before any held standby snapshot).
func TestFollowLagRetryIsBounded(t *testing.T) {
	var lost []int64
	b := &backfiller{window: time.Hour, lost: func(s *lagexporter.Snapshot) { lost = append(lost, s.Time.Unix()) }}
	given := func(secs ...int64) []*lagexporter.Snapshot {
		var out []*lagexporter.Snapshot
		for _, s := range secs {
			out = append(out, &lagexporter.Snapshot{Time: time.Unix(s, 0)})
		}
		return out
	}
	// acks may arrive out of time order: the buffer sorts them
	b.keep(given(seq(5, 20)...))
	b.keep(given(4, 3, 2, 1))
	if want := fmt.Sprint(seq(1, 4)); fmt.Sprint(lost) != want {
		t.Fatalf("lost %v, want %s (the oldest beyond %d)", lost, want, maxHeldSnapshots)
	}
	var wrote []int64
	write := func(s *lagexporter.Snapshot) error { wrote = append(wrote, s.Time.Unix()); return nil }
	if err := b.handle(&lagexporter.Snapshot{Time: time.Unix(21, 0)}, false, write); err != nil { // standby: held
		t.Fatal(err)
	}
	if len(wrote) != 0 {
		t.Fatalf("standby wrote %v", wrote)
	}
	if err := b.handle(&lagexporter.Snapshot{Time: time.Unix(22, 0)}, true, write); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(seq(5, 22)); fmt.Sprint(wrote) != want {
		t.Fatalf("wrote %v, want %s", wrote, want)
	}
	if len(b.retry) != 0 || len(b.held) != 0 {
		t.Fatalf("%d kept, %d held after the write", len(b.retry), len(b.held))
	}
}
