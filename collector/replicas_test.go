package collector

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/latency"
)

// TestTwoReplicasOwnTheirProbes runs two collectors (replicas of `tidemark run`) on the real servers, sharing one
// probe topic of 2 partitions, one probe group prefix and one ClickHouse database. Each consumes every probe
// partition in its own group and measures only its own probes, so neither reports a loss or a duplicate, and
// probe_events keeps both replicas' rows apart by instance. With one shared group (the first release) the
// partitions were split between the replicas and each lost the probes it sent to the other's partition.
func TestTwoReplicasOwnTheirProbes(t *testing.T) {
	e := newEnv(t)
	// At least 2 partitions (so that one shared group would split them), and at least one per broker: with fewer, the
	// planner adds partitions while the replicas run, and a replica whose own planner did not add one reads it only
	// from its next reconcile on (ensureAssigned), later than this test looks.
	e.cfg.Probe.Partitions = int32(max(2, e.brokerCount()))
	replicas := map[string]*running{}
	for _, id := range []string{"replica-a", "replica-b"} {
		e.cfg.Probe.InstanceID = id
		replicas[id] = e.start(nil, nil)
	}
	stopped := false
	stopAll := func() {
		if !stopped {
			stopped = true
			for _, r := range replicas {
				r.stop(t)
			}
		}
	}
	t.Cleanup(stopAll)

	// Run until each replica's received probes span the loss timeout plus two rounds: by then every probe it sent
	// in the first rounds has either come back or been swept as lost and written.
	span := uint64((e.cfg.Probe.LossTimeout + 2*e.cfg.Probe.Interval).Milliseconds())
	spanQ := "SELECT toUInt64(max(send_ts_ms) - min(send_ts_ms)) FROM probe_events FINAL WHERE topic = ? AND instance = ? AND status = 'ok'"
	for id := range replicas {
		if got := e.waitCount(span, 90*time.Second, spanQ, e.cfg.Probe.Topic, id); got < span {
			t.Fatalf("%s: received probes span %d ms, want >= %d", id, got, span)
		}
	}
	stopAll() // the writers flush: every row either replica produced is in ClickHouse
	parts := e.partitions(e.cfg.Probe.Topic)
	if parts != int(e.cfg.Probe.Partitions) {
		t.Fatalf("probe topic has %d partitions, want %d", parts, e.cfg.Probe.Partitions)
	}
	for id, r := range replicas {
		if lost := e.count("SELECT count() FROM probe_events FINAL WHERE topic = ? AND instance = ? AND status = 'lost'", e.cfg.Probe.Topic, id); lost != 0 {
			t.Errorf("%s: %d probes stored as lost, want 0", id, lost)
		}
		if dups := e.count("SELECT count() FROM probe_events FINAL WHERE topic = ? AND instance = ? AND duplicates > 0", e.cfg.Probe.Topic, id); dups != 0 {
			t.Errorf("%s: %d probes stored with duplicates, want 0", id, dups)
		}
		// Every partition's probes came back to each replica.
		if got := e.count("SELECT uniqExact(partition) FROM probe_events FINAL WHERE topic = ? AND instance = ? AND status = 'ok'", e.cfg.Probe.Topic, id); got != uint64(parts) {
			t.Errorf("%s: probes received on %d partitions, want %d (every partition of the topic)", id, got, parts)
		}
		lost, dup := 0.0, 0.0
		for _, b := range []int32{1, 2, 3} {
			lost += testutil.ToFloat64(r.metrics.ProbeLost.WithLabelValues(brokerHost(b)))
			dup += testutil.ToFloat64(r.metrics.ProbeDup.WithLabelValues(brokerHost(b)))
		}
		if lost != 0 || dup != 0 {
			t.Errorf("%s: counters lost %v duplicates %v, want 0 and 0", id, lost, dup)
		}
		// It read the other replica's probes too, and skipped them.
		if foreign := testutil.ToFloat64(r.metrics.ProbeForeign); foreign == 0 {
			t.Errorf("%s: no foreign probes read; the replicas did not share the probe topic", id)
		}
	}
	// No row of one replica replaced the other's: every stored (partition, seq) pair belongs to one instance
	// unless both replicas happened to use it, and each instance's rows are all there.
	total := e.count("SELECT count() FROM probe_events FINAL WHERE topic = ?", e.cfg.Probe.Topic)
	byInstance := e.count("SELECT sum(c) FROM (SELECT count() AS c FROM probe_events FINAL WHERE topic = ? GROUP BY instance)", e.cfg.Probe.Topic)
	if total != byInstance || e.count("SELECT countIf(instance = '') FROM probe_events WHERE topic = ?", e.cfg.Probe.Topic) != 0 {
		t.Errorf("probe rows: %d in total, %d by instance, some without an instance", total, byInstance)
	}
}

