package collector

import (
	"flag"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestClickHouseOutageLosesNothing cuts the collector off from ClickHouse mid-run (a proxy that closes every
// connection and refuses new ones) while receipts keep arriving: consumption pauses when the writer is full
// (memory stays bounded), and after the connection comes back every processing is in ClickHouse exactly once.
func TestClickHouseOutageLosesNothing(t *testing.T) {
	e := newEnv(t)
	e.cfg.Probe.Enabled = false
	e.cfg.MaxBatch = 2 // Kafka records per Write; each holds up to 32 receipts (see app)
	px := testenv.NewProxy(t, e.chAddr)
	const maxRows = 1000
	r := e.start([]string{px.Addr()}, func(w *store.WriterConfig) {
		w.BatchRows, w.MaxRows, w.FlushInterval = 500, maxRows, 100*time.Millisecond
		w.RetryInitial, w.RetryMax, w.InsertTimeout = 100*time.Millisecond, 500*time.Millisecond, 5*time.Second
	})
	t.Cleanup(func() { r.stop(t) })
	const n1, n2 = 1000, 3000
	q := "SELECT count() FROM latency_events FINAL WHERE topic = ?"

	e.app(n1, 0, 0, 0)
	if got := e.waitCount(n1, 60*time.Second, q, e.source); got != n1 {
		t.Fatalf("before the outage: %d rows, want %d", got, n1)
	}
	// The outage's receipts name the same source topic, whose metadata the collector now holds. Receipts naming a
	// topic still being looked up are parked (up to maxParkedReceipts, which is more than this test sends) rather
	// than paused, so with a new topic the whole backlog could be read before the writer's backpressure applies.
	ends := e.partitionEnds(e.source)
	px.Down()
	e.produceApp(e.source, n2, 0) // receipts land in Kafka while ClickHouse is unreachable
	e.consumeAppAt(e.source, 3, func(p int32) int64 { return ends[p] }, n2, 0, 0)
	// The writer holds at most maxRows: once more rows than that are handed over and unacknowledged, the excess is
	// in Writes blocked for room, and stays there while ClickHouse is away. Wait for that state (n2 > maxRows, so
	// it comes), then check its bounds.
	var waiting, handed, acked, consumed float64
	read := func() {
		waiting = testutil.ToFloat64(r.metrics.SinkWaiting.WithLabelValues(PathReceipts))
		handed = testutil.ToFloat64(r.metrics.Rows.WithLabelValues(PathReceipts))
		acked = testutil.ToFloat64(r.metrics.RowsAcked.WithLabelValues(PathReceipts))
		consumed = testutil.ToFloat64(r.metrics.Records.WithLabelValues(PathReceipts))
	}
	if waitFor(1, 60*time.Second, func() int64 {
		read()
		if handed-acked > maxRows && waiting >= 1 {
			return 1
		}
		return 0
	}) != 1 {
		t.Fatalf("no backpressure 60 s into the outage: %v rows handed, %v acked, %v partitions waiting in Write",
			handed, acked, waiting)
	}
	// Bounded memory: unacknowledged rows never exceed the writer's bound plus one batch per receipts partition
	// that may be blocked in Write; the rest of the backlog stays in Kafka, unconsumed.
	if held := handed - acked; held > maxRows+float64(e.cfg.MaxBatch*32*int(e.cfg.Receipts.Partitions)) {
		t.Fatalf("%v rows held during the outage (writer bound %d)", held, maxRows)
	}
	if acked > n1 {
		t.Fatalf("%v rows acknowledged while ClickHouse was unreachable", acked)
	}
	// Backpressure: partitions wait in Write, and part of the receipts topic stays unconsumed in Kafka.
	if end := float64(e.topicEnd(e.cfg.Receipts.Topic)); waiting < 1 || consumed >= end {
		t.Fatalf("no backpressure: %v partitions waiting, %v of %v receipt records consumed", waiting, consumed, end)
	}
	t.Logf("during the outage: %v partitions waiting, %v receipt records consumed, %v rows handed, %v acked",
		waiting, consumed, handed, acked)
	px.Up()
	if got := e.waitCount(n1+n2, 90*time.Second, q, e.source); got != n1+n2 {
		t.Fatalf("after recovery: %d rows, want %d", got, n1+n2)
	}
	// No duplicate by key after recovery (FINAL collapses copies; uniqExact counts keys).
	keys := e.count("SELECT uniqExact(topic, partition, offset) FROM latency_events FINAL WHERE topic = ?", e.source)
	if keys != n1+n2 {
		t.Fatalf("%d distinct keys, want %d", keys, n1+n2)
	}
	raw := e.count("SELECT count() FROM latency_events WHERE topic = ?", e.source)
	t.Logf("after recovery: %d rows by key, %d physical rows before merges", keys, raw)
}

// The outage of TestClickHouseOutageBeyondRetryRecovers: `-args -outage-receipts 104158 -outage-for 60s` replays
// the largest outage measured (ClickHouse away for 60 s while 104,158 receipts arrive).
var (
	outageReceipts = flag.Int("outage-receipts", 1500, "receipts produced during TestClickHouseOutageBeyondRetryRecovers' outage")
	outageFor      = flag.Duration("outage-for", 0, "TestClickHouseOutageBeyondRetryRecovers' outage lasts at least this long")
)

// TestClickHouseOutageBeyondRetryRecovers is QA defect 4: an outage longer than the writer's retry_max_elapsed makes
// the writer give up on rows. Nothing accepted may be lost and the collector must recover by itself: the paths
// re-read from the committed offsets, the sink reports unhealthy while writes fail and healthy after, and every
// row is in ClickHouse once by key without a restart.
func TestClickHouseOutageBeyondRetryRecovers(t *testing.T) {
	e := newEnv(t)
	e.cfg.Probe.Enabled = false
	e.cfg.MaxBatch = 2
	px := testenv.NewProxy(t, e.chAddr)
	r := e.start([]string{px.Addr()}, func(w *store.WriterConfig) {
		w.BatchRows, w.MaxRows, w.FlushInterval = 500, 1000, 100*time.Millisecond
		w.RetryInitial, w.RetryMax, w.InsertTimeout = 100*time.Millisecond, 300*time.Millisecond, 2*time.Second
		w.RetryMaxElapsed = time.Second
	})
	t.Cleanup(func() { r.stop(t) })
	second := testenv.CreateTopic(t, "src2", testenv.Topic{Partitions: 3})
	const n1 = 300
	n2 := uint64(*outageReceipts)
	q := "SELECT count() FROM latency_events FINAL WHERE topic = ?"

	e.app(n1, 0, 0, 0)
	if got := e.waitCount(n1, 60*time.Second, q, e.source); got != n1 {
		t.Fatalf("before the outage: %d rows, want %d", got, n1)
	}
	// Health is the last batch's outcome: on a loaded machine an insert may exceed its 2 s timeout and be given up
	// (and re-read), which the sink rightly reports until the next batch is acknowledged. So wait for healthy.
	if err := waitHealthy(r, 30*time.Second); err != nil {
		t.Fatalf("sink unhealthy before the outage: %v", err)
	}
	px.Down()
	down := time.Now()
	e.appOn(second, int(n2), 0, 0, 0)
	// The writer gives up after 1 s of retries: the sink turns unhealthy and rows were dropped by the writer.
	if got := waitFor(1, 30*time.Second, func() int64 {
		if r.col.SinkHealth() != nil {
			return 1
		}
		return 0
	}); got != 1 {
		t.Fatal("sink still healthy 30 s into the outage")
	}
	if errs := testutil.ToFloat64(r.metrics.SinkErrors.WithLabelValues(PathReceipts)); errs < 1 {
		t.Fatalf("%v sink errors during the outage, want some", errs)
	}
	t.Logf("during the outage: %v", r.col.SinkHealth())
	// Several give-up / re-read rounds: three more batches given up (each after 1 s of retries) before recovery.
	errs := testutil.ToFloat64(r.metrics.SinkErrors.WithLabelValues(PathReceipts))
	if got := waitFor(int64(errs)+3, 60*time.Second, func() int64 {
		return int64(testutil.ToFloat64(r.metrics.SinkErrors.WithLabelValues(PathReceipts)))
	}); got < int64(errs)+3 {
		t.Fatalf("%d batches given up 60 s into the outage, want %d", got, int64(errs)+3)
	}
	time.Sleep(*outageFor - time.Since(down)) // the outage's length (a fault's duration, not a synchronisation)
	px.Up()
	t.Logf("ClickHouse unreachable for %v: %v batches given up", time.Since(down).Round(time.Second),
		testutil.ToFloat64(r.metrics.SinkErrors.WithLabelValues(PathReceipts)))
	// The drain goes through this test's small writer (500-row batches) at about 1,000 rows/s here: 90 s, and a
	// millisecond more per receipt for a larger outage.
	up := time.Now()
	if got := e.waitCount(n2, 90*time.Second+time.Duration(n2)*time.Millisecond, q, second); got != n2 {
		t.Fatalf("after recovery without a restart: %d rows of the second topic, want %d", got, n2)
	}
	t.Logf("every receipt stored %v after ClickHouse came back", time.Since(up).Round(time.Second))
	keys := e.count("SELECT uniqExact(topic, partition, offset) FROM latency_events FINAL WHERE topic = ?", second)
	if keys != n2 {
		t.Fatalf("%d distinct keys, want %d", keys, n2)
	}
	t.Logf("second topic: %d receipts sent, %d stored by key", n2, keys)
	if got := e.count(q, e.source); got != n1 {
		t.Fatalf("after recovery: %d rows of the first topic, want %d", got, n1)
	}
	// Every row is stored, but the re-read of a batch given up may still be on its way: healthy once it is acked.
	if err := waitHealthy(r, 30*time.Second); err != nil {
		t.Fatalf("sink still unhealthy 30 s after recovery: %v", err)
	}
}

// waitHealthy polls the collector's sink health until it is healthy or timeout passes, and returns the last error.
func waitHealthy(r *running, timeout time.Duration) error {
	var err error
	waitFor(1, timeout, func() int64 {
		if err = r.col.SinkHealth(); err != nil {
			return 0
		}
		return 1
	})
	return err
}
