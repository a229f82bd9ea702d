package lagread

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/timeline"
)

// lagEnv is a loop over the real cluster restricted to one test's topics and groups.
type lagEnv struct {
	t      *testing.T
	prefix string
	reader *ClusterReader
	loop   *lagexporter.Loop
	cfg    *lagexporter.Config
}

func newLagEnv(t *testing.T, mutate func(*lagexporter.Config)) *lagEnv {
	t.Helper()
	return newLagEnvOn(t, testenv.Kafka(t), mutate)
}

// newLagEnvOn is newLagEnv on another cluster (a private broker).
func newLagEnvOn(t *testing.T, brokers []string, mutate func(*lagexporter.Config)) *lagEnv {
	t.Helper()
	prefix := testenv.Name(t, "lag")
	r, err := NewClusterReader(brokers, testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	cfg := &lagexporter.Config{Cluster: "it", GroupAllow: []string{prefix + ".*"}, TopicAllow: []string{prefix + ".*"}}
	if mutate != nil {
		mutate(cfg)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	loop, err := lagexporter.NewLoop(cfg, r, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return &lagEnv{t: t, prefix: prefix, reader: r, loop: loop, cfg: cfg}
}

func (e *lagEnv) topic(suffix string, parts int32, configs map[string]string) string {
	name := e.prefix + "_" + suffix
	testenv.CreateNamedTopic(e.t, name, testenv.Topic{Partitions: parts, Configs: configs})
	e.waitLeadersKnow(name, parts)
	return name
}

// waitLeadersKnow waits (up to 30 s) until the reader's own Metadata lists every partition of topic with a leader
// and every leader answers ListOffsets for it. A new topic reaches each broker's metadata cache separately in
// KRaft: testenv's readiness check asks one broker, while the broker the reader asks may name a leader that has not
// learned of its leadership yet and answers NOT_LEADER_OR_FOLLOWER. Tests that then inject a fault must start
// from a cluster that agrees with itself, or an unrelated partition fails too.
func (e *lagEnv) waitLeadersKnow(topic string, parts int32) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		last = func() error {
			md, err := e.reader.Metadata(ctx)
			if err != nil {
				return err
			}
			for _, to := range md {
				if to.Topic != topic {
					continue
				}
				if int32(len(to.Partitions)) != parts {
					return fmt.Errorf("%d of %d partitions in metadata", len(to.Partitions), parts)
				}
				_, err := e.reader.ListOffsets(ctx, []lagexporter.TopicObservation{to})
				return err
			}
			return fmt.Errorf("topic %s not in metadata", topic)
		}()
		if last == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("partition leaders of %s do not agree after 30s: %v", topic, last)
}

func (e *lagEnv) cycle() *lagexporter.Snapshot {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := e.loop.Cycle(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// waitGroup cycles until the group satisfies ok (group listings and commits propagate asynchronously).
func (e *lagEnv) waitGroup(group string, ok func(*lagexporter.GroupLag) bool) *lagexporter.GroupLag {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last *lagexporter.GroupLag
	for time.Now().Before(deadline) {
		s := e.cycle()
		last = s.Group(group)
		if ok(last) {
			return last
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.t.Fatalf("group %s never reached the expected state; last: %+v", group, last)
	return nil
}

func (e *lagEnv) commit(group string, offsets map[string]map[int32]int64) {
	e.t.Helper()
	if err := e.reader.CommitOffsets(context.Background(), group, offsets); err != nil {
		e.t.Fatal(err)
	}
	adm := testenv.Admin(e.t)
	e.t.Cleanup(func() { _ = adm.DeleteConsumerGroup(group) })
}

// produce sends n records to each listed partition with CreateTime ts (zero: now) and returns when acked.
func produce(t *testing.T, topic string, parts []int32, n int, ts time.Time) {
	t.Helper()
	cfg := testenv.SaramaConfig(t)
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(testenv.Kafka(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []*sarama.ProducerMessage
	for _, part := range parts {
		for i := range n {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: part, Value: sarama.StringEncoder(strconv.Itoa(i)), Timestamp: ts})
		}
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
}

func partLag(t *testing.T, g *lagexporter.GroupLag, topic string, p int32) *lagexporter.PartitionLag {
	t.Helper()
	if g == nil {
		t.Fatal("group missing")
	}
	pl := g.Partition(topic, p)
	if pl == nil {
		t.Fatalf("group %s has no %s/%d; partitions: %+v", g.Group, topic, p, g.Partitions)
	}
	return pl
}

// TestClusterBasicAndTimestampTypes: offsets, lag and time lag from real record timestamps on a CreateTime topic
// (the producer's stamp, here one hour old) and a LogAppendTime topic (the broker's append time, seconds old).
func TestClusterBasicAndTimestampTypes(t *testing.T) {
	e := newLagEnv(t, nil)
	create := e.topic("create", 2, nil)
	appendT := e.topic("append", 1, map[string]string{"message.timestamp.type": "LogAppendTime"})
	old := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	produce(t, create, []int32{0, 1}, 10, old)
	produce(t, appendT, []int32{0}, 10, old)
	group := e.prefix + "_g"
	e.commit(group, map[string]map[int32]int64{create: {0: 4, 1: 10}, appendT: {0: 3}})
	g := e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && len(g.Partitions) == 3 })

	p := partLag(t, g, create, 0)
	if p.Lag != 6 || p.End != 10 || p.Committed != 4 || !p.TimeLagKnown || p.Flags != 0 {
		t.Fatalf("create/0 = %+v, want lag 6 end 10 committed 4 exact time lag", *p)
	}
	// exact: the observation time minus the producer's stamp of record 4, read back from the broker
	if want := e.loop.Latest().Time.Sub(old); p.TimeLag != want {
		t.Fatalf("CreateTime time lag %v, want %v (observation time - the record's CreateTime)", p.TimeLag, want)
	}
	if p := partLag(t, g, create, 1); p.Lag != 0 || p.TimeLag != 0 {
		t.Fatalf("create/1 = %+v, want caught up", *p)
	}
	p = partLag(t, g, appendT, 0)
	if p.Lag != 7 || !p.TimeLagKnown || p.TimeLag > time.Minute {
		t.Fatalf("append/0 = %+v, want lag 7 and a time lag of seconds (broker append time overrides the hour-old stamp)", *p)
	}
	// The broker's clock, not ours, and this loop has no collector to correct it: said so. The
	// record read names the broker that appended it, the leader of its batch's epoch (the partition's only leader).
	if p.Flags != lagexporter.FlagClockUncorrected {
		t.Fatalf("append/0 flags %s, want append_clock_uncorrected", p.Flags)
	}
	got, err := e.reader.ReadRecords(context.Background(), []lagexporter.RecordRequest{{Topic: appendT, Partition: 0, Offset: 3, End: 10}})
	if err != nil || len(got) != 1 || got[0].AppendClock == nil {
		t.Fatalf("record read %+v (%v), want one with its append clock", got, err)
	}
	e.reader.mu.Lock()
	leader := e.reader.leaders[tp{appendT, 0}]
	e.reader.mu.Unlock()
	if got[0].AppendClock.Broker != leader || leader < 0 {
		t.Fatalf("record appended by %d, want the leader of its epoch, %d", got[0].AppendClock.Broker, leader)
	}
	if g.Total.Lag != 13 || g.State != "Empty" || len(g.Members) != 0 || !g.SimpleConsumer {
		t.Fatalf("group = lag %d state %q members %d simple %v, want 13 Empty 0 true (C14: commits without membership)",
			g.Total.Lag, g.State, len(g.Members), g.SimpleConsumer)
	}
}

// TestClusterLastStableUnderLoad: on a topic without transactions the last stable offset is the high watermark,
// however fast records arrive between ListOffsets' reads: no cycle may show offsets of an open transaction there.
func TestClusterLastStableUnderLoad(t *testing.T) {
	e := newLagEnv(t, nil)
	topic := e.topic("lso", 1, nil)
	cfg := testenv.SaramaConfig(t)
	cfg.Producer.RequiredAcks = sarama.WaitForLocal
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(testenv.Kafka(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("x")}); err != nil {
				done <- err
				return
			}
		}
	}()
	md, err := e.reader.Metadata(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var to lagexporter.TopicObservation
	for _, m := range md {
		if m.Topic == topic {
			to = m
		}
	}
	reads, moved := 0, 0
	var last int64 = -1
	for deadline := time.Now().Add(time.Minute); moved < 50 && time.Now().Before(deadline); {
		got, err := e.reader.ListOffsets(context.Background(), []lagexporter.TopicObservation{to})
		if err != nil {
			t.Fatal(err)
		}
		po := got[0].Partitions[0]
		if !po.Known() {
			t.Fatalf("partition unknown: %+v", po)
		}
		if po.LastStable != po.HighWatermark {
			close(stop)
			t.Fatalf("read %d: LSO %d, HW %d on a topic without transactions", reads, po.LastStable, po.HighWatermark)
		}
		if po.HighWatermark != last {
			moved++
		}
		last = po.HighWatermark
		reads++
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if moved < 50 {
		t.Fatalf("the high watermark moved in %d of %d reads in a minute: the load did not run between them", moved, reads)
	}
	t.Logf("%d reads, the high watermark moved in %d", reads, moved)
}

// TestClusterTransactions is C01 on the real broker: a committed transaction leaves a COMMIT marker at the tail; a
// read_committed group that processed every record has raw lag 1 and effective lag 0. An aborted transaction
// followed by a plain record leaves effective lag 1.
func TestClusterTransactions(t *testing.T) {
	e := newLagEnv(t, func(c *lagexporter.Config) {
		c.Groups = []lagexporter.GroupRule{{Match: ".*_rc", Isolation: lagexporter.ReadCommitted}}
	})
	topic := e.topic("tx", 2, nil)
	cfg := testenv.SaramaConfig(t)
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Transaction.ID = e.prefix + "_txid"
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(testenv.Kafka(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func(part int32, n int, commit bool) {
		if err := p.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: part, Value: sarama.StringEncoder(strconv.Itoa(i))}); err != nil {
				t.Fatal(err)
			}
		}
		if commit {
			err = p.CommitTxn()
		} else {
			err = p.AbortTxn()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// EndTxn returns before the coordinator has written the markers: wait for them (LSO = HW) so that the layout is
	// exactly the case's.
	waitStable := func(part int32, hw int64) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			md, err := e.reader.Metadata(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, to := range md {
				if to.Topic != topic {
					continue
				}
				got, _ := e.reader.ListOffsets(context.Background(), []lagexporter.TopicObservation{to})
				if po := got[0].Partitions[part]; po.Known() && po.HighWatermark == hw && po.LastStable == hw {
					return
				}
			}
		}
		t.Fatalf("partition %d never reached LSO = HW = %d", part, hw)
	}
	send(0, 5, true) // p0: 0..4 data, 5 COMMIT: HW 6
	waitStable(0, 6)
	send(1, 1, false) // p1: 0 aborted data, 1 ABORT marker
	waitStable(1, 2)
	produce(t, topic, []int32{1}, 1, time.Time{}) // p1: 2 plain record: HW 3
	rc, ru := e.prefix+"_rc", e.prefix+"_ru"
	e.commit(rc, map[string]map[int32]int64{topic: {0: 5, 1: 0}})
	e.commit(ru, map[string]map[int32]int64{topic: {0: 5, 1: 0}})
	var s *lagexporter.Snapshot
	deadline := time.Now().Add(30 * time.Second)
	for s = e.cycle(); time.Now().Before(deadline) && (s.Group(rc) == nil || s.Group(ru) == nil); s = e.cycle() {
		time.Sleep(200 * time.Millisecond)
	}
	p0 := partLag(t, s.Group(rc), topic, 0)
	if p0.End != 6 || p0.RawLag != 1 || p0.Lag != 0 || !p0.Flags.Has(lagexporter.FlagControlRecords) || s.Group(rc).Status != lagexporter.StatusOK {
		t.Fatalf("C01 p0 = %+v, want end 6 raw 1 effective 0 control_records OK", *p0)
	}
	p1 := partLag(t, s.Group(rc), topic, 1)
	if p1.RawLag != 3 || p1.Lag != 1 {
		t.Fatalf("C01 variant p1 (read_committed) = %+v, want raw 3 effective 1 (only offset 2 is consumable)", *p1)
	}
	// read_uncommitted receives the aborted record: effective lag 2 (offsets 0 and 2); the marker still is not backlog.
	if p := partLag(t, s.Group(ru), topic, 1); p.RawLag != 3 || p.Lag != 3 {
		// the first consumable record for read_uncommitted is offset 0 itself, so no leading skip: effective = raw
		t.Fatalf("p1 (read_uncommitted) = %+v, want raw 3 effective 3", *p)
	}
	if p := partLag(t, s.Group(ru), topic, 0); p.Lag != 0 {
		t.Fatalf("p0 (read_uncommitted) = %+v, want effective 0 (only the marker remains)", *p)
	}
}

// TestClusterDeleteRecords is C05: DeleteRecords moves the log start past the commit.
func TestClusterDeleteRecords(t *testing.T) {
	e := newLagEnv(t, nil)
	topic := e.topic("del", 1, nil)
	produce(t, topic, []int32{0}, 100, time.Time{})
	group := e.prefix + "_g"
	e.commit(group, map[string]map[int32]int64{topic: {0: 10}})
	if err := testenv.Admin(t).DeleteRecords(topic, map[int32]int64{0: 60}); err != nil {
		t.Fatal(err)
	}
	g := e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && len(g.Partitions) == 1 })
	p := partLag(t, g, topic, 0)
	if p.LogStart != 60 || p.Lag != 40 || p.ExpiredOffsets != 50 || !p.Flags.Has(lagexporter.FlagExpired) {
		t.Fatalf("C05 = %+v, want log start 60 lag 40 expired 50", *p)
	}
}

// TestClusterNoCommitAndAddedPartitions is C06 and C10: a real consumer member is assigned partitions without
// commits; partitions added later are in scope before their first commit.
func TestClusterNoCommitAndAddedPartitions(t *testing.T) {
	e := newLagEnv(t, func(c *lagexporter.Config) {
		c.Groups = []lagexporter.GroupRule{{Match: ".*_latest", Reset: lagexporter.ResetLatest}}
	})
	topic := e.topic("nc", 2, nil)
	produce(t, topic, []int32{0}, 30, time.Time{})
	group, latest := e.prefix+"_g", e.prefix+"_latest"
	e.commit(group, map[string]map[int32]int64{topic: {1: 0}})
	e.commit(latest, map[string]map[int32]int64{topic: {1: 0}})
	g := e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && len(g.Partitions) == 2 })
	p := partLag(t, g, topic, 0)
	if p.HasCommit || p.Lag != 30 || !p.Flags.Has(lagexporter.FlagNoCommit) {
		t.Fatalf("C06 p0 = %+v, want no commit, lag 30 from the log start", *p)
	}
	if g.Total.CommittedSum != 0 || g.Total.Lag != 30 {
		t.Fatalf("C06 aggregate = %+v, want committed sum 0 (no -1 added), lag 30", g.Total)
	}
	if p := partLag(t, e.cycle().Group(latest), topic, 0); p.Lag != 0 || !p.Flags.Has(lagexporter.FlagNoCommit) {
		t.Fatalf("C06 reset=latest p0 = %+v, want lag 0, still no_commit", *p)
	}
	// C10: grow the topic to 4 partitions and write 12 records to the new p2.
	if err := testenv.Admin(t).CreatePartitions(topic, 4, nil, false); err != nil {
		t.Fatal(err)
	}
	testenv.WaitTopicReady(t, topic, 4)
	produce(t, topic, []int32{2}, 12, time.Time{})
	g = e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && len(g.Partitions) == 4 })
	if p := partLag(t, g, topic, 2); p.Lag != 12 || p.HasCommit {
		t.Fatalf("C10 p2 = %+v, want lag 12 without a commit", *p)
	}
	if p := partLag(t, g, topic, 3); p.Lag != 0 {
		t.Fatalf("C10 p3 = %+v, want 0", *p)
	}
	if g.Total.Lag != 42 {
		t.Fatalf("C10 sum %d, want 42", g.Total.Lag)
	}
}