// TestReplicasShareReceiptsAcrossRebalances: two collectors share the receipts group on the real servers. Replica A
// reads a first backlog alone; replica B joins (a rebalance splits the 3 partitions) and both read a second one; A
// stops (a second rebalance hands B everything) and B reads a third. Each receipt is stored exactly once by key and
// in one replay class, and both replicas did part of the work.
func TestReplicasShareReceiptsAcrossRebalances(t *testing.T) {
	e := newEnv(t)
	e.cfg.Probe.Enabled = false
	const per = 9000 // receipts per phase
	final := "SELECT count() FROM latency_events FINAL WHERE topic = 'orders'"
	// Records consumed: counted before the rows are handed to the writer, so before ClickHouse shows them.
	consumed := func(r *running) float64 { return testutil.ToFloat64(r.metrics.Records.WithLabelValues(PathReceipts)) }

	e.produceReceipts(0, per)
	e.cfg.Probe.InstanceID = "replica-a"
	a := e.start(nil, nil)
	aStopped := false
	t.Cleanup(func() {
		if !aStopped {
			a.stop(t)
		}
	})
	if got := e.waitCount(per, 60*time.Second, final); got != per {
		t.Fatalf("phase 1: %d rows, want %d", got, per)
	}
	e.cfg.Probe.InstanceID = "replica-b"
	b := e.start(nil, nil)
	t.Cleanup(func() { b.stop(t) })
	e.waitGroupMembers(e.cfg.Receipts.Group, 2)
	e.produceReceipts(per, per)
	if got := e.waitCount(2*per, 60*time.Second, final); got != 2*per {
		t.Fatalf("phase 2: %d rows, want %d", got, 2*per)
	}
	if consumed(b) == 0 {
		t.Fatal("replica B stored nothing of phase 2: the group did not share the receipts partitions")
	}
	a.stop(t) // leaves the group: B gets every partition
	aStopped = true
	e.produceReceipts(2*per, per)
	if got := e.waitCount(3*per, 60*time.Second, final); got != 3*per {
		t.Fatalf("phase 3: %d rows, want %d", got, 3*per)
	}
	if keys := e.count("SELECT uniqExact(partition, offset) FROM latency_events FINAL WHERE topic = 'orders'"); keys != 3*per {
		t.Fatalf("%d distinct keys, want %d", keys, 3*per)
	}
	if live := e.count("SELECT count() FROM latency_events FINAL WHERE topic = 'orders' AND replay_class = 'live'"); live != 3*per {
		t.Fatalf("%d live rows, want %d (each receipt processed once, in order)", live, 3*per)
	}
	t.Logf("receipt records consumed: A %v, B %v; physical rows %d", consumed(a), consumed(b), e.count("SELECT count() FROM latency_events WHERE topic = 'orders'"))
}

