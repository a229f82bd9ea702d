package collector

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// stagedMeta is a TopicInfo whose answers the test sets: a topic is pending until settle gives its view.
type stagedMeta struct {
	mu      sync.Mutex
	views   map[string]*kafka.TopicView
	pending map[string]chan struct{}
}

func newStagedMeta() *stagedMeta {
	return &stagedMeta{views: map[string]*kafka.TopicView{}, pending: map[string]chan struct{}{}}
}

func (m *stagedMeta) Topic(name string) *kafka.TopicView {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.views[name]; ok {
		return v
	}
	if _, ok := m.pending[name]; !ok {
		m.pending[name] = make(chan struct{})
	}
	return &kafka.TopicView{State: kafka.TopicPending}
}

func (m *stagedMeta) Await(name string) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.pending[name]; ok {
		return c
	}
	return closedAwait
}

func (m *stagedMeta) settle(name string, v *kafka.TopicView) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.views[name] = v
	if c, ok := m.pending[name]; ok {
		close(c)
		delete(m.pending, name)
	}
}

// writes returns what the fake sink was given so far.
func (s *fakeSink) writes() []store.Rows {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]store.Rows(nil), s.rows...)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// appendReceipt is a receipt whose record timestamp is an append stamp: it needs its topic's leader.
func appendReceipt(topic string, offset int64, at time.Time) instrument.Receipt {
	return instrument.Receipt{Group: "g", Topic: topic, Partition: 0, Offset: offset, TimestampType: instrument.TimestampLogAppend,
		RecordTimestampMs: at.UnixMilli(), HasRecordTimestamp: true, ProcessedNs: at.Add(5 * time.Millisecond).UnixNano(), Host: "c1"}
}

// TestParkedTopicDoesNotHoldThePartition, at the handler: a record whose receipts need the
// metadata of a topic still being looked up is parked and the handler returns at once; a later batch of other
// topics is written meanwhile; when the lookup settles the parked batch is written, and offsets are still marked in
// read order. The handler never waits for a lookup (a synchronous one costs about 1 s per unknown topic).
func TestParkedTopicDoesNotHoldThePartition(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	deps, sink, _ := newTestDeps(t, at.Add(time.Second))
	meta := newStagedMeta()
	meta.settle("known", knownTopic(kafka.TimestampLogAppend, 3))
	deps.meta = meta
	p := newReceipts(t.Context(), deps)
	var mu sync.Mutex
	var marks []int64
	mark := func(n int64) { mu.Lock(); marks = append(marks, n); mu.Unlock() }
	b1 := kafka.Batch{Topic: "rc", Records: []kafka.Record{
		receiptRecord(t, 0, appendReceipt("new-topic", 100, at)),
		receiptRecord(t, 1, appendReceipt("known", 7, at)),
	}}
	if err := p.HandleBatch(t.Context(), b1, mark); err != nil {
		t.Fatal(err)
	}
	if n := len(sink.writes()); n != 0 {
		t.Fatalf("%d writes while the batch waits for new-topic's metadata, want 0", n)
	}
	if v := testutil.ToFloat64(deps.metrics.Parked); v != 1 {
		t.Fatalf("parked receipts %v, want 1", v)
	}
	b2 := kafka.Batch{Topic: "rc", Records: []kafka.Record{receiptRecord(t, 2, appendReceipt("known", 8, at))}}
	if err := p.HandleBatch(t.Context(), b2, mark); err != nil {
		t.Fatal(err)
	}
	if w := sink.writes(); len(w) != 1 || w[0].Latency[0].Offset != 8 {
		t.Fatalf("the later batch was not written while the first waits: %+v", w)
	}
	sink.acks[0](nil) // batch 2 acknowledged first: nothing may be marked before batch 1
	if len(marks) != 0 {
		t.Fatalf("marks %v before the first batch was written", marks)
	}
	meta.settle("new-topic", knownTopic(kafka.TimestampLogAppend, 5))
	waitUntil(t, "the parked batch's write", func() bool { return len(sink.writes()) == 2 })
	w := sink.writes()[1]
	if len(w.Latency) != 2 {
		t.Fatalf("parked batch wrote %d rows, want 2", len(w.Latency))
	}
	for _, r := range w.Latency {
		want := "broker-1" // the leader of the record's epoch (fakeAppends), not the topic's current leader
		if r.BrokerHost != want || r.AppendMs != at.UnixMilli() {
			t.Fatalf("row %s/%d: broker %q append %d, want %s and the append stamp", r.Topic, r.Offset, r.BrokerHost, r.AppendMs, want)
		}
	}
	sink.mu.Lock()
	ack := sink.acks[1]
	sink.mu.Unlock()
	ack(nil)
	mu.Lock()
	defer mu.Unlock()
	if len(marks) != 1 || marks[0] != 3 {
		t.Fatalf("marks %v, want [3]: both batches in one in-order mark", marks)
	}
	if v := testutil.ToFloat64(deps.metrics.Parked); v != 0 {
		t.Fatalf("parked receipts %v after the lookup, want 0", v)
	}
}