type markAll struct {
	ready chan struct{}
	once  bool
}

func (h *markAll) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *markAll) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *markAll) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		s.MarkMessage(m, "")
		s.Commit()
		if m.Offset == c.HighWaterMarkOffset()-1 && !h.once {
			h.once = true
			close(h.ready)
		}
	}
	return nil
}

// TestClusterEmptyGroupAndDeletion is C11 and C15: a real member consumes everything and leaves; the group is Empty
// and its lag keeps growing with new records; after DeleteConsumerGroup its series are gone.
func TestClusterEmptyGroupAndDeletion(t *testing.T) {
	e := newLagEnv(t, nil)
	topic := e.topic("empty", 1, nil)
	produce(t, topic, []int32{0}, 20, time.Time{})
	group := e.prefix + "_g"
	cfg := testenv.SaramaConfig(t)
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cg, err := sarama.NewConsumerGroup(testenv.Kafka(t), group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &markAll{ready: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- cg.Consume(ctx, []string{topic}, h) }()
	select {
	case <-h.ready:
	case <-time.After(60 * time.Second):
		t.Fatal("consumer did not reach the end in 60s")
	}
	g := e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && len(g.Members) == 1 && g.Total.Lag == 0 })
	if g.State != "Stable" || g.Members[0].Assignment[topic] == nil {
		t.Fatalf("live group = state %q members %+v, want Stable with an assignment", g.State, g.Members)
	}
	cancel()
	<-done
	if err := cg.Close(); err != nil {
		t.Fatal(err)
	}
	produce(t, topic, []int32{0}, 15, time.Time{})
	g = e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && g.State == "Empty" && g.Total.Lag == 15 })
	if len(g.Partitions) != 1 || g.Partitions[0].Committed != 20 {
		t.Fatalf("C11 = %+v, want committed 20, lag 15 while Empty", g.Partitions)
	}
	if err := testenv.Admin(t).DeleteConsumerGroup(group); err != nil {
		t.Fatal(err)
	}
	e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g == nil })
}

