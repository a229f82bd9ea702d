package collector

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/kafka/lagread"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// TestSkewedClusterChanges, on a private 3-broker cluster whose broker 2 runs with its
// wall clock exactly 3 s ahead (libfaketime, deploy/local/kafka.sh's TIDEMARK_KAFKA_FAKETIME), one cluster for all
// three because a 4-broker cluster is the costliest thing a test starts here:
//   - every broker is probed, and the probe brackets' hard interval holds broker 2's +3 s and broker 1's 0;
//   - whose clock stamped the append: records appended by broker 2 and handled after it failed over to broker 1 are
//     attributed to broker 2 (the leader of their epoch), those appended after the failover to broker 1; every
//     corrected ingest is right within its uncertainty, trusted or not (the producer's clock is the collector's,
//     known to 0.1 ms; attributed to today's leader they were 3 s off);
//   - time lag across the failover: a group whose first unconsumed record broker 2 appended has its time lag
//     measured from that stamp less broker 2's 3 s, before and after the failover (the appending broker found from
//     the batch's leader epoch); without the probes' offsets the same read is 3 s short, flagged uncorrected;
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
	synced := instrument.ProducerConfig{Host: "p1", Offsets: exactClock{}}
	// The first record, alone: broker 2 appended it between sent and acked (on our clock).
	sent := time.Now()
	e.produceWith(src, 1, synced)
	acked := time.Now()
	e.produceWith(src, before-1, synced)
	e.consumeApp(src, 1, sarama.OffsetOldest, before, 0, 0)
	e.waitCount(before, 60*time.Second, "SELECT count() FROM latency_events FINAL WHERE topic = ?", src)
	e.produceWith(src, inFlight, synced)

	// A group committed at 0: its first unconsumed record is the first one, appended by broker 2. Its coordinator
	// must not be broker 2: the stack's __consumer_offsets has replication factor 1, so while broker 2 is stopped a
	// group whose offsets partition it leads cannot be read by anyone (Kafka's own tools included), and the check
	// after the failover would wait on a group Kafka cannot answer for (seen: "coordinated by broker 2", no group
	// listed for 241 cycles). The name is chosen, not retried: the coordinator is a function of the name.
	cl, err := sarama.NewClient(k.Brokers, testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	var lagGroup string
	for i := 0; ; i++ {
		lagGroup = testenv.Name(t, fmt.Sprintf("lagging%d", i))
		b, err := cl.Coordinator(lagGroup)
		if err != nil {
			t.Fatal(err)
		}
		if b.ID() != 2 {
			t.Logf("group %s coordinated by broker %d", lagGroup, b.ID())
			break
		}
	}
	_ = cl.Close()
	commitAt(t, k.Brokers, lagGroup, src, 0, 0)
	timeLag := newTimeLagReader(t, k.Brokers, lagGroup, r.col)
	timeLag.check("before the failover", src, sent, acked)

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
	// Broker 1 leads now, and answers the record read: the stamp is still broker 2's.
	timeLag.check("after the failover", src, sent, acked)
	e.produceWith(src, after, synced)
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
		// The producer's clock is the collector's (reported exactly) and broker 2's is 3 s ahead exactly, so the
		// true ingest is the naive one less the broker's shift, to 2 ms (the broker's ms truncation, the stage's
		// rounding). Every corrected ingest must be that within its uncertainty, whether or not it is trusted (how
		// wide the brackets are depends on the machine's load; the attribution does not).
		if store.StageBits(valid)&store.ValidIngest != 0 {
			trusted[broker]++
		}
		if d := math.Abs(float64(ingest - (naive - shift))); d > unc+2 {
			t.Errorf("offset %d (%s): corrected ingest %d ms, true %d ms, uncertainty %.1f ms", off, broker, ingest, naive-shift, unc)
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

// commitAt commits offset for group on topic/partition, as a consumer that read nothing would have.
func commitAt(t *testing.T, brokers []string, group, topic string, partition int32, offset int64) {
	t.Helper()
	client, err := sarama.NewClient(brokers, testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	om, err := sarama.NewOffsetManagerFromClient(group, client)
	if err != nil {
		t.Fatal(err)
	}
	pom, err := om.ManagePartition(topic, partition)
	if err != nil {
		t.Fatal(err)
	}
	pom.MarkOffset(offset, "")  // forward only
	pom.ResetOffset(offset, "") // backward only
	om.Commit()
	_ = pom.Close()
	if err := om.Close(); err != nil {
		t.Fatal(err)
	}
}

// timeLagReader runs the lag exporter's loop over the cluster for one group, twice per check: with the collector's
// broker clocks (as tidemark run does) and without (as the one-shot tidemark lag does).
type timeLagReader struct {
	t                *testing.T
	group            string
	corrected, plain *lagexporter.Loop
	last             *lagexporter.Observation // the corrected loop's last observation
	col              *Collector
	cycleObs         *lagexporter.Observation // the observation of the cycle under way (either loop)
}

func newTimeLagReader(t *testing.T, brokers []string, group string, col *Collector) *timeLagReader {
	t.Helper()
	r := &timeLagReader{t: t, group: group, col: col}
	mk := func() *lagexporter.Loop {
		cfg := &lagexporter.Config{Cluster: "it", GroupAllow: []string{regexp.QuoteMeta(group)}}
		cfg.SetDefaults()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		cr, err := lagread.NewClusterReader(brokers, lagread.NewReaderConfig("tidemark-test"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cr.Close() })
		l, err := lagexporter.NewLoop(cfg, cr, time.Now)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	r.corrected, r.plain = mk(), mk()
	r.corrected.SetBrokerClocks(col.BrokerOffset)
	r.corrected.SetRecorder(func(o *lagexporter.Observation) error { r.last = o; r.cycleObs = o; return nil })
	r.plain.SetRecorder(func(o *lagexporter.Observation) error { r.cycleObs = o; return nil })
	return r
}

// check asserts the group's time lag on topic/0 whose first unconsumed record was appended between sent and acked
// (our clock) by broker 2, 3 s ahead: corrected, it lies in [now − acked, now − sent] widened by the offset's
// uncertainty and 1 ms of the broker's truncation; uncorrected it is 3 s less, or unknown (a future stamp).
func (r *timeLagReader) check(when, topic string, sent, acked time.Time) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	part := func(l *lagexporter.Loop) (lagexporter.PartitionLag, time.Time) {
		r.t.Helper()
		// Cycle until the record read is answered, at a poll interval of 250 ms as a running exporter would: a
		// leader move fails cycles (a stopped broker's connections, a moving group coordinator) until the reader's
		// metadata follows it.
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		prev := ""
		for i := 0; ; i++ {
			cs := time.Now()
			r.cycleObs = nil
			snap, err := l.Cycle(ctx) // a failed cycle returns no snapshot
			var g *lagexporter.GroupLag
			if snap != nil {
				g = snap.Group(r.group)
			}
			{ // every distinct outcome is logged: a cycle that fails to answer says why
				out := fmt.Sprintf("err=%v", err)
				if snap != nil {
					n := 0
					for _, gg := range snap.Groups {
						if gg.Group == r.group {
							n++
							out += fmt.Sprintf(" [gerr=%q parts=%d]", gg.Error, len(gg.Partitions))
						}
					}
					out += fmt.Sprintf(" entries=%d", n)
				}
				if g != nil {
					for _, p := range g.Partitions {
						if p.Topic == topic && p.Partition == 0 {
							out += fmt.Sprintf(" part known=%v tlk=%v flags=%s lag=%d", p.Known, p.TimeLagKnown, p.Flags, p.Lag)
						}
					}
				} else {
					out += " g=nil"
				}
				if o := r.cycleObs; o != nil {
					for _, e := range o.Errors {
						out += " | cerr " + e.Error()
					}
					for _, tt := range o.Topics {
						if tt.Topic == topic {
							for _, pp := range tt.Partitions {
								out += fmt.Sprintf(" | po leader=%d err=%q code=%s hw=%d", pp.Leader, pp.Error, pp.ErrorCode, pp.HighWatermark)
							}
						}
					}
					for _, rec := range o.Records {
						if rec.Topic == topic {
							out += fmt.Sprintf(" | rec off=%d first=%d tso=%d err=%q", rec.Offset, rec.FirstOffset, rec.TimestampOffset, rec.Error)
						}
					}
				}
				if out != prev {
					r.t.Logf("%s: cycle %d (%v): %s", when, i, time.Since(cs).Round(time.Millisecond), out)
					prev = out
				}
			}
			if g != nil {
				for _, p := range g.Partitions {
					if p.Topic == topic && p.Partition == 0 && p.TimeLagKnown && p.Flags&lagexporter.FlagEstimated == 0 ||
						p.Topic == topic && p.Partition == 0 && p.Flags&lagexporter.FlagFutureTimestamp != 0 {
						return p, snap.Time
					}
				}
			}
			select {
			case <-ctx.Done():
				r.t.Fatalf("%s: no record-based time lag for %s after %d cycles: %+v (last error: %v)", when, r.group, i+1, g, err)
			case <-tick.C:
			}
		}
	}
	p, now := part(r.corrected)
	var clock *lagexporter.AppendClock
	for _, rec := range r.last.Records {
		if rec.Topic == topic && rec.Partition == 0 {
			clock = rec.AppendClock
		}
	}
	if clock == nil || clock.Broker != 2 || !clock.Known {
		r.t.Fatalf("%s: the record's append clock %+v, want broker 2's, known", when, clock)
	}
	slack := clock.Uncertainty + time.Millisecond
	lo, hi := now.Sub(acked)-slack, now.Sub(sent)+slack
	if p.Flags&lagexporter.FlagClockCorrected == 0 || !p.TimeLagKnown || p.TimeLag < lo || p.TimeLag > hi {
		r.t.Errorf("%s: time lag %v (known %v, flags %s), want corrected, in [%v, %v]", when, p.TimeLag, p.TimeLagKnown, p.Flags, lo, hi)
	}
	q, now2 := part(r.plain)
	shift := 3 * time.Second
	lo2, hi2 := now2.Sub(acked)-shift-time.Millisecond, now2.Sub(sent)-shift+time.Millisecond
	switch {
	case q.Flags&lagexporter.FlagClockUncorrected == 0:
		r.t.Errorf("%s: without broker clocks, flags %s, want append_clock_uncorrected", when, q.Flags)
	case q.Flags&lagexporter.FlagFutureTimestamp != 0:
		// Younger than 3 s: broker 2's stamp is in our future, and the record gives no time lag (an interpolated
		// one may stand in, flagged estimated).
	case q.TimeLag < lo2 || q.TimeLag > hi2:
		r.t.Errorf("%s: without broker clocks, time lag %v, want broker 2's 3 s short: [%v, %v]", when, q.TimeLag, lo2, hi2)
	}
	r.t.Logf("%s: time lag %v corrected (±%v), %v (known %v) uncorrected", when, p.TimeLag, clock.Uncertainty, q.TimeLag, q.TimeLagKnown)
}
