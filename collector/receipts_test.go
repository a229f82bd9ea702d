package collector

import (
	"context"
	"errors"
	"io"
	"log/slog"
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

// fakeSink records writes and acknowledges only when told to.
type fakeSink struct {
	mu   sync.Mutex
	rows []store.Rows
	acks []store.Ack
}

func (s *fakeSink) Write(_ context.Context, rows store.Rows, ack store.Ack) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = append(s.rows, rows)
	s.acks = append(s.acks, ack)
	return nil
}

type fakeDLQ struct {
	recs    []kafka.Record
	reasons []error
}

func (d *fakeDLQ) Send(_ context.Context, _ string, recs []kafka.Record, reasons []error) error {
	d.recs = append(d.recs, recs...)
	d.reasons = append(d.reasons, reasons...)
	return nil
}

// fakeMeta knows every topic: LogAppendTime, 8 partitions led by broker 1.
type fakeMeta struct{}

func (fakeMeta) Topic(string) *kafka.TopicView { return knownTopic(kafka.TimestampLogAppend, 1) }
func (fakeMeta) Await(string) <-chan struct{}  { return closedAwait }
func knownTopic(tt kafka.TimestampType, leader int32) *kafka.TopicView {
	v := &kafka.TopicView{State: kafka.TopicKnown, TimestampType: tt}
	for range 8 {
		v.Partitions = append(v.Partitions, kafka.PartitionInfo{Leader: leader, LeaderEpoch: 0})
	}
	return v
}

var closedAwait = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// fakeAppends attributes every append to broker 1.
type fakeAppends struct{}

func (fakeAppends) AppendLeader(context.Context, string, int32, int64) int32 { return 1 }
func (fakeAppends) Placed(string, int32, int64) int32                        { return 1 }
func (fakeAppends) Await(string, int32, int64) <-chan struct{}               { return nil }