var cgLine = regexp.MustCompile(`^(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\S+)`)

// TestClusterMatchesConsumerGroupsCommand: on a quiesced cluster Tidemark's offset lag equals the LAG column of
// Kafka's own consumer-groups command (which measures HW − committed and prints "-" without a commit).
func TestClusterMatchesConsumerGroupsCommand(t *testing.T) {
	lib := testenv.KafkaLib(t)
	e := newLagEnv(t, nil)
	topic := e.topic("peer", 3, nil)
	produce(t, topic, []int32{0, 1, 2}, 50, time.Time{})
	var groups []string
	for i := range 3 {
		g := fmt.Sprintf("%s_g%d", e.prefix, i)
		groups = append(groups, g)
		e.commit(g, map[string]map[int32]int64{topic: {0: int64(10 * i), 1: 50, 2: int64(5 + i)}})
	}
	var s *lagexporter.Snapshot
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		s = e.cycle()
		if len(s.Groups) == 3 {
			break
		}
	}
	args := []string{"-cp", lib + "/*", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
		"--bootstrap-server", strings.Join(testenv.Kafka(t), ","), "--describe"}
	for _, g := range groups {
		args = append(args, "--group", g)
	}
	out, err := exec.Command("java", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("consumer-groups command: %v\n%s", err, out)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := cgLine.FindStringSubmatch(sc.Text())
		if m == nil || m[1] == "GROUP" {
			continue
		}
		part, _ := strconv.Atoi(m[3])
		g := s.Group(m[1])
		pl := partLag(t, g, m[2], int32(part))
		if m[6] == "-" {
			if pl.HasCommit {
				t.Errorf("%s %s/%d: Kafka prints no lag, Tidemark has a commit", m[1], m[2], part)
			}
		} else if lag, _ := strconv.ParseInt(m[6], 10, 64); lag != pl.Lag {
			t.Errorf("%s %s/%d: Kafka lag %d, Tidemark %d (%+v)", m[1], m[2], part, lag, pl.Lag, *pl)
		}
		n++
	}
	if n != 9 {
		t.Fatalf("compared %d rows, want 9; command output:\n%s", n, out)
	}
}