// TestParkedRecordsKeepTheirTopicsOrder: records of a topic being looked up are processed in the order they were
// read, and a record of that topic read while earlier ones are parked queues behind them even though the lookup has
// settled by then: the engine sees each path's receipts in order, so none is taken for a redelivery.
func TestParkedRecordsKeepTheirTopicsOrder(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	deps, sink, _ := newTestDeps(t, at.Add(time.Second))
	meta := newStagedMeta()
	deps.meta = meta
	p := newReceipts(t.Context(), deps)
	// Two records of topic T: the first waits for T, the second has a declared CreateTime (needs no metadata) but
	// must still queue behind the first, as it shares the path (g, T, 0).
	second := appendReceipt("T", 101, at)
	second.TimestampType = instrument.TimestampCreate
	b := kafka.Batch{Topic: "rc", Records: []kafka.Record{receiptRecord(t, 0, appendReceipt("T", 100, at)), receiptRecord(t, 1, second)}}
	if err := p.HandleBatch(t.Context(), b, func(int64) {}); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(deps.metrics.Parked); v != 2 {
		t.Fatalf("parked receipts %v, want 2 (the second queued behind the first)", v)
	}
	meta.settle("T", knownTopic(kafka.TimestampLogAppend, 1))
	waitUntil(t, "the parked batch's write", func() bool { return len(sink.writes()) == 1 })
	rows := sink.writes()[0].Latency
	if len(rows) != 2 || rows[0].Offset != 100 || rows[1].Offset != 101 {
		t.Fatalf("rows %+v, want offsets 100 then 101", rows)
	}
	for _, r := range rows {
		if r.Class != store.ClassLive {
			t.Fatalf("offset %d classified %v, want live: processed out of order", r.Offset, r.Class)
		}
	}
}

// TestParkedRecordOfEndedSessionIsDropped: when the session a parked record was read in ends before its topic's
// lookup settles, the record is dropped unprocessed (its offset was never marked: the next session reads it again),
// so a stop never waits for a lookup and the engine never sees the receipt twice.
func TestParkedRecordOfEndedSessionIsDropped(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	deps, sink, _ := newTestDeps(t, at.Add(time.Second))
	meta := newStagedMeta()
	deps.meta = meta
	p := newReceipts(t.Context(), deps)
	session, end := context.WithCancel(t.Context())
	if err := p.HandleBatch(session, kafka.Batch{Topic: "rc", Records: []kafka.Record{receiptRecord(t, 0, appendReceipt("T", 100, at))}}, func(int64) {}); err != nil {
		t.Fatal(err)
	}
	end()
	meta.settle("T", knownTopic(kafka.TimestampLogAppend, 1))
	waitUntil(t, "the parked record to be dropped", func() bool { return testutil.ToFloat64(deps.metrics.Parked) == 0 })
	if w := sink.writes(); len(w) != 0 {
		t.Fatalf("writes %+v for a batch of an ended session", w)
	}
	// The next session reads it again and, T known now, writes it at once.
	if err := p.HandleBatch(t.Context(), kafka.Batch{Topic: "rc", Generation: 1, Records: []kafka.Record{receiptRecord(t, 0, appendReceipt("T", 100, at))}}, func(int64) {}); err != nil {
		t.Fatal(err)
	}
	if w := sink.writes(); len(w) != 1 || w[0].Latency[0].Class != store.ClassLive {
		t.Fatalf("re-read: %+v, want one live row", w)
	}
}

