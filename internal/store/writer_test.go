package store

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeCH is an inserter that records what it was given. fail, when set, decides each attempt's error; block, when
// set, makes every insert wait for it to be closed. Attempts are counted, and fail and block applied, at send; an
// insert records a copy of its rows, as the writer reuses their memory after the ack.
type fakeCH struct {
	mu       sync.Mutex
	attempts int
	prepared int // prepared attempts, sent or not
	aborted  int // prepared attempts released unsent
	inserted map[string][]tableBatch
	fail     func(attempt int, tb tableBatch) error
	block    chan struct{}
	latency  time.Duration // how long each send takes, as a server's round trip
}

// fakeInsert is fakeCH's prepared insert.
type fakeInsert struct {
	f   *fakeCH
	ctx context.Context
	tb  tableBatch
}

func (f *fakeCH) insert(ctx context.Context, tb tableBatch, _ uint64) (preparedInsert, error) {
	f.mu.Lock()
	f.prepared++
	f.mu.Unlock()
	return fakeInsert{f, ctx, tb}, nil
}

func (p fakeInsert) abort() {
	p.f.mu.Lock()
	p.f.aborted++
	p.f.mu.Unlock()
}

func (p fakeInsert) send() error {
	f, ctx, tb := p.f, p.ctx, p.tb
	f.mu.Lock()
	f.attempts++
	attempt, fail, block := f.attempts, f.fail, f.block
	f.mu.Unlock()
	if f.latency > 0 {
		time.Sleep(f.latency)
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail != nil {
		if err := fail(attempt, tb); err != nil {
			return err
		}
	}
	switch rs := tb.(type) {
	case latencyBatch:
		tb = latencyBatch{slices.Clone(rs.flat())}
	case probeBatch:
		tb = slices.Clone(rs)
	case lagBatch:
		tb = slices.Clone(rs)
	case clockBatch:
		tb = slices.Clone(rs)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inserted == nil {
		f.inserted = map[string][]tableBatch{}
	}
	f.inserted[tb.table()] = append(f.inserted[tb.table()], tb)
	return nil
}

// offsets returns the latency rows' offsets in insertion order.
func (f *fakeCH) offsets() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int64
	for _, tb := range f.inserted[TableLatency] {
		for _, r := range tb.(latencyBatch).flat() {
			out = append(out, r.Offset)
		}
	}
	return out
}

func latencyRows(from, n int64) Rows {
	var r Rows
	for o := from; o < from+n; o++ {
		r.Latency = append(r.Latency, LatencyRow{Group: "g", Topic: "t", Offset: o, Class: ClassLive})
	}
	return r
}

func testWriter(t *testing.T, f *fakeCH, cfg WriterConfig) (*Writer, *prometheus.Registry) {
	t.Helper()
	return testWriterWith(t, f, cfg, WriterOptions{})
}

// testWriterWith is testWriter with options (a registry is added).
func testWriterWith(t *testing.T, f *fakeCH, cfg WriterConfig, opts WriterOptions) (*Writer, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	if cfg.RetryInitial == 0 {
		cfg.RetryInitial, cfg.RetryMax = time.Millisecond, 5*time.Millisecond
	}
	w, err := newWriter(f.insert, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	return w, reg
}

// ackLog records acks in call order.
type ackLog struct {
	mu   sync.Mutex
	ids  []int
	errs []error
}

func (a *ackLog) ack(id int) Ack {
	return func(err error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.ids = append(a.ids, id)
		a.errs = append(a.errs, err)
	}
}

func (a *ackLog) snapshot() ([]int, []error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int(nil), a.ids...), append([]error(nil), a.errs...)
}

// roomWatch collects the flusher's decisions made while a Write was blocked for room (WriterOptions.onTake).
type roomWatch chan bool

func newRoomWatch() roomWatch { return make(roomWatch, 64) }

func (r roomWatch) onTake(taken, roomWanted bool) {
	if roomWanted {
		select {
		case r <- taken:
		default: // more decisions than any test waits for
		}
	}
}

// blocked waits until the flusher has decided with the Write whose result comes on result blocked for room, and
// returns whether it took the pending rows for it. It fails the test if that Write returns first: it was not
// blocked. The Write can only stop blocking when room is freed or its context ends, so once the flusher has seen
// it, it is provably still blocked until the test frees room or ends the context.
func (r roomWatch) blocked(t *testing.T, what string, result <-chan error) (taken bool) {
	t.Helper()
	select {
	case taken = <-r:
		return taken
	case err := <-result:
		t.Fatalf("%s returned %v, want it blocked for room", what, err)
	case <-time.After(hangGuard): // a blocked Write kicks the flusher at once
		t.Fatalf("%s: the flusher never saw a Write blocked for room", what)
	}
	return false
}

// hangGuard bounds the waits of these tests for what correct code does at once (a flush, an ack, a retry after
// 1 ms): it is no assertion on speed, only what turns a bug that never gets there into a failure message instead
// of a hang until go test's -timeout, so it is far beyond any stall of a loaded machine.
const hangGuard = time.Minute

// waitFor polls cond until it holds (see hangGuard).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWriterFlushesBySizeAndAcksInOrder(t *testing.T) {
	f := &fakeCH{}
	// An interval of an hour: only the size trigger can flush.
	w, reg := testWriter(t, f, WriterConfig{BatchRows: 3, FlushInterval: time.Hour})
	var acks ackLog
	ctx := context.Background()
	for i := range 4 {
		if err := w.Write(ctx, latencyRows(int64(i)*3, 3), acks.ack(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "4 acks", func() bool { ids, _ := acks.snapshot(); return len(ids) == 4 })
	ids, errs := acks.snapshot()
	for i := range ids {
		if ids[i] != i || errs[i] != nil {
			t.Fatalf("acks %v errs %v, want 0..3 in order, all nil", ids, errs)
		}
	}
	got := f.offsets()
	if len(got) != 12 {
		t.Fatalf("inserted %d rows, want 12", len(got))
	}
	for i, o := range got {
		if o != int64(i) {
			t.Fatalf("offsets %v, want 0..11 in order", got)
		}
	}
	if v := testutil.ToFloat64(w.m.rowsWritten.WithLabelValues(TableLatency)); v != 12 {
		t.Errorf("rows_written_total = %v, want 12", v)
	}
	if n, err := testutil.GatherAndCount(reg, "tidemark_store_writer_buffered_rows"); err != nil || n != 1 {
		t.Errorf("buffered_rows series: %d, %v", n, err)
	}
	if v := testutil.ToFloat64(w.m.bufferedRows); v != 0 {
		t.Errorf("buffered_rows = %v after everything was acked, want 0", v)
	}
}

func TestWriterFlushesByInterval(t *testing.T) {
	f := &fakeCH{}
	w, _ := testWriter(t, f, WriterConfig{BatchRows: 1000, FlushInterval: 10 * time.Millisecond})
	done := make(chan error, 1)
	if err := w.Write(context.Background(), latencyRows(7, 1), func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangGuard):
		t.Fatal("a 1-row batch was never flushed by the 10ms interval")
	}
	if got := f.offsets(); len(got) != 1 || got[0] != 7 {
		t.Fatalf("inserted %v, want [7]", got)
	}
}

func TestWriterBackpressure(t *testing.T) {
	f := &fakeCH{block: make(chan struct{})}
	rooms := newRoomWatch()
	// MaxRows 4: one 4-row batch in flight (blocked in the fake) fills the writer.
	w, _ := testWriterWith(t, f, WriterConfig{BatchRows: 4, MaxRows: 4, FlushInterval: time.Hour},
		WriterOptions{onTake: rooms.onTake})
	ctx := context.Background()
	if err := w.Write(ctx, latencyRows(0, 4), nil); err != nil {
		t.Fatal(err)
	}
	// A Write into the full writer blocks until its context ends, and then accepts nothing.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rejected := make(chan error, 1)
	called := time.Now()
	go func() { rejected <- w.Write(cctx, latencyRows(4, 1), nil) }()
	rooms.blocked(t, "a Write into the full writer", rejected)
	cancel()
	err := <-rejected
	elapsed := time.Since(called)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Write into a full writer returned %v, want it to block until its context ended", err)
	}
	if v := testutil.ToFloat64(w.m.bufferedRows); v != 4 {
		t.Errorf("buffered_rows = %v, want 4 (the rejected row was not accepted)", v)
	}
	// The blocked time is the Write's own measurement: positive, and within the call the test timed around it.
	if v := testutil.ToFloat64(w.m.blockedSecs); v <= 0 || v > elapsed.Seconds() {
		t.Errorf("blocked_seconds_total = %v, want in (0, %v]", v, elapsed.Seconds())
	}
	accepted := make(chan error, 1)
	go func() { accepted <- w.Write(ctx, latencyRows(4, 1), nil) }()
	rooms.blocked(t, "a second Write into the full writer", accepted)
	close(f.block) // ClickHouse answers: the in-flight batch completes and frees room
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.offsets(); !slices.Equal(got, []int64{0, 1, 2, 3, 4}) {
		t.Fatalf("inserted %v, want offsets 0..4", got)
	}
}