// TestClusterRequestsPerCycle: a steady cycle costs O(brokers + coordinators) requests, independent of the number of
// groups: at most 1 metadata + per broker 1 list and 1 describe per group type it coordinates (classic, consumer,
// share, streams: other tests' groups may be of any type) + 1 offset fetch per coordinator + 3 list offsets per leader
// + record fetches per leader and isolation.
func TestClusterRequestsPerCycle(t *testing.T) {
	e := newLagEnv(t, nil)
	topic := e.topic("req", 6, nil)
	produce(t, topic, []int32{0, 1, 2, 3, 4, 5}, 5, time.Time{})
	for i := range 40 {
		e.commit(fmt.Sprintf("%s_g%02d", e.prefix, i), map[string]map[int32]int64{topic: {0: 1, 1: 2, 2: 3, 3: 4, 4: 5, 5: 0}})
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if len(e.cycle().Groups) == 40 {
			break
		}
	}
	e.cycle() // warm the record cache
	before := e.reader.Requests()
	s := e.cycle()
	got := e.reader.Requests() - before
	b := int64(len(e.reader.Brokers()))
	if limit := 1 + (1+4)*b + b + 3*b + 2*b; got > limit || len(s.Groups) != 40 {
		t.Fatalf("%d requests for %d groups on %d brokers, want <= %d", got, len(s.Groups), b, limit)
	}
	t.Logf("%d requests per cycle for 40 groups x 6 partitions on %d brokers", got, b)
}