// TestUnknownTopicReceipts: a receipt naming a topic the cluster does not know is stored without the leader's stamp
// and counted; one naming a new unknown topic while the cache tracks all it may is dead-lettered with the reason.
func TestUnknownTopicReceipts(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	deps, sink, dlq := newTestDeps(t, at.Add(time.Second))
	meta := newStagedMeta()
	meta.settle("gone", &kafka.TopicView{State: kafka.TopicMissing})
	meta.settle("flood", &kafka.TopicView{State: kafka.TopicOverflow, Err: kafka.ErrTooManyUnknownTopics})
	deps.meta = meta
	p := newReceipts(t.Context(), deps)
	b := kafka.Batch{Topic: "rc", Records: []kafka.Record{
		receiptRecord(t, 0, appendReceipt("gone", 1, at), appendReceipt("gone", 2, at)),
		receiptRecord(t, 1, appendReceipt("flood", 1, at)),
	}}
	if err := p.HandleBatch(t.Context(), b, func(int64) {}); err != nil {
		t.Fatal(err)
	}
	w := sink.writes()
	if len(w) != 1 || len(w[0].Latency) != 2 || w[0].Latency[0].BrokerHost != "" || w[0].Latency[0].AppendMs != 0 {
		t.Fatalf("rows of the missing topic: %+v, want two without a leader's stamp", w)
	}
	if v := testutil.ToFloat64(deps.metrics.WithoutMetadata.WithLabelValues("missing")); v != 2 {
		t.Fatalf("receipts without metadata %v, want 2", v)
	}
	if len(dlq.recs) != 1 || dlq.recs[0].Offset != 1 || !errors.Is(dlq.reasons[0], errUnknownTopic) {
		t.Fatalf("dead letters %+v %v, want record 1 for its unknown topic", dlq.recs, dlq.reasons)
	}
	if v := testutil.ToFloat64(deps.metrics.DeadLetters.WithLabelValues(PathReceipts, "unknown_topic")); v != 1 {
		t.Fatalf("dead letters {unknown_topic} %v, want 1", v)
	}
}

// stagedAppends is an appendLeaders whose offsets are unplaced until place: Await hands out one round channel.
type stagedAppends struct {
	mu     sync.Mutex
	leader int32 // -1 until placed
	round  chan struct{}
	asked  int
}

func (a *stagedAppends) AppendLeader(context.Context, string, int32, int64) int32 {
	panic("the receipts path must not wait for an append leader on its record path")
}

func (a *stagedAppends) Placed(string, int32, int64) int32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.leader
}

func (a *stagedAppends) Await(string, int32, int64) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked++
	if a.leader >= 0 {
		return nil
	}
	return a.round
}

func (a *stagedAppends) place(leader int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.leader = leader
	close(a.round)
}