func newTestDeps(t *testing.T, now time.Time) (*pathDeps, *fakeSink, *fakeDLQ) {
	t.Helper()
	eng, err := latency.NewEngine(latency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sink, dlq := &fakeSink{}, &fakeDLQ{}
	return &pathDeps{engine: eng, hosts: newHosts(eng), sink: sink, dlq: dlq, meta: fakeMeta{}, appends: fakeAppends{}, metrics: NewMetrics(nil),
		clock: func() time.Time { return now }, log: slog.New(slog.NewTextHandler(io.Discard, nil))}, sink, dlq
}

func receiptRecord(t *testing.T, offset int64, rs ...instrument.Receipt) kafka.Record {
	t.Helper()
	v, err := instrument.AppendReceiptBatch(nil, rs)
	if err != nil {
		t.Fatal(err)
	}
	return kafka.Record{Topic: "tidemark-receipts", Partition: 0, Offset: offset, Value: v}
}

// TestReceiptsCorrectsC25 is case C25 end to end through the receipts path: producer P1 +2500 ms, broker B1 0 ms,
// consumer C1 −300 ms; true create 12:00:00.000, append .020, processed .120 (receive at .100).
func TestReceiptsCorrectsC25(t *testing.T) {
	truth := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	deps, sink, dlq := newTestDeps(t, truth.Add(200*time.Millisecond))
	// The broker's offset is known from probe brackets: each sent at x.0195, acked at x.0215 (reference), stamped
	// x.020; the bracket [20 − 21.5, 20 + 1 − 19.5] = [−1.5, +1.5] ms (the +1 covers ms truncation) is centred on 0.
	// The producer and consumer reported their synced offsets (±0.1 ms). The engine trusts an estimate once its
	// window spans a quarter of its length (30 s of the default 2 min), so the history starts a minute earlier.
	seedC25Clocks(t, deps, truth)
	sync := func(d time.Duration) instrument.ClockOffset {
		return instrument.ClockOffset{Offset: d, Uncertainty: 100 * time.Microsecond, Valid: true}
	}
	r := instrument.Receipt{
		Group: "g", Topic: "orders", Partition: 3, Offset: 100,
		RecordTimestampMs: truth.Add(20 * time.Millisecond).UnixMilli(), HasRecordTimestamp: true,
		ProduceNs: truth.Add(2500 * time.Millisecond).UnixNano(), ProduceHost: "P1", ProduceClock: sync(2500 * time.Millisecond),
		ReceiveNs:   truth.Add(100*time.Millisecond - 300*time.Millisecond).UnixNano(),
		ProcessedNs: truth.Add(120*time.Millisecond - 300*time.Millisecond).UnixNano(), Host: "C1", Clock: sync(-300 * time.Millisecond),
		TraceID: [16]byte{1}, SpanID: [8]byte{2}, HasTrace: true,
	}
	garbage := kafka.Record{Topic: "tidemark-receipts", Offset: 11, Value: []byte{1, 0xff}}
	var marks []int64
	p := &Receipts{pathDeps: deps}
	b := kafka.Batch{Topic: "tidemark-receipts", Records: []kafka.Record{receiptRecord(t, 10, r), garbage}}
	if err := p.HandleBatch(context.Background(), b, func(n int64) { marks = append(marks, n) }); err != nil {
		t.Fatal(err)
	}
	if len(dlq.recs) != 1 || dlq.recs[0].Offset != 11 || !errors.Is(dlq.reasons[0], instrument.ErrMalformed) {
		t.Fatalf("dead letters %+v %v", dlq.recs, dlq.reasons)
	}
	if len(sink.rows) != 1 || len(sink.rows[0].Latency) != 1 {
		t.Fatalf("sink got %+v", sink.rows)
	}
	if len(marks) != 0 {
		t.Fatal("offsets marked before the sink acknowledged")
	}
	row := sink.rows[0].Latency[0]
	// Naive values are what other tools show (C25): ingest −2480, e2e −2680.
	if row.IngestNaiveMs != -2480 || row.E2ENaiveMs != -2680 || row.QueueNaiveMs != -220 || row.ProcessNaiveMs != 20 {
		t.Fatalf("naive stages %d %d %d %d", row.IngestNaiveMs, row.QueueNaiveMs, row.ProcessNaiveMs, row.E2ENaiveMs)
	}
	// Corrected with the offsets: ingest 20, queue 80, process 20, e2e 120, all valid. Producer and consumer are
	// synced to ±0.1 ms, so e2e and processing are exact after rounding; the broker is known to ±1.5 ms, so the
	// append moment (and with it the ingest/queue split) may move by up to 2 ms after rounding, but the stages must
	// still sum to e2e.
	near := func(got, want int64) bool { return got >= want-2 && got <= want+2 }
	if !near(row.IngestMs, 20) || !near(row.QueueMs, 80) || row.ProcessMs != 20 || row.E2EMs != 120 ||
		row.IngestMs+row.QueueMs+row.ProcessMs != row.E2EMs {
		t.Fatalf("corrected stages %d %d %d %d (flags %b)", row.IngestMs, row.QueueMs, row.ProcessMs, row.E2EMs, row.Flags)
	}
	if want := store.ValidIngest | store.ValidQueue | store.ValidProcess | store.ValidE2E; row.Valid&want != want {
		t.Fatalf("valid bits %08b", row.Valid)
	}
	if row.Class != store.ClassLive || row.Source != store.SourceReceipt || row.BrokerHost != "broker-1" ||
		row.ProducerHost != "P1" || row.ConsumerHost != "C1" || row.TraceID != "01000000000000000000000000000000" || row.SpanID != "0200000000000000" {
		t.Fatalf("row %+v", row)
	}
	sink.acks[0](nil)
	if len(marks) != 1 || marks[0] != 12 {
		t.Fatalf("marks %v, want [12] (after the dead-lettered record too)", marks)
	}
}

func TestReceiptsWriterFailureKeepsOffsets(t *testing.T) {
	deps, sink, _ := newTestDeps(t, time.Now())
	p := &Receipts{pathDeps: deps}
	var marks []int64
	mark := func(n int64) { marks = append(marks, n) }
	r := instrument.Receipt{Group: "g", Topic: "t", ProcessedNs: time.Now().UnixNano(), Host: "c"}
	for off := int64(0); off < 2; off++ {
		b := kafka.Batch{Topic: "rc", Records: []kafka.Record{receiptRecord(t, off, r)}}
		if err := p.HandleBatch(context.Background(), b, mark); err != nil {
			t.Fatal(err)
		}
	}
	sink.acks[0](errors.New("clickhouse gone"))
	sink.acks[1](nil)
	// The first batch was never stored: nothing may be committed, even though the second batch was.
	if len(marks) != 0 {
		t.Fatalf("marks %v after a failed first batch", marks)
	}
}

// TestReceiptsSkipsStoredReRead: when a session ends before its marks were committed (a broker restart), the group
// reads acknowledged receipt records again. Their rows are stored already: they must not reach the engine again,
// which would classify them as redeliveries and store a second row per receipt under another replay class.
func TestReceiptsSkipsStoredReRead(t *testing.T) {
	now := time.Now()
	deps, sink, _ := newTestDeps(t, now)
	p := &Receipts{pathDeps: deps}
	r := func(off int64) instrument.Receipt {
		return instrument.Receipt{Group: "g", Topic: "t", Partition: 0, Offset: off, ProcessedNs: now.UnixNano(), Host: "c"}
	}
	var marks []int64
	mark := func(n int64) { marks = append(marks, n) }
	first := kafka.Batch{Topic: "rc", Partition: 4, Generation: 1, Records: []kafka.Record{receiptRecord(t, 10, r(0)), receiptRecord(t, 11, r(1))}}
	if err := p.HandleBatch(context.Background(), first, mark); err != nil {
		t.Fatal(err)
	}
	sink.acks[0](nil) // stored; the mark of offset 12 is then lost with the session (never committed)
	// The next generation re-reads from the last commit (10) and one new record (12).
	again := kafka.Batch{Topic: "rc", Partition: 4, Generation: 2, Records: []kafka.Record{receiptRecord(t, 10, r(0)),
		receiptRecord(t, 11, r(1)), receiptRecord(t, 12, r(2))}}
	if err := p.HandleBatch(context.Background(), again, mark); err != nil {
		t.Fatal(err)
	}
	if len(sink.rows) != 2 || len(sink.rows[1].Latency) != 1 {
		t.Fatalf("second batch wrote %+v, want only the receipt of record 12", sink.rows[1:])
	}
	if row := sink.rows[1].Latency[0]; row.Offset != 2 || row.Class != store.ClassLive {
		t.Fatalf("row %+v, want offset 2, live", row)
	}
	sink.acks[1](nil)
	if !slices.Equal(marks, []int64{12, 13}) {
		t.Fatalf("marks %v, want [12 13]", marks)
	}
	// Another partition of the receipts topic is not affected.
	other := kafka.Batch{Topic: "rc", Partition: 5, Generation: 2, Records: []kafka.Record{receiptRecord(t, 10, r(3))}}
	if err := p.HandleBatch(context.Background(), other, mark); err != nil {
		t.Fatal(err)
	}
	if len(sink.rows) != 3 || len(sink.rows[2].Latency) != 1 {
		t.Fatalf("partition 5 wrote %+v", sink.rows[2:])
	}
}

// TestReceiptsReReadAfterGiveUpMakesSameRows: when the writer gives up on a batch, ClickHouse may have stored it anyway
// (the answer was lost). The records read again must make the very same rows (same replay class, hence the same key)
// instead of going through the engine again, where they would turn into redeliveries stored under a second key.
func TestReceiptsReReadAfterGiveUpMakesSameRows(t *testing.T) {
	now := time.Now()
	deps, sink, _ := newTestDeps(t, now)
	p := &Receipts{pathDeps: deps}
	r := func(off int64) instrument.Receipt {
		return instrument.Receipt{Group: "g", Topic: "t", Partition: 0, Offset: off, ProcessedNs: now.UnixNano(), Host: "c"}
	}
	mark := func(int64) {}
	first := kafka.Batch{Topic: "rc", Partition: 4, Generation: 1, Records: []kafka.Record{receiptRecord(t, 10, r(0)), receiptRecord(t, 11, r(1))}}
	if err := p.HandleBatch(context.Background(), first, mark); err != nil {
		t.Fatal(err)
	}
	sink.acks[0](errors.New("insert answer lost")) // the writer gave up: the session ends and the group re-reads
	again := kafka.Batch{Topic: "rc", Partition: 4, Generation: 2, Records: []kafka.Record{receiptRecord(t, 10, r(0)),
		receiptRecord(t, 11, r(1)), receiptRecord(t, 12, r(2))}}
	if err := p.HandleBatch(context.Background(), again, mark); err != nil {
		t.Fatal(err)
	}
	if len(sink.rows) != 2 || len(sink.rows[1].Latency) != 3 {
		t.Fatalf("re-read wrote %+v, want the two rows again plus record 12's", sink.rows[1:])
	}
	for i, want := range sink.rows[0].Latency {
		if got := sink.rows[1].Latency[i]; got != want {
			t.Errorf("re-read row %d = %+v, want the first attempt's %+v", i, got, want)
		}
	}
	if row := sink.rows[1].Latency[2]; row.Offset != 2 || row.Class != store.ClassLive {
		t.Fatalf("new row %+v, want offset 2, live", row)
	}
	sink.acks[1](nil)
	if n := len(p.pending.byPartition[4]); n != 0 {
		t.Fatalf("%d records still pending after the acknowledgement", n)
	}
}

// seedC25Clocks gives deps' engine case C25's clocks over the minute before truth: broker-1 at 0 ± 1.5 ms from
// probe brackets (each sent at x.0195, acked at x.0215, stamped x.020), producer P1 at +2500 ms and consumer C1 at
// −300 ms, both reported from time sync at ±0.1 ms. The engine trusts an estimate once its window spans a quarter
// of its length (30 s of the default 2 min), hence a minute of history.
func seedC25Clocks(t *testing.T, deps *pathDeps, truth time.Time) {
	t.Helper()
	for ago := 60 * time.Second; ago >= 0; ago -= 10 * time.Second {
		at := truth.Add(-ago)
		if err := deps.engine.ObserveBracket(latency.Bracket{Host: deps.hosts.id("broker-1"),
			Send: at.Add(19500 * time.Microsecond), RemoteMs: at.Add(20 * time.Millisecond).UnixMilli(),
			Ack: at.Add(21500 * time.Microsecond)}); err != nil {
			t.Fatal(err)
		}
		deps.hosts.report(deps.hosts.id("P1"), 2500*time.Millisecond, 100*time.Microsecond, at)
		deps.hosts.report(deps.hosts.id("C1"), -300*time.Millisecond, 100*time.Microsecond, at)
	}
}

// TestReceiptsBatchOverFakes drives the receipts path's batch handling through fakes (sink, dead-letter topic,
// metadata: every topic CreateTime). Record 20 holds three receipts of group g on orders/1: offsets 5 and 6, then 5
// again (processed again with no commit below it: a redelivery); record 21 one receipt of group h on orders/2;
// record 22 is of an encoding version no build writes (dead-lettered). Four rows, each naming the receipts record
// it came from; the class counts are added once per batch; offsets are marked once the sink acknowledged.
func TestReceiptsBatchOverFakes(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	deps, sink, dlq := newTestDeps(t, now)
	deps.meta = metaByTopic{"orders": kafka.TimestampCreate}
	rc := func(group string, partition int32, offset int64) instrument.Receipt {
		return instrument.Receipt{Group: group, Topic: "orders", Partition: partition, Offset: offset,
			ReceiveNs: now.Add(-30 * time.Millisecond).UnixNano(), ProcessedNs: now.Add(-10 * time.Millisecond).UnixNano(), Host: "c1"}
	}
	recs := []kafka.Record{
		receiptRecord(t, 20, rc("g", 1, 5), rc("g", 1, 6), rc("g", 1, 5)),
		receiptRecord(t, 21, rc("h", 2, 1)),
		{Topic: "tidemark-receipts", Offset: 22, Value: []byte{0x7f, 0, 0, 0}},
	}
	var marks []int64
	p := &Receipts{pathDeps: deps}
	b := kafka.Batch{Topic: "tidemark-receipts", Records: recs}
	if err := p.HandleBatch(context.Background(), b, func(n int64) { marks = append(marks, n) }); err != nil {
		t.Fatal(err)
	}
	if len(dlq.recs) != 1 || dlq.recs[0].Offset != 22 || !errors.Is(dlq.reasons[0], instrument.ErrUnsupportedVersion) {
		t.Fatalf("dead letters %+v %v, want offset 22 (unsupported version)", dlq.recs, dlq.reasons)
	}
	if len(sink.rows) != 1 || len(sink.rows[0].Latency) != 4 {
		t.Fatalf("writes %+v, want one write of 4 rows", sink.rows)
	}
	want := []struct {
		group        string
		offset, from int64
		class        store.ReplayClass
		proc         int64
	}{
		{"g", 5, 20, store.ClassLive, 20},
		{"g", 6, 20, store.ClassLive, 20},
		{"g", 5, 20, store.ClassRedelivery, 20},
		{"h", 1, 21, store.ClassLive, 20},
	}
	for i, w := range want {
		r := sink.rows[0].Latency[i]
		if r.Group != w.group || r.Offset != w.offset || r.ReceiptOffset != w.from || r.ReceiptPartition != 0 ||
			r.Class != w.class || r.ConsumerHost != "c1" || r.ProcessNaiveMs != w.proc || r.Source != store.SourceReceipt {
			t.Errorf("row %d %+v, want group %s offset %d from receipts offset %d class %v", i, r, w.group, w.offset, w.from, w.class)
		}
	}
	m := deps.metrics
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"records", testutil.ToFloat64(m.Records.WithLabelValues(PathReceipts)), 3},
		{"rows", testutil.ToFloat64(m.Rows.WithLabelValues(PathReceipts)), 4},
		{"live", testutil.ToFloat64(m.Classes.WithLabelValues(PathReceipts, "live")), 3},
		{"redelivery", testutil.ToFloat64(m.Classes.WithLabelValues(PathReceipts, "redelivery")), 1},
		{"dead letters", testutil.ToFloat64(m.DeadLetters.WithLabelValues(PathReceipts, "unsupported_version")), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if len(marks) != 0 {
		t.Fatalf("marked %v before the sink acknowledged", marks)
	}
	sink.acks[0](nil)
	if len(marks) != 1 || marks[0] != 23 {
		t.Fatalf("marks %v, want [23] after the ack", marks)
	}
	if got := testutil.ToFloat64(m.RowsAcked.WithLabelValues(PathReceipts)); got != 4 {
		t.Errorf("rows acked %v, want 4", got)
	}
}