// TestClusterReadRecordsRounds: requests for several offsets of one partition share Fetches: the lowest offset is
// fetched and every request its batches cover is answered from them; the rest need further rounds, bounded per call
// (requests beyond the bound fail for this call and are asked again next cycle).
func TestClusterReadRecordsRounds(t *testing.T) {
	e := newLagEnv(t, nil)
	topic := e.topic("rounds", 1, nil)
	cfg := testenv.SaramaConfig(t)
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(testenv.Kafka(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	val := strings.Repeat("x", 100)
	for b := range 100 { // 100 batches of 20 records (~2.5 KB each): a 16 KiB fetch covers a few batches
		var msgs []*sarama.ProducerMessage
		for i := range 20 {
			off := b*20 + i
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder(val),
				Timestamp: base.Add(time.Duration(off) * time.Millisecond)})
		}
		if err := p.SendMessages(msgs); err != nil {
			t.Fatal(err)
		}
	}
	_ = p.Close()
	md, err := e.reader.Metadata(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, to := range md {
		if to.Topic == topic {
			id = to.ID
		}
	}
	offsets := []int64{0, 10, 1500, 1700, 1900}
	var reqs []lagexporter.RecordRequest
	for _, o := range offsets {
		reqs = append(reqs, lagexporter.RecordRequest{Topic: topic, TopicID: id, Partition: 0, Offset: o, End: 2000, Isolation: lagexporter.ReadUncommitted})
	}
	before := e.reader.Requests()
	got, _ := e.reader.ReadRecords(context.Background(), reqs)
	if n := e.reader.Requests() - before; n != maxFetchRounds {
		t.Errorf("%d fetches, want %d rounds (0 covers 10; 1500, 1700 and 1900 are batches apart)", n, maxFetchRounds)
	}
	for i, r := range got {
		if i == len(got)-1 { // beyond the round limit
			if r.Error == "" {
				t.Errorf("offset %d answered beyond the round limit: %+v", r.Offset, r)
			}
			continue
		}
		if r.Error != "" || r.FirstOffset != offsets[i] || r.TimestampOffset != offsets[i] ||
			!r.Timestamp.Equal(base.Add(time.Duration(offsets[i])*time.Millisecond)) {
			t.Errorf("offset %d: %+v, want the record itself and its CreateTime", offsets[i], r)
		}
	}
}

// recordingFixture makes the topic of the record/eval tests: 2 partitions of 20 records produced a minute ago, and a
// group committed at 5 and 20 that the loop has seen.
func (e *lagEnv) recordingFixture(suffix string) (topic, group string) {
	e.t.Helper()
	topic, group = e.topic(suffix, 2, nil), e.prefix+"_g"
	produce(e.t, topic, []int32{0, 1}, 20, time.Now().Add(-time.Minute))
	e.commit(group, map[string]map[int32]int64{topic: {0: 5, 1: 20}})
	e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && len(g.Partitions) == 2 })
	return topic, group
}

