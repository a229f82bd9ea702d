package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// rowKey is a latency row's identity in these tests (group, topic and class are fixed).
type rowKey struct {
	partition int32
	offset    int64
}

// storedKeys returns the keys of every latency row the fake inserted.
func (f *fakeCH) storedKeys() map[rowKey]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[rowKey]bool{}
	for _, tb := range f.inserted[TableLatency] {
		for _, r := range tb.(latencyBatch).flat() {
			out[rowKey{r.Partition, r.Offset}] = true
		}
	}
	return out
}

func partitionRows(partition int32, from, to int64) Rows {
	var r Rows
	for o := from; o < to; o++ {
		r.Latency = append(r.Latency, LatencyRow{Group: "g", Topic: "t", Partition: partition, Offset: o, Class: ClassLive})
	}
	return r
}

// TestWriterDuplicateOfGivenUpRowIsNotAcked, step by step: a Write repeats rows whose first
// copy is in a batch on its way to ClickHouse (a re-read after an earlier give-up does exactly that); the window drops
// the repeats; then the first copy is given up. The repeating Write must not be acknowledged as stored: its caller
// would commit offsets of rows that are nowhere (a nil ack loses rows 5-9).
func TestWriterDuplicateOfGivenUpRowIsNotAcked(t *testing.T) {
	unknownTable := &clickhouse.Exception{Code: 60, Message: "Table x doesn't exist"} // permanent: given up at once
	block := make(chan struct{})
	f := &fakeCH{block: block, fail: func(attempt int, _ tableBatch) error {
		if attempt == 1 {
			return unknownTable
		}
		return nil
	}}
	w, _ := testWriter(t, f, WriterConfig{BatchRows: 10, FlushInterval: time.Hour})
	var acks ackLog
	ctx := context.Background()
	if err := w.Write(ctx, partitionRows(0, 0, 10), acks.ack(1)); err != nil { // a full batch: taken and sent
		t.Fatal(err)
	}
	waitFor(t, "the first batch in its insert", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.attempts == 1 })
	if err := w.Write(ctx, partitionRows(0, 5, 15), acks.ack(2)); err != nil { // 5-9 repeat rows in flight
		t.Fatal(err)
	}
	close(block) // the first batch now fails for good; the second (rows 10-14) is stored
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ids, errs := acks.snapshot()
	if len(ids) != 2 || ids[0] != 1 || ids[1] != 2 {
		t.Fatalf("acks %v, want [1 2]", ids)
	}
	if !errors.Is(errs[0], unknownTable) {
		t.Fatalf("first write's ack: %v, want the exception", errs[0])
	}
	if errs[1] == nil || !errors.Is(errs[1], unknownTable) {
		stored := f.storedKeys()
		t.Fatalf("second write acknowledged (%v) although rows 5-9 are stored nowhere (stored: %d of its 10 rows)",
			errs[1], countStored(stored, 0, 5, 15))
	}
	if v := testutil.ToFloat64(w.m.duplicates.WithLabelValues(TableLatency)); v != 5 {
		t.Errorf("duplicate_rows_total = %v, want 5", v)
	}
	// The re-read after the second ack's error writes 5-14 again: 5-9 were forgotten, 10-14 are stored (dropped).
	if err := w.Write(ctx, partitionRows(0, 5, 15), acks.ack(3)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, errs := acks.snapshot(); errs[2] != nil {
		t.Fatalf("re-read write's ack: %v", errs[2])
	}
	if n := countStored(f.storedKeys(), 0, 5, 15); n != 10 {
		t.Fatalf("%d of rows 5-14 stored after the re-read, want 10", n)
	}
}