func TestWriterOversizedWriteAcceptedWhenEmpty(t *testing.T) {
	f := &fakeCH{}
	w, _ := testWriter(t, f, WriterConfig{BatchRows: 2, MaxRows: 2, FlushInterval: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	// 5 rows > MaxRows: refusing it forever would deadlock the caller, so an empty writer takes it.
	if err := w.Write(ctx, latencyRows(0, 5), nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.offsets(); len(got) != 5 {
		t.Fatalf("inserted %v, want 5 rows", got)
	}
}

func TestWriterRetriesConnectionErrors(t *testing.T) {
	f := &fakeCH{fail: func(attempt int, _ tableBatch) error {
		if attempt <= 3 {
			return io.ErrUnexpectedEOF // what a dropped connection looks like
		}
		return nil
	}}
	w, _ := testWriter(t, f, WriterConfig{BatchRows: 2, FlushInterval: time.Hour})
	var acks ackLog
	ctx := context.Background()
	if err := w.Write(ctx, latencyRows(0, 2), acks.ack(1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, errs := acks.snapshot(); len(errs) != 1 || errs[0] != nil {
		t.Fatalf("ack errors %v, want one nil", errs)
	}
	if got := f.offsets(); len(got) != 2 {
		t.Fatalf("inserted %v, want 2 rows once", got)
	}
	if v := testutil.ToFloat64(w.m.retries.WithLabelValues(TableLatency)); v != 3 {
		t.Errorf("retries_total = %v, want 3", v)
	}
}

func TestWriterPermanentErrorFailsAck(t *testing.T) {
	unknownTable := &clickhouse.Exception{Code: 60, Message: "Table x doesn't exist"}
	f := &fakeCH{fail: func(attempt int, tb tableBatch) error {
		if tb.table() == TableProbe {
			return unknownTable
		}
		return nil
	}}
	w, _ := testWriter(t, f, WriterConfig{BatchRows: 10, FlushInterval: time.Hour})
	var acks ackLog
	rows := latencyRows(0, 2)
	rows.Probe = []ProbeRow{{Topic: "p", Seq: 1}}
	ctx := context.Background()
	if err := w.Write(ctx, rows, acks.ack(1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_, errs := acks.snapshot()
	if len(errs) != 1 || !errors.Is(errs[0], unknownTable) {
		t.Fatalf("ack errors %v, want the unknown-table exception", errs)
	}
	// The latency rows went in before the probe table failed, and are not re-sent: that would double count them in
	// the rollup. One attempt per table: a permanent error is not retried.
	if got := f.offsets(); len(got) != 2 {
		t.Fatalf("latency rows inserted %v, want 2 once", got)
	}
	if f.attempts != 2 {
		t.Errorf("%d insert attempts, want 2", f.attempts)
	}
	if v := testutil.ToFloat64(w.m.rowsDropped.WithLabelValues(TableProbe)); v != 1 {
		t.Errorf("dropped_rows_total{probe} = %v, want 1", v)
	}
	// A given-up row's key is forgotten, so its re-delivery is written.
	f.mu.Lock()
	f.fail = nil
	f.mu.Unlock()
	if err := w.Write(ctx, Rows{Probe: []ProbeRow{{Topic: "p", Seq: 1}}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(f.inserted[TableProbe]); n != 1 {
		t.Errorf("re-delivered probe inserted %d times, want 1", n)
	}
}

func TestWriterDedupWindow(t *testing.T) {
	f := &fakeCH{}
	w, _ := testWriter(t, f, WriterConfig{BatchRows: 100, FlushInterval: time.Hour, DedupWindow: 3})
	ctx := context.Background()
	write := func(rows ...LatencyRow) {
		t.Helper()
		if err := w.Write(ctx, Rows{Latency: rows}, nil); err != nil {
			t.Fatal(err)
		}
	}
	row := func(off int64, class ReplayClass) LatencyRow {
		return LatencyRow{Group: "g", Topic: "t", Offset: off, Class: class}
	}
	write(row(1, ClassLive), row(2, ClassLive))
	write(row(1, ClassLive))   // re-delivered: dropped
	write(row(1, ClassReplay)) // a replay of offset 1 is another processing event: kept
	write(row(3, ClassLive))   // window of 3 now holds 2/live, 1/replay, 3 — offset 1/live was evicted
	write(row(1, ClassLive))   // out of the window: written again (ReplacingMergeTree collapses it in raw)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := f.offsets()
	want := []int64{1, 2, 1, 3, 1}
	if len(got) != len(want) {
		t.Fatalf("inserted offsets %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("inserted offsets %v, want %v", got, want)
		}
	}
	if v := testutil.ToFloat64(w.m.duplicates.WithLabelValues(TableLatency)); v != 1 {
		t.Errorf("duplicate_rows_total = %v, want 1", v)
	}
}

// TestWriterDedupWindowEveryTable: probe, lag and clock-offset rows are deduplicated by their own keys, each in the
// same window as latency rows: a re-delivered row is dropped and counted under its table, a row that differs in its
// key (another probe sequence, snapshot time or clock kind) is kept.
func TestWriterDedupWindowEveryTable(t *testing.T) {
	f := &fakeCH{}
	w, _ := testWriter(t, f, WriterConfig{BatchRows: 100, FlushInterval: time.Hour, DedupWindow: 100})
	ctx := context.Background()
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	probe := func(seq uint64) ProbeRow { return ProbeRow{Topic: "p", Partition: 1, Seq: seq} }
	lag := func(at time.Time) LagRow { return LagRow{At: at, Group: "g", Topic: "t", Partition: 2} }
	clock := func(kind ClockKind) ClockOffsetRow { return ClockOffsetRow{At: at, Host: "h", Kind: kind} }
	for _, rows := range []Rows{
		{Probe: []ProbeRow{probe(1), probe(2)}, Lag: []LagRow{lag(at)}, ClockOffsets: []ClockOffsetRow{clock(ClockBracketed)}},
		// re-delivered: probe 2, the lag snapshot and the clock row are dropped; probe 3, the next snapshot and the
		// other kind of the same host and time are kept
		{Probe: []ProbeRow{probe(2), probe(3)}, Lag: []LagRow{lag(at), lag(at.Add(time.Second))},
			ClockOffsets: []ClockOffsetRow{clock(ClockBracketed), clock(ClockSynced)}},
	} {
		if err := w.Write(ctx, rows, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	count := func(table string) int {
		f.mu.Lock()
		defer f.mu.Unlock()
		n := 0
		for _, tb := range f.inserted[table] {
			n += tb.len()
		}
		return n
	}
	for _, c := range []struct {
		table          string
		inserted, dups int
	}{{TableProbe, 3, 1}, {TableLag, 2, 1}, {TableClockOffsets, 2, 1}, {TableLatency, 0, 0}} {
		if got := count(c.table); got != c.inserted {
			t.Errorf("%s: %d rows inserted, want %d", c.table, got, c.inserted)
		}
		if v := testutil.ToFloat64(w.m.duplicates.WithLabelValues(c.table)); v != float64(c.dups) {
			t.Errorf("%s: duplicate_rows_total = %v, want %d", c.table, v, c.dups)
		}
	}
}

func TestWriterEmptyWriteAckedInOrder(t *testing.T) {
	f := &fakeCH{}
	w, _ := testWriter(t, f, WriterConfig{BatchRows: 10, FlushInterval: time.Hour})
	var acks ackLog
	ctx := context.Background()
	_ = w.Write(ctx, latencyRows(0, 1), acks.ack(1))
	_ = w.Write(ctx, Rows{}, acks.ack(2)) // e.g. a dead-lettered receipt: its offset is committed after row 0's
	_ = w.Write(ctx, latencyRows(1, 1), acks.ack(3))
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ids, _ := acks.snapshot()
	if len(ids) != 3 || ids[0] != 1 || ids[1] != 2 || ids[2] != 3 {
		t.Fatalf("acks %v, want [1 2 3]", ids)
	}
}

func TestWriterCloseGivesUpAtDeadline(t *testing.T) {
	retried := make(chan struct{})
	var once sync.Once
	f := &fakeCH{fail: func(attempt int, _ tableBatch) error { // ClickHouse never comes back
		if attempt == 2 {
			once.Do(func() { close(retried) })
		}
		return io.EOF
	}}
	reg := prometheus.NewRegistry()
	w, err := newWriter(f.insert, WriterConfig{BatchRows: 1, FlushInterval: time.Hour,
		RetryInitial: time.Millisecond, RetryMax: 2 * time.Millisecond}, WriterOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	var acks ackLog
	_ = w.Write(context.Background(), latencyRows(0, 1), acks.ack(1))
	_ = w.Write(context.Background(), latencyRows(1, 1), acks.ack(2))
	// Close while the writer is retrying (its second attempt has been made), not before it has started.
	select {
	case <-retried:
	case <-time.After(hangGuard): // retries start after 1 ms
		t.Fatal("the writer never retried a failed insert")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := w.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want the deadline", err)
	}
	ids, errs := acks.snapshot()
	if len(ids) != 2 || errs[0] == nil || errs[1] == nil {
		t.Fatalf("acks %v errs %v: both writes must be told they were given up", ids, errs)
	}
	if err := w.Write(context.Background(), latencyRows(2, 1), nil); !errors.Is(err, ErrWriterClosed) {
		t.Fatalf("Write after Close = %v, want ErrWriterClosed", err)
	}
	if v := testutil.ToFloat64(w.m.retries.WithLabelValues(TableLatency)); v < 1 {
		t.Errorf("retries_total = %v, want the retries made before Close", v)
	}
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused or reset", io.ErrUnexpectedEOF, true},
		{"per-attempt timeout", context.DeadlineExceeded, true},
		// Only Close cancels the writer's context: nothing to retry for.
		{"writer closing", context.Canceled, false},
		{"too many parts: the server is catching up", &clickhouse.Exception{Code: 252}, true},
		{"memory limit", &clickhouse.Exception{Code: 241}, true},
		// Schema and type errors do not heal by waiting.
		{"unknown table", &clickhouse.Exception{Code: 60}, false},
		{"type mismatch", &clickhouse.Exception{Code: 53}, false},
		{"authentication", &clickhouse.Exception{Code: 516}, false},
		{"encoding a row", &appendError{errors.New("converting x")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retryable(tt.err); got != tt.want {
				t.Errorf("retryable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestWriterConcurrentWritersStayBounded: many writers, a slow ClickHouse; every row arrives exactly once, every
// ack runs once with nil, and the rows held never exceed MaxRows.
func TestWriterConcurrentWritersStayBounded(t *testing.T) {
	const maxRows = 40
	var w *Writer
	var mu sync.Mutex
	peak := 0
	f := &fakeCH{fail: func(int, tableBatch) error {
		time.Sleep(time.Millisecond) // a slow server: writers must block rather than pile up rows
		w.mu.Lock()
		held := w.heldRows
		w.mu.Unlock()
		mu.Lock()
		peak = max(peak, held)
		mu.Unlock()
		return nil
	}}
	w, _ = testWriter(t, f, WriterConfig{BatchRows: 20, MaxRows: maxRows, FlushInterval: 5 * time.Millisecond})
	var wg sync.WaitGroup
	var acked sync.Map
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				id := g*1000 + i
				from := int64(id) * 10
				if err := w.Write(context.Background(), latencyRows(from, 10), func(err error) {
					if _, dup := acked.LoadOrStore(id, err); dup {
						t.Errorf("write %d acked twice", id)
					}
				}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := 0
	acked.Range(func(_, v any) bool {
		if v != nil {
			t.Errorf("ack error %v", v)
		}
		n++
		return true
	})
	if n != 200 {
		t.Errorf("%d acks, want 200", n)
	}
	seen := map[int64]bool{}
	for _, o := range f.offsets() {
		if seen[o] {
			t.Fatalf("offset %d inserted twice", o)
		}
		seen[o] = true
	}
	if len(seen) != 2000 {
		t.Errorf("%d distinct rows inserted, want 2000", len(seen))
	}
	if peak > maxRows || peak == 0 {
		t.Errorf("peak rows held %d, want 1..%d", peak, maxRows)
	}
	t.Logf("peak rows held during inserts: %d of %d", peak, maxRows)
}

func TestDialectFor(t *testing.T) {
	tests := []struct {
		major uint64
		want  Dialect
	}{
		{18, DialectLegacy}, // Debian's 18.16, tested here
		{22, DialectLegacy}, // 22.x has TTL and CODEC but is below the versions the modern DDL is checked for
		{23, DialectModern},
		{26, DialectModern}, // chDB's engine
	}
	for _, tt := range tests {
		if got := DialectFor(tt.major); got != tt.want {
			t.Errorf("DialectFor(%d) = %s, want %s", tt.major, got, tt.want)
		}
	}
}

// TestWriterPreparesNextBatchDuringSend: while one batch waits for ClickHouse, the next is already encoded (its
// insert prepared), yet not sent; acks still run in order, once each, after their own insert.
func TestWriterPreparesNextBatchDuringSend(t *testing.T) {
	f := &fakeCH{block: make(chan struct{})}
	w, _ := testWriter(t, f, WriterConfig{BatchRows: 2, MaxRows: 10, FlushInterval: time.Hour})
	var acks ackLog
	ctx := context.Background()
	sending := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.attempts
	}
	for i := range 2 {
		if err := w.Write(ctx, latencyRows(int64(i)*2, 2), acks.ack(i)); err != nil {
			t.Fatal(err)
		}
		// The second Write comes once the first batch is in ClickHouse's hands (else both make one batch).
		waitFor(t, "the first batch sent", func() bool { return sending() == 1 })
	}
	waitFor(t, "the second batch prepared", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.prepared == 2
	})
	if attempts := sending(); attempts != 1 {
		t.Fatalf("%d sends started while the first is blocked, want 1", attempts)
	}
	if ids, _ := acks.snapshot(); len(ids) != 0 {
		t.Fatalf("acks %v before ClickHouse answered", ids)
	}
	close(f.block)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ids, errs := acks.snapshot()
	if len(ids) != 2 || ids[0] != 0 || ids[1] != 1 || errs[0] != nil || errs[1] != nil {
		t.Fatalf("acks %v errs %v, want [0 1], nil", ids, errs)
	}
	if got := f.offsets(); len(got) != 4 || got[0] != 0 || got[3] != 3 {
		t.Fatalf("inserted %v, want 0..3 in order", got)
	}
}

// TestWriterAbortsPreparedTablesAfterFailure: when a batch's latency insert fails for good, its probe insert,
// already prepared, is released unsent, and both tables' rows are counted dropped.
func TestWriterAbortsPreparedTablesAfterFailure(t *testing.T) {
	typeMismatch := &clickhouse.Exception{Code: 53, Message: "type mismatch"}
	f := &fakeCH{fail: func(_ int, tb tableBatch) error {
		if tb.table() == TableLatency {
			return typeMismatch
		}
		return nil
	}}
	w, _ := testWriter(t, f, WriterConfig{BatchRows: 10, FlushInterval: time.Hour})
	var acks ackLog
	rows := latencyRows(0, 2)
	rows.Probe = []ProbeRow{{Topic: "p", Seq: 1}}
	ctx := context.Background()
	if err := w.Write(ctx, rows, acks.ack(1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, errs := acks.snapshot(); len(errs) != 1 || !errors.Is(errs[0], typeMismatch) {
		t.Fatalf("ack errors %v, want the type mismatch", errs)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.prepared != 2 || f.attempts != 1 || f.aborted != 1 {
		t.Errorf("prepared %d, sent %d, aborted %d; want 2, 1 (latency), 1 (probe)", f.prepared, f.attempts, f.aborted)
	}
	if len(f.inserted) != 0 {
		t.Errorf("inserted %v, want nothing", f.inserted)
	}
	if v := testutil.ToFloat64(w.m.rowsDropped.WithLabelValues(TableProbe)); v != 1 {
		t.Errorf("dropped_rows_total{probe} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(w.m.rowsDropped.WithLabelValues(TableLatency)); v != 2 {
		t.Errorf("dropped_rows_total{latency} = %v, want 2", v)
	}
}

// TestWriterBlockedWriteDoesNotSplitBatches: a Write blocked for room while a batch is in flight waits for that
// batch's ack instead of making the flusher take the partial pending rows; those would be an extra, small insert
// and free no room.
func TestWriterBlockedWriteDoesNotSplitBatches(t *testing.T) {
	f := &fakeCH{block: make(chan struct{})}
	rooms := newRoomWatch()
	w, _ := testWriterWith(t, f, WriterConfig{BatchRows: 4, MaxRows: 8, FlushInterval: time.Hour},
		WriterOptions{onTake: rooms.onTake})
	ctx := context.Background()
	if err := w.Write(ctx, latencyRows(0, 4), nil); err != nil { // batch A, blocked in ClickHouse
		t.Fatal(err)
	}
	waitFor(t, "batch A sent", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.attempts == 1 })
	if err := w.Write(ctx, latencyRows(4, 3), nil); err != nil { // pending 3 < BatchRows
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() { blocked <- w.Write(ctx, latencyRows(7, 2), nil) }() // 4 + 3 + 2 > MaxRows: blocks
	// The flusher's decision once it has seen the blocked Write: leave the 3 pending rows, as A's ack frees room.
	if taken := rooms.blocked(t, "a Write beyond MaxRows", blocked); taken {
		t.Fatal("the flusher took the 3 pending rows while A is in flight; want them left to make a full batch")
	}
	f.mu.Lock()
	prepared := f.prepared
	f.mu.Unlock()
	if prepared != 1 {
		t.Fatalf("%d inserts prepared while A is in flight, want 1 (the 3 pending rows must wait)", prepared)
	}
	close(f.block)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var sizes []int
	for _, tb := range f.inserted[TableLatency] {
		sizes = append(sizes, tb.len())
	}
	if len(sizes) != 2 || sizes[0] != 4 || sizes[1] != 5 {
		t.Fatalf("insert sizes %v, want [4 5]", sizes)
	}
}