// recorder writes a timeline of this test's groups and topics to buf, as `lag record` does.
func (e *lagEnv) recorder(buf *bytes.Buffer) *timeline.Writer {
	return timeline.NewWriter(buf, &timeline.ConfigBlock{Cluster: "it", GroupAllow: []string{e.prefix + ".*"},
		TopicAllow: []string{e.prefix + ".*"}})
}

// TestClusterRecordThenEval: a timeline recorded from the real cluster replays through Eval to the same numbers.
func TestClusterRecordThenEval(t *testing.T) {
	e := newLagEnv(t, nil)
	topic, group := e.recordingFixture("rec")
	var buf bytes.Buffer
	e.loop.SetRecorder(e.recorder(&buf).Write)
	var live []*lagexporter.Snapshot
	for range 2 {
		live = append(live, e.cycle())
	}
	tl, err := timeline.Read(&buf, "recorded")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &lagexporter.Config{}
	if err := tl.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	i := 0
	err = timeline.Eval(context.Background(), tl, cfg, func(_ int, s *lagexporter.Snapshot) error {
		a, b := live[i].Group(group), s.Group(group)
		for _, pa := range a.Partitions {
			pb := b.Partition(pa.Topic, pa.Partition)
			if pb == nil || pb.Lag != pa.Lag || pb.TimeLag != pa.TimeLag || pb.Flags != pa.Flags || pb.Committed != pa.Committed {
				t.Errorf("poll %d %s/%d: replay %+v, live %+v", i+1, pa.Topic, pa.Partition, pb, pa)
			}
		}
		i++
		return nil
	})
	if err != nil || i != 2 {
		t.Fatalf("eval: %v after %d polls", err, i)
	}
	if p := live[1].Group(group).Partition(topic, 0); p.Lag != 15 || !p.TimeLagKnown || p.Flags.Has(lagexporter.FlagEstimated) {
		t.Fatalf("live p0 = %+v, want lag 15 with an exact time lag", *p)
	}
}