// TestReplicasMoveReplayState: the per-path replay state moves with the receipts partition. Replica A
// alone stores a group's first pass (3000 source offsets on each of 3 partitions); the group commits its end and is
// reset to earliest, which both replicas' lag exporters observe. Replica B joins (a rebalance moves receipts
// partitions, and their paths, to B) and the first half of the replay is read; A stops (B gets every partition)
// and the second half is read. One replica alone classifies this as 3000 live rows and 3000 replays per partition;
// two replicas must make exactly that, on the paths that moved as on the others: no replay taken for a first
// processing (live) or for a redelivery. (TestReplayStateMovesWithThePartition checks the moved path's rows field
// for field against one replica's.)
func TestReplicasMoveReplayState(t *testing.T) {
	e := newEnv(t)
	e.cfg.Probe.Enabled = false
	const per = 9000 // receipts per pass, 3000 per source partition
	final := "SELECT count() FROM latency_events FINAL WHERE topic = 'orders'"
	commits := func(at time.Time, off int64, rs ...*running) {
		s := &lagexporter.Snapshot{Time: at, Groups: []lagexporter.GroupLag{{Group: "app"}}}
		for p := int32(0); p < 3; p++ {
			s.Groups[0].Partitions = append(s.Groups[0].Partitions, lagexporter.PartitionLag{Topic: "orders", Partition: p, HasCommit: true, Committed: off})
		}
		for _, r := range rs { // as forwardLag does: the engine first, then the collector's checkpoints
			for _, p := range s.Groups[0].Partitions {
				r.engine.ObserveCommit(latency.CommitObservation{Group: "app", Topic: "orders", Partition: p.Partition, Offset: p.Committed, At: at})
			}
			if err := r.col.ObserveSnapshot(context.Background(), s); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.produceReceipts(0, per)
	e.cfg.Probe.InstanceID = "replica-a"
	a := e.start(nil, nil)
	aStopped := false
	t.Cleanup(func() {
		if !aStopped {
			a.stop(t)
		}
	})
	if got := e.waitCount(per, 60*time.Second, final); got != per {
		t.Fatalf("first pass: %d rows, want %d", got, per)
	}
	e.cfg.Probe.InstanceID = "replica-b"
	b := e.start(nil, nil)
	t.Cleanup(func() { b.stop(t) })
	first := time.Now().Truncate(time.Millisecond)
	commits(first, per/3, a, b)
	rewindAt := first.Add(time.Second)
	commits(rewindAt, 0, a, b) // reset to earliest: a rewind
	// The commits are durable in A's checkpoints (published every second) before B can be handed a partition.
	published := a.col.deps.checkpoints.Published.Load()
	for a.col.deps.checkpoints.Published.Load() < published+3 {
		time.Sleep(50 * time.Millisecond)
	}
	e.waitGroupMembers(e.cfg.Receipts.Group, 2)
	e.produceReceipts(0, per/2)
	if got := e.waitCount(per+per/2, 60*time.Second, final); got != per+per/2 {
		t.Fatalf("first half of the replay: %d rows, want %d", got, per+per/2)
	}
	if testutil.ToFloat64(b.metrics.Records.WithLabelValues(PathReceipts)) == 0 {
		t.Fatal("replica B read nothing: no partition moved")
	}
	a.stop(t)
	aStopped = true
	e.produceReceipts(per/2, per/2)
	if got := e.waitCount(2*per, 60*time.Second, final); got != 2*per {
		t.Fatalf("second half of the replay: %d rows, want %d", got, 2*per)
	}
	classes := map[string]uint64{}
	rows, err := e.conn.Query(context.Background(), "SELECT toString(replay_class), count() FROM latency_events FINAL WHERE topic = 'orders' GROUP BY replay_class")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		var n uint64
		if err := rows.Scan(&c, &n); err != nil {
			t.Fatal(err)
		}
		classes[c] = n
	}
	if len(classes) != 2 || classes["live"] != per || classes["replay"] != per {
		t.Fatalf("classes %v, want %d live and %d replay, nothing else", classes, per, per)
	}
	// Per source partition (one receipts partition each, moved or not): its first pass live, its replay a replay.
	for p := 0; p < 3; p++ {
		for _, c := range []string{"live", "replay"} {
			if n := e.count("SELECT count() FROM latency_events FINAL WHERE topic = 'orders' AND partition = ? AND replay_class = ?", p, c); n != per/3 {
				t.Errorf("partition %d: %d %s rows, want %d", p, n, c, per/3)
			}
		}
	}
}