// TestWriterDuplicateOfStoredRowIsAcked: a repeat of a row whose batch was stored is dropped and acknowledged at
// once, and a repeat of a row pending in the same batch shares that batch's fate: neither waits for anything.
func TestWriterDuplicateOfStoredRowIsAcked(t *testing.T) {
	f := &fakeCH{}
	w, _ := testWriter(t, f, WriterConfig{BatchRows: 100, FlushInterval: time.Hour})
	var acks ackLog
	ctx := context.Background()
	_ = w.Write(ctx, partitionRows(0, 0, 5), acks.ack(1))
	_ = w.Write(ctx, partitionRows(0, 3, 8), acks.ack(2)) // same pending batch
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_ = w.Write(ctx, partitionRows(0, 0, 8), acks.ack(3)) // every row stored already
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, errs := acks.snapshot(); len(errs) != 3 || errors.Join(errs...) != nil {
		t.Fatalf("acks %v, want three nil", errs)
	}
	if n := len(f.offsets()); n != 8 {
		t.Fatalf("%d rows inserted, want 8", n)
	}
}

func countStored(stored map[rowKey]bool, partition int32, from, to int64) int {
	n := 0
	for o := from; o < to; o++ {
		if stored[rowKey{partition, o}] {
			n++
		}
	}
	return n
}

// TestWriterGiveUpsNeverLoseRows is the writer's delivery property under random outage schedules: consumers that
// behave like the collector's paths (each writes its partition's records in order, keeps reading while acks are
// outstanding, commits the acknowledged prefix, and on an error ack re-reads from its commit, producing the same
// rows) end with every row stored by key, and no ack ever says nil for a row that is not stored at that moment.
// Each schedule fails insert attempts at random (permanent errors, given up at once, and transient ones, retried
// until a tiny retry budget runs out) for a random stretch of attempts, under a writer small enough to apply
// backpressure; which batches fail, and what they hold, varies with the seed and the scheduling.
func TestWriterGiveUpsNeverLoseRows(t *testing.T) {
	const partitions, perPartition, chunk = 4, 240, 6
	for seed := range 60 {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 10))
			outageFrom, outageLen := 1+rng.IntN(20), 5+rng.IntN(60)
			failP := 0.2 + 0.6*rng.Float64()
			var fmu sync.Mutex // guards rng in fail (called from the writer's sender goroutine)
			fail := func(attempt int, _ tableBatch) error {
				if attempt < outageFrom || attempt >= outageFrom+outageLen {
					return nil
				}
				fmu.Lock()
				defer fmu.Unlock()
				switch r := rng.Float64(); {
				case r < failP/2:
					return &clickhouse.Exception{Code: 60, Message: "permanent"}
				case r < failP:
					return errors.New("connection reset") // retryable
				}
				return nil
			}
			// Sends take a while, as on a server, so that batches are in flight while the consumers read again.
			f := &fakeCH{fail: fail, latency: time.Duration(100+rng.IntN(900)) * time.Microsecond}
			w, _ := testWriter(t, f, WriterConfig{BatchRows: 4 * chunk, MaxRows: 12 * chunk, FlushInterval: time.Millisecond,
				RetryInitial: 100 * time.Microsecond, RetryMax: 200 * time.Microsecond, RetryMaxElapsed: time.Millisecond})
			var violations sync.Map // "p/offset" → ack that claimed it stored
			var wg sync.WaitGroup
			for p := range int32(partitions) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					consumePartition(t, w, f, p, perPartition, chunk, &violations)
				}()
			}
			wg.Wait()
			violations.Range(func(k, v any) bool {
				t.Errorf("row %v acknowledged as stored by %v while not stored", k, v)
				return true
			})
			stored := f.storedKeys()
			for p := range int32(partitions) {
				if n := countStored(stored, p, 0, perPartition); n != perPartition {
					t.Errorf("partition %d: %d of %d rows stored by key", p, n, perPartition)
				}
			}
		})
	}
}