// TestClusterRecreatedTopic: a topic deleted and re-created under the same name is a new incarnation (new topic id):
// nothing of the old one (offsets, windows, cached records) is reused.
func TestClusterRecreatedTopic(t *testing.T) {
	e := newLagEnv(t, nil)
	topic := e.topic("recreate", 1, nil)
	produce(t, topic, []int32{0}, 50, time.Time{})
	group := e.prefix + "_g"
	e.commit(group, map[string]map[int32]int64{topic: {0: 10}})
	g := e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && len(g.Partitions) == 1 })
	oldID := e.loop.Latest().Topics[0].ID
	if p := partLag(t, g, topic, 0); p.Lag != 40 {
		t.Fatalf("before: %+v, want lag 40", *p)
	}
	adm := testenv.Admin(t)
	if err := adm.DeleteTopic(topic); err != nil {
		t.Fatal(err)
	}
	// the deleted topic leaves the group's scope: its series disappear
	e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && len(g.Partitions) == 0 })
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err = adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("re-create %s: %v", topic, err)
	}
	testenv.WaitTopicReady(t, topic, 1)
	produce(t, topic, []int32{0}, 3, time.Time{})
	e.commit(group, map[string]map[int32]int64{topic: {0: 1}})
	g = e.waitGroup(group, func(g *lagexporter.GroupLag) bool {
		return g != nil && len(g.Partitions) == 1 && g.Partitions[0].End == 3
	})
	s := e.loop.Latest()
	if s.Topics[0].ID == oldID {
		t.Fatalf("topic id unchanged after re-creation: %s", oldID)
	}
	if p := partLag(t, g, topic, 0); p.Lag != 2 || p.Committed != 1 || p.Flags != 0 {
		t.Fatalf("after re-creation: %+v, want lag 2 from the new commit, no flags", *p)
	}
}

