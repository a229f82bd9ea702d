package collector

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/latency"
)

// TestSkewedClusterChanges (issue 16, items 1 and 4) on a private 3-broker cluster whose broker 2 runs with its wall
// clock exactly 3 s ahead (libfaketime, deploy/local/kafka.sh's TIDEMARK_KAFKA_FAKETIME), one cluster for both
// because a skewed broker takes minutes to start on a busy machine:
//   - every broker is probed, and the probe brackets' hard interval holds broker 2's +3 s and broker 1's 0;
//   - whose clock stamped the append: records appended by broker 2 and handled after it failed over to broker 1 are
//     attributed to broker 2 (the leader of their epoch), those appended after the failover to broker 1; every
//     ingest the engine trusts is right within its uncertainty (attributed to today's leader they were 3 s off);
//   - broker 2 stops: once its partition is led by another broker it is no longer probed, so it stops counting as
//     loss; it starts again: within one reconcile interval the planner's preferred leader election hands its
//     partition back and its probes come back;
//   - a 4th broker joins: within one reconcile interval the planner adds a partition it leads and it is probed.
func TestSkewedClusterChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private 4-broker cluster")
	}
	k := testenv.StartPrivateCluster(t, 3, 4, "TIDEMARK_KAFKA_FAKETIME=2:+3s")
	e := newEnvOn(t, k.Brokers)
	const interval = 3 * time.Second
	e.cfg.Probe.ReconcileInterval = interval
	r := e.start(nil, nil)
	t.Cleanup(func() { r.stop(t) })
	probes := func(broker int, status string, from, to time.Time) uint64 {
		return e.count("SELECT count() FROM probe_events FINAL WHERE topic = ? AND broker_id = ? AND status = ? AND send_ts_ms >= ? AND send_ts_ms < ?",
			e.cfg.Probe.Topic, int32(broker), status, from.UnixMilli(), to.UnixMilli())
	}
	waitOK := func(broker int, since time.Time, within time.Duration) time.Duration {
		t.Helper()
		at := time.Now()
		if waitFor(1, within, func() int64 { return int64(probes(broker, "ok", since, time.Now().Add(time.Hour))) }) < 1 {
			t.Fatalf("no probe of broker %d sent after %v came back within %v", broker, since.Format(time.TimeOnly), within)
		}
		return time.Since(at)
	}
	start := time.Now()
	for b := 1; b <= 3; b++ {
		waitOK(b, start, 120*time.Second)
	}
	for _, c := range []struct {
		host string
		want time.Duration
	}{{"broker-1", 0}, {"broker-2", 3 * time.Second}} {
		o, err := r.engine.Offset(r.engine.Host(c.host), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if o.Kind != latency.KindBracketed || c.want < o.Lower || c.want > o.Upper {
			t.Errorf("%s: %v offset %v, interval [%v, %v]; want bracketed, containing %v", c.host, o.Kind, o.Offset, o.Lower, o.Upper, c.want)
		}
		t.Logf("%s: offset %v ± %v (true %v)", c.host, o.Offset, o.Uncertainty, c.want)
	}

	// A source partition led by broker 2, followed by broker 1. Receipts of its first records are handled while
	// broker 2 leads (so its epoch is seen, as in steady production), the next ones only after the failover.
	src := testenv.Name(t, "fo")
	adm, err := sarama.NewClusterAdmin(k.Brokers, testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	lat := "LogAppendTime"
	if err := adm.CreateTopic(src, &sarama.TopicDetail{NumPartitions: -1, ReplicationFactor: -1,
		ReplicaAssignment: map[int32][]int32{0: {2, 1}}, ConfigEntries: map[string]*string{"message.timestamp.type": &lat}}, false); err != nil {
		t.Fatal(err)
	}
	e.waitTopicReady(src, 1)
	const before, inFlight, after = 20, 30, 30
	e.produceApp(src, before, 0)
	e.consumeApp(src, 1, sarama.OffsetOldest, before, 0, 0)
	e.waitCount(before, 60*time.Second, "SELECT count() FROM latency_events FINAL WHERE topic = ?", src)
	e.produceApp(src, inFlight, 0)

	k.Run("stop-node", "2") // a controlled shutdown: its partitions' leadership moves before it exits
	stopped := time.Now()
	leader := func(topic string, p int32) int32 {
		md, err := adm.DescribeTopics([]string{topic})
		if err != nil || len(md) != 1 {
			return -1
		}
		for _, x := range md[0].Partitions {
			if x.ID == p {
				return x.Leader
			}
		}
		return -1
	}
	if got := waitFor(1, 60*time.Second, func() int64 { return int64(leader(src, 0)) }); got != 1 {
		t.Fatalf("after broker 2 stopped the source partition is led by %d, want 1", got)
	}
	e.produceApp(src, after, 0)
	e.consumeApp(src, 1, before, inFlight+after, 0, 0)
	const all = before + inFlight + after
	e.waitCount(all, 60*time.Second, "SELECT count() FROM latency_events FINAL WHERE topic = ?", src)
	rows, err := e.conn.Query(context.Background(), "SELECT offset, broker_host, ingest_ms, ingest_naive_ms, valid, uncertainty_ms "+
		"FROM latency_events FINAL WHERE topic = ? ORDER BY offset", src)
	if err != nil {
		t.Fatal(err)
	}
	trusted := map[string]int{}
	for rows.Next() {
		var off int64
		var broker string
		var ingest, naive int64
		var valid uint8
		var unc float64
		if err := rows.Scan(&off, &broker, &ingest, &naive, &valid, &unc); err != nil {
			t.Fatal(err)
		}
		want, shift := "broker-2", int64(3000)
		if off >= before+inFlight {
			want, shift = "broker-1", 0
		}
		if broker != want {
			t.Errorf("offset %d: append attributed to %q, want %q (the leader of its epoch)", off, broker, want)
		}
		// The producer's clock is the collector's and broker 2's is 3 s ahead exactly, so the true ingest is the naive
		// one less the broker's shift (±1 ms of truncation). A trusted ingest must be that within its uncertainty.
		if store.StageBits(valid)&store.ValidIngest != 0 {
			trusted[broker]++
			if d := math.Abs(float64(ingest - (naive - shift))); d > unc+2 {
				t.Errorf("offset %d (%s): trusted ingest %d ms, true %d ms, uncertainty %.1f ms", off, broker, ingest, naive-shift, unc)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("trusted ingests by broker: %v of %d records", trusted, all)

	time.Sleep(2*interval + e.cfg.Probe.LossTimeout) // a window in which a probe to broker 2 would have been sent and swept
	if n := probes(2, "ok", stopped.Add(e.cfg.Probe.Interval+time.Second), time.Now()) +
		probes(2, "lost", stopped.Add(e.cfg.Probe.Interval+time.Second), time.Now()); n != 0 {
		t.Errorf("%d probes sent to broker 2 after it stopped", n)
	}
	k.Run("start-node", "2")
	ready := time.Now()
	took := waitOK(2, ready, interval+90*time.Second)
	t.Logf("broker 2 probed again %v after it answered", took.Round(time.Millisecond))
	if got := testutil.ToFloat64(r.metrics.ProbePlanActions.WithLabelValues("elect")); got < 1 {
		t.Errorf("planner elections %v, want >= 1 (broker 2 got its partition back by the planner)", got)
	}

	k.AddNode(4)
	joined := time.Now()
	took = waitOK(4, joined, interval+90*time.Second)
	t.Logf("broker 4 probed %v after it joined", took.Round(time.Millisecond))
	if got := testutil.ToFloat64(r.metrics.ProbePlanActions.WithLabelValues("add_partition")); got != 1 {
		t.Errorf("partitions added %v, want 1", got)
	}
	leaders := map[int32]int32{}
	for p := int32(0); p < 4; p++ {
		leaders[p] = leader(e.cfg.Probe.Topic, p)
	}
	if want := map[int32]int32{0: 1, 1: 2, 2: 3, 3: 4}; fmt.Sprint(leaders) != fmt.Sprint(want) {
		t.Errorf("probe topic leaders %v, want %v", leaders, want)
	}
}