// consumePartition plays one partition's consumer against w until every chunk of [0, n) is committed.
func consumePartition(t *testing.T, w *Writer, f *fakeCH, p int32, n, chunk int64, violations *sync.Map) {
	type ackEvent struct {
		gen      int
		from, to int64
		err      error
	}
	var (
		mu     sync.Mutex
		events []ackEvent
		signal = make(chan struct{}, 1)
	)
	post := func(e ackEvent) { // called on the writer's sender goroutine: never blocks
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
		select {
		case signal <- struct{}{}:
		default:
		}
	}
	ctx := context.Background()
	gen, next, committed := 0, int64(0), int64(0)
	for committed < n {
		for next < n {
			from, to, g := next, min(next+chunk, n), gen
			if err := w.Write(ctx, partitionRows(p, from, to), func(err error) {
				if err == nil { // the invariant: a nil ack means every row of the Write is stored now
					stored := f.storedKeys()
					for o := from; o < to; o++ {
						if !stored[rowKey{p, o}] {
							violations.Store(fmt.Sprintf("%d/%d", p, o), fmt.Sprintf("write [%d, %d) of generation %d", from, to, g))
						}
					}
				}
				post(ackEvent{g, from, to, err})
			}); err != nil {
				t.Error(err)
				return
			}
			next = to
			mu.Lock()
			acked := len(events) > 0
			mu.Unlock()
			if acked { // handle acks before reading on, as a consumer whose commit or re-read is due
				break
			}
		}
		<-signal
		mu.Lock()
		evs := events
		events = nil
		mu.Unlock()
		for _, e := range evs {
			switch {
			case e.gen != gen: // an ack of an ended generation: its marks are ignored
			case e.err != nil: // re-read from the commit in a new generation, as the collector's paths do
				gen++
				next = committed
			default:
				committed = e.to
			}
		}
	}
}

// TestWriterStalled: the writer reports itself stalled only while rows wait and ClickHouse acknowledged nothing for
// stall_timeout, measured from the last acknowledgement or from when rows started waiting, whichever is later; a
// given-up batch is not progress, and an empty writer is never stalled. tidemark_store_writer_unacknowledged_seconds
// shows the same measure.
func TestWriterStalled(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	block := make(chan struct{})
	f := &fakeCH{block: block}
	w, err := newWriter(f.insert, WriterConfig{BatchRows: 10, FlushInterval: time.Hour, StallTimeout: 30 * time.Second,
		RetryInitial: time.Millisecond, RetryMax: time.Millisecond}, WriterOptions{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close(context.Background()) }()
	unacked := func(want float64) {
		t.Helper()
		if got := testutil.ToFloat64(w.m.unacked); got != want {
			t.Fatalf("unacknowledged_seconds %v, want %v", got, want)
		}
	}
	advance(time.Hour) // idle for an hour: nothing waits, nothing is stalled
	if err := w.Stalled(); err != nil {
		t.Fatalf("empty writer: %v", err)
	}
	unacked(0)
	ctx := context.Background()
	_ = w.Write(ctx, partitionRows(0, 0, 10), nil) // a full batch, held in its insert by block
	waitFor(t, "the batch in its insert", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.attempts == 1 })
	advance(29 * time.Second)
	if err := w.Stalled(); err != nil {
		t.Fatalf("29 s after the rows started waiting: %v", err)
	}
	unacked(29)
	advance(time.Second)
	err = w.Stalled()
	if !errors.Is(err, ErrWriterStalled) {
		t.Fatalf("30 s without an acknowledgement: %v, want ErrWriterStalled", err)
	}
	const want = "ClickHouse has acknowledged nothing for 30s while 10 rows wait (clickhouse.writer.stall_timeout 30s): store writer stalled"
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	close(block) // ClickHouse answers: the batch is acknowledged
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Stalled(); err != nil {
		t.Fatalf("after the acknowledgement: %v", err)
	}
	unacked(0)
	advance(time.Hour)
	_ = w.Write(ctx, partitionRows(0, 10, 11), nil) // waits for the flush interval: the clock starts now
	advance(10 * time.Second)
	if err := w.Stalled(); err != nil {
		t.Fatalf("10 s after new rows started waiting, an hour after the last acknowledgement: %v", err)
	}
	unacked(10)
}