type holdAll struct{ claimed chan struct{} }

func (h *holdAll) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *holdAll) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *holdAll) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	select {
	case h.claimed <- struct{}{}:
	default:
	}
	<-s.Context().Done() // a live member that never makes progress
	return nil
}

// TestClusterStatusStallThenStop: a live member that holds its partition without committing is STALL once a full
// window shows the same commit with lag; once its last commit change is older than stop_after it is STOP (C12).
func TestClusterStatusStallThenStop(t *testing.T) {
	e := newLagEnv(t, func(c *lagexporter.Config) {
		c.Status.Window = 3
		c.Status.StopAfter = 4 * time.Second
	})
	topic := e.topic("stall", 1, nil)
	produce(t, topic, []int32{0}, 30, time.Time{})
	group := e.prefix + "_g"
	e.commit(group, map[string]map[int32]int64{topic: {0: 10}})
	cfg := testenv.SaramaConfig(t)
	cg, err := sarama.NewConsumerGroup(testenv.Kafka(t), group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); _ = cg.Close() }()
	h := &holdAll{claimed: make(chan struct{}, 1)}
	go func() { _ = cg.Consume(ctx, []string{topic}, h) }()
	select {
	case <-h.claimed:
	case <-time.After(60 * time.Second):
		t.Fatal("member never got its partition")
	}
	g := e.waitGroup(group, func(g *lagexporter.GroupLag) bool {
		return g != nil && len(g.Members) == 1 && g.Status == lagexporter.StatusStall
	})
	if p := partLag(t, g, topic, 0); p.Lag != 20 || p.Committed != 10 {
		t.Fatalf("stalled partition = %+v, want lag 20 at commit 10", *p)
	}
	time.Sleep(4 * time.Second)
	g = e.waitGroup(group, func(g *lagexporter.GroupLag) bool { return g != nil && g.Status == lagexporter.StatusStop })
	if g.State != "Stable" {
		t.Fatalf("state %q, want Stable (the member is alive; it just does not commit)", g.State)
	}
}

// TestClusterPartialFailure: when one broker cannot be reached, partitions it leads are marked (Error) and every other
// partition keeps its offsets; the error names the broker.
func TestClusterPartialFailure(t *testing.T) {
	e := newLagEnv(t, nil)
	testenv.NeedBrokers(t, 2)
	topic := e.topic("partial", 6, nil)
	md, err := e.reader.Metadata(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var mine lagexporter.TopicObservation
	for _, to := range md {
		if to.Topic == topic {
			mine = to
		}
	}
	down := mine.Partitions[0].Leader
	e.reader.mu.Lock()
	if b := e.reader.brokers[down]; b != nil {
		_ = b.Close()
		delete(e.reader.brokers, down)
	}
	e.reader.addrs[down] = "127.0.0.1:1" // nothing listens there
	e.reader.mu.Unlock()
	got, err := e.reader.ListOffsets(context.Background(), []lagexporter.TopicObservation{mine})
	var ce lagexporter.CycleErrors
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), fmt.Sprintf("broker %d", down)) {
		t.Fatalf("err = %v, want CycleErrors naming broker %d", err, down)
	}
	failed, ok := 0, 0
	for _, p := range got[0].Partitions {
		switch {
		case p.Leader == down && p.Error != "":
			failed++
		case p.Leader != down && p.Known():
			ok++
		default:
			t.Errorf("partition %+v: want error iff led by broker %d", p, down)
		}
	}
	if failed == 0 || ok == 0 {
		t.Fatalf("%d failed, %d ok: want both", failed, ok)
	}
	// the next metadata read restores the broker's address
	if _, err := e.reader.Metadata(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, err := e.reader.ListOffsets(context.Background(), []lagexporter.TopicObservation{mine}); err != nil || !got[0].Partitions[0].Known() {
		t.Fatalf("after metadata refresh: %v", err)
	}
}