// TestAppendLeaderWaitIsParked: the append-leader lookup keeps the record path non-blocking. A
// receipt whose offset no round has placed in its leader epoch yet is parked (the handler returns at once, and
// never calls the waiting AppendLeader: the fake panics), a later batch of another topic is written meanwhile, and
// once the round ends the parked receipt is written attributed to its epoch's leader (broker 7, not the topic's
// current leader 3), offsets marked in read order. A receipt of a topic whose metadata was pending is asked about
// only once that settles (its timestamp type says whether it has an append stamp), and parked on the round too.
func TestAppendLeaderWaitIsParked(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	deps, sink, _ := newTestDeps(t, at.Add(time.Second))
	meta := newStagedMeta()
	meta.settle("known", knownTopic(kafka.TimestampLogAppend, 3))
	meta.settle("created", knownTopic(kafka.TimestampCreate, 3))
	deps.meta = meta
	appends := &stagedAppends{leader: -1, round: make(chan struct{})}
	deps.appends = appends
	p := newReceipts(t.Context(), deps)
	var mu sync.Mutex
	var marks []int64
	mark := func(n int64) { mu.Lock(); marks = append(marks, n); mu.Unlock() }

	unknownType := appendReceipt("late", 11, at)
	unknownType.TimestampType = instrument.TimestampUnknown
	b1 := kafka.Batch{Topic: "rc", Records: []kafka.Record{
		receiptRecord(t, 0, appendReceipt("known", 7, at)),
		receiptRecord(t, 1, unknownType),
	}}
	if err := p.HandleBatch(t.Context(), b1, mark); err != nil {
		t.Fatal(err)
	}
	if n := len(sink.writes()); n != 0 {
		t.Fatalf("%d writes while the batch waits for its append leader, want 0", n)
	}
	if v := testutil.ToFloat64(deps.metrics.Parked); v != 2 {
		t.Fatalf("parked receipts %v, want 2", v)
	}
	created := appendReceipt("created", 4, at)
	created.TimestampType = instrument.TimestampCreate
	b2 := kafka.Batch{Topic: "rc", Records: []kafka.Record{receiptRecord(t, 2, created)}}
	if err := p.HandleBatch(t.Context(), b2, mark); err != nil {
		t.Fatal(err)
	}
	if w := sink.writes(); len(w) != 1 || w[0].Latency[0].Topic != "created" {
		t.Fatalf("the CreateTime batch was not written while the first waits: %+v", w)
	}
	appends.mu.Lock()
	asked := appends.asked
	appends.mu.Unlock()
	if asked != 1 {
		t.Fatalf("append leaders asked %d times, want 1: late's type is not known until its metadata settles", asked)
	}
	// late's metadata settles: LogAppendTime, so its record waits for the round as well.
	meta.settle("late", knownTopic(kafka.TimestampLogAppend, 3))
	waitUntil(t, "late's record asking the append leaders", func() bool {
		appends.mu.Lock()
		defer appends.mu.Unlock()
		return appends.asked == 2
	})
	if n := len(sink.writes()); n != 1 {
		t.Fatalf("%d writes before the round placed the offsets, want 1", n)
	}
	appends.place(7)
	waitUntil(t, "the parked batch's write", func() bool { return len(sink.writes()) == 2 })
	w := sink.writes()[1]
	if len(w.Latency) != 2 {
		t.Fatalf("parked batch wrote %d rows, want 2", len(w.Latency))
	}
	for _, r := range w.Latency {
		if r.BrokerHost != "broker-7" || r.AppendMs != at.UnixMilli() {
			t.Fatalf("row %s/%d: broker %q append %d, want broker-7 (its epoch's leader) and the append stamp", r.Topic, r.Offset, r.BrokerHost, r.AppendMs)
		}
	}
	sink.mu.Lock()
	acks := append([]store.Ack(nil), sink.acks...)
	sink.mu.Unlock()
	acks[0](nil)
	acks[1](nil)
	mu.Lock()
	defer mu.Unlock()
	if len(marks) != 1 || marks[0] != 3 {
		t.Fatalf("marks %v, want [3]: both batches in one in-order mark", marks)
	}
	if v := testutil.ToFloat64(deps.metrics.AppendLeaderUnknown); v != 0 {
		t.Fatalf("append leader unknown %v, want 0", v)
	}
}

// TestParkedRecordPathsAreCheckpointed: the engine paths a parked record's receipts went through are handed to its
// batch, whose replay checkpoints are taken when it is complete, as the handler's own paths are.
func TestParkedRecordPathsAreCheckpointed(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	deps, _, _ := newTestDeps(t, at.Add(time.Second))
	p := newReceipts(t.Context(), deps)
	rb := &receiptBatch{ctx: t.Context(), b: kafka.Batch{Topic: "rc"}}
	rec := &parkedRecord{batch: rb, offset: 3, receipts: []instrument.Receipt{appendReceipt("T", 100, at), appendReceipt("U", 7, at)}}
	var k parking
	k.process(p, rec)
	if len(rb.parkedRows) != 2 {
		t.Fatalf("parked rows %d, want 2", len(rb.parkedRows))
	}
	want := []*latency.Path{p.engine.Path("g", "T", 0), p.engine.Path("g", "U", 0)}
	if !slices.Equal(rb.parkedTouched, want) {
		t.Fatalf("parked record's touched paths %v, want %v (T/0 and U/0)", rb.parkedTouched, want)
	}
}
