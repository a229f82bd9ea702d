package store

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// Ack is called once per accepted Write, in the order the Writes were accepted: with nil after ClickHouse
// acknowledged every row of it (only then may the caller commit the Kafka offsets the rows came from), or with the
// error that made the writer give the rows up. It runs on the writer's flush goroutine: keep it short, and never
// call Write or Flush from it.
type Ack func(err error)

// inserter prepares one attempt at inserting one table's batch with version ver: it encodes the rows (and on a
// server starts the INSERT) and returns the insert ready to send. ctx bounds the attempt, preparation and send. It
// must not keep tb's rows past the send: the writer reuses their memory once the batch is acknowledged. The Store's
// is Store.inserter; tests substitute their own.
type inserter func(ctx context.Context, tb tableBatch, ver uint64) (preparedInsert, error)

// preparedInsert is an encoded insert: send inserts it (once), abort releases it without inserting.
type preparedInsert interface {
	send() error
	abort()
}

// WriterOptions are the Writer's dependencies.
type WriterOptions struct {
	// Registerer receives the writer's metrics (tidemark_store_writer_*); nil registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock for the rows' version column; nil is time.Now.
	Now func() time.Time
	// Logger logs retries and given-up batches; nil discards.
	Logger *slog.Logger

	// onTake, when set (by tests), is called on the flusher goroutine after each decision whether to take the
	// pending rows: taken reports the decision, roomWanted whether a blocked Write was waiting for room when it
	// was made. It is the synchronisation point for "the flusher has seen the blocked Write".
	onTake func(taken, roomWanted bool)
	// takeHook, if set (tests), is called by the flusher with each batch's sequence number after taking it and
	// before preparing its insert.
	takeHook func(seq uint64)
}

// Writer batches rows into ClickHouse with bounded memory. Write buffers rows and returns at once unless the buffer
// is full, in which case it blocks (backpressure) until a flush makes room or its context ends. A batch is taken
// when BatchRows rows are buffered or every FlushInterval; two goroutines form a two-stage pipeline, so that
// ClickHouse is not idle while the writer encodes: one prepares a batch (encodes its columns and starts its INSERTs)
// while the other sends the batch before it, one batch at a time, retrying connection errors with exponential
// backoff. Acks run in Write order after ClickHouse acknowledged. It is safe for concurrent use.
type Writer struct {
	cfg      WriterConfig
	insert   inserter
	now      func() time.Time
	log      *slog.Logger
	m        *writerMetrics
	onTake   func(taken, roomWanted bool) // see WriterOptions.onTake
	takeHook func(seq uint64)             // see WriterOptions.takeHook

	ctx    context.Context    // ends retries; cancelled when Close gives up waiting
	cancel context.CancelFunc //
	kick   chan struct{}      // wakes the flusher (cap 1)
	done   chan struct{}      // closed when the flusher returned

	mu sync.Mutex // guards the fields below
	// pending is accepted and not yet taken by the flusher (probe, lag and clock rows, copied) and pendingLatency
	// its latency rows (the Writes' own slices, kept: see Write); pendingAcks are its Writes' acks in order.
	pending        Rows
	pendingLatency latencyBatch
	pendingAcks    []pendingAck
	pendingRows    int
	pendingBytes   int64
	// heldRows/heldBytes count pending plus the batch in flight: the quantities MaxRows/MaxBytes bound.
	heldRows  int
	heldBytes int64
	// accepted counts accepted Writes, acked those whose Ack ran; Flush waits for acked to catch up.
	accepted, acked uint64
	flushWanted     bool // a Flush or Close asks the flusher to take a partial batch
	// roomWanted: a Write is blocked for room. Only when no batch is in flight (none whose ack will free room) does
	// that make the flusher take a partial batch; else it would turn one full insert into a full and a small one.
	roomWanted bool
	changed    chan struct{} // closed (and replaced) whenever held shrinks or acked grows
	closed     bool
	dedup      *dedupWindow
	hasher     keyHasher
	// Batches are numbered in the order they are taken: pendingSeq is the number pending rows will be taken under,
	// settledSeq the last batch whose outcome (stored or given up) is known; batches settle in order. The dedup
	// window remembers each key with the batch holding its copy.
	pendingSeq, settledSeq uint64
	// dependents holds, per batch taken but not settled, the Writes that had a row dropped as a duplicate of a row
	// in that batch: such a Write is acknowledged only if the batch is stored (see admitLocked).
	dependents map[uint64][]*dependency
	// progressAt is when the writer last made progress: ClickHouse acknowledged a batch, or rows started waiting
	// while none did. Stalled measures from it.
	progressAt time.Time
	// free holds emptied row buffers of acknowledged batches (at most maxFree), so pending does not regrow from
	// nothing, reallocating and copying its rows many times over, for each batch.
	free []Rows
}

// pendingAck is an accepted Write's ack and, when some of its rows were dropped as duplicates of rows still on their
// way to ClickHouse, what their fate depends on.
type pendingAck struct {
	ack Ack
	dep *dependency
}

// dependency is the fate of the batches a Write's duplicate rows were dropped for: err is set (under Writer.mu)
// when one of them is given up, and the Write's ack then reports it, whatever became of the Write's own rows.
type dependency struct {
	err error
}

// maxFree is how many emptied row buffers the writer keeps. At most three are in use (pending, the batch prepared
// ahead and the one being sent), so in a steady flow every new pending buffer comes from the free list.
const maxFree = 2

// NewWriter returns a Writer inserting into s with s's Config().Writer settings, and starts its flush goroutine;
// Close stops it.
func NewWriter(s *Store, opts WriterOptions) (*Writer, error) {
	return newWriter(s.inserter(), s.cfg.Writer, opts)
}

func newWriter(ins inserter, cfg WriterConfig, opts WriterOptions) (*Writer, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		var errs []error
		for _, e := range unjoin(err) {
			errs = append(errs, fmt.Errorf("writer.%w", e))
		}
		return nil, fmt.Errorf("store writer config: %w", errors.Join(errs...))
	}
	w := &Writer{
		cfg: cfg, insert: ins, now: opts.Now, log: opts.Logger, onTake: opts.onTake, takeHook: opts.takeHook,
		kick: make(chan struct{}, 1), done: make(chan struct{}), changed: make(chan struct{}),
		dedup: newDedupWindow(cfg.DedupWindow), pendingSeq: 1, dependents: map[uint64][]*dependency{},
	}
	m, err := newWriterMetrics(opts.Registerer, func() float64 { d, _ := w.unacknowledged(); return d.Seconds() })
	if err != nil {
		return nil, err
	}
	w.m = m
	if w.now == nil {
		w.now = time.Now
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	go w.run()
	return w, nil
}

// Write accepts rows for insertion; ack (may be nil) runs once they are acknowledged or given up (see Ack). A row
// whose key the dedup window has seen is dropped and counted. An ack with nil always means that a copy of every row
// of the Write is stored: a row dropped as a duplicate of one still on its way to ClickHouse makes the ack wait for
// that copy, and carry the error if the writer gives that copy up. An empty Rows is accepted too: its ack runs in
// order after the Writes before it (useful to commit offsets of records that produced no row).
//
// Write blocks while accepting rows would exceed MaxRows or MaxBytes held, until a flush makes room; a single Write
// larger than the limits is accepted once nothing else is held. It returns ctx.Err() if ctx ends first (nothing was
// accepted and ack never runs) and ErrWriterClosed after Close began.
//
// Latency rows, the high-volume table, are kept, not copied: the writer reads rows.Latency until ack runs (or, when
// Write returns an error, not at all), and the caller must neither modify it nor reuse its memory before then; it
// may read it meanwhile (the collector keeps the same rows to re-deliver a batch the writer gave up). A copy would
// hold every in-flight row twice, in a process whose memory the rows in flight dominate. Probe, lag and clock-offset
// rows are copied; the caller may reuse them.
func (w *Writer) Write(ctx context.Context, rows Rows, ack Ack) error {
	n, size := rows.Len(), rowsSize(&rows)
	var blockedSince time.Time
	for {
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return ErrWriterClosed
		}
		if w.heldRows == 0 || (w.heldRows+n <= w.cfg.MaxRows && w.heldBytes+size <= w.cfg.MaxBytes) {
			break // holding w.mu
		}
		changed := w.changed
		w.roomWanted = true
		w.mu.Unlock()
		w.wake()
		if blockedSince.IsZero() {
			blockedSince = time.Now()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			w.m.blockedSecs.Add(time.Since(blockedSince).Seconds())
			return ctx.Err()
		}
	}
	if !blockedSince.IsZero() {
		w.m.blockedSecs.Add(time.Since(blockedSince).Seconds())
	}
	if w.heldRows == 0 {
		w.progressAt = w.now() // no row was waiting: the stall clock starts with these
	}
	added, addedBytes, dep := w.admitLocked(&rows)
	w.pendingAcks = append(w.pendingAcks, pendingAck{ack, dep})
	w.pendingRows += added
	w.pendingBytes += addedBytes
	w.heldRows += added
	w.heldBytes += addedBytes
	w.accepted++
	full := w.pendingRows >= w.cfg.BatchRows
	w.m.bufferedRows.Set(float64(w.heldRows))
	w.m.bufferedBytes.Set(float64(w.heldBytes))
	w.mu.Unlock()
	if full {
		w.wake()
	}
	return nil
}

// admitLocked appends the rows whose keys the dedup window admits to pending and returns how many rows and
// estimated bytes it added. A row the window refuses has a copy in an earlier Write. If that copy is pending too,
// the two share a batch and its fate; if it is in a batch taken but not settled, the returned dependency (nil when
// there is none) ties this Write's ack to that batch: a Write must not be acknowledged on the strength of a copy
// that is later given up (its caller would commit the offsets of a row never stored). A copy in a settled batch
// was stored: keys of given-up batches leave the window (forget). Caller holds w.mu.
func (w *Writer) admitLocked(rows *Rows) (n int, size int64, dep *dependency) {
	w.pending.Probe = roomFor(w.pending.Probe, len(rows.Probe))
	w.pending.Lag = roomFor(w.pending.Lag, len(rows.Lag))
	w.pending.ClockOffsets = roomFor(w.pending.ClockOffsets, len(rows.ClockOffsets))
	if w.dedup == nil {
		if len(rows.Latency) > 0 {
			w.pendingLatency = append(w.pendingLatency, rows.Latency)
		}
		w.pending.Probe = append(w.pending.Probe, rows.Probe...)
		w.pending.Lag = append(w.pending.Lag, rows.Lag...)
		w.pending.ClockOffsets = append(w.pending.ClockOffsets, rows.ClockOffsets...)
		return rows.Len(), rowsSize(rows), nil
	}
	var dups [4]int
	var waits []uint64 // batches in flight holding copies of dropped rows, each once
	seed, seq := w.dedup.seed, w.pendingSeq
	// The Write's latency rows are kept as they are unless some are dropped: then (rarely: a re-delivery) the rows
	// admitted are copied, from the first dropped one on.
	var kept []LatencyRow
	for i := range rows.Latency {
		r := &rows.Latency[i]
		switch {
		case w.admitKey(w.hasher.latency(seed, r), seq, &waits):
			n, size = n+1, size+r.size()
			if kept != nil {
				kept = append(kept, *r)
			}
		case kept == nil:
			dups[0]++
			kept = append(make([]LatencyRow, 0, len(rows.Latency)-1), rows.Latency[:i]...)
		default:
			dups[0]++
		}
	}
	switch {
	case len(kept) > 0:
		w.pendingLatency = append(w.pendingLatency, kept)
	case kept == nil && len(rows.Latency) > 0:
		w.pendingLatency = append(w.pendingLatency, rows.Latency)
	}
	var np, nl, nc int
	var sp, sl, sc int64
	w.pending.Probe, np, sp, dups[1] = admitRows(w, w.pending.Probe, rows.Probe, (*keyHasher).probe, seed, seq, &waits)
	w.pending.Lag, nl, sl, dups[2] = admitRows(w, w.pending.Lag, rows.Lag, (*keyHasher).lag, seed, seq, &waits)
	w.pending.ClockOffsets, nc, sc, dups[3] = admitRows(w, w.pending.ClockOffsets, rows.ClockOffsets, (*keyHasher).clock, seed, seq, &waits)
	n, size = n+np+nl+nc, size+sp+sl+sc
	for i, t := range []string{TableLatency, TableProbe, TableLag, TableClockOffsets} {
		if dups[i] > 0 {
			w.m.duplicates.WithLabelValues(t).Add(float64(dups[i]))
		}
	}
	if len(waits) > 0 {
		dep = &dependency{}
		for _, b := range waits {
			w.dependents[b] = append(w.dependents[b], dep)
		}
	}
	return n, size, dep
}

// admitRows appends to dst the rows of src whose keys (key) are new to the dedup window, admitting them as held by
// batch seq, and returns dst, how many it appended and their size in bytes, and how many it dropped as duplicates.
// Caller holds w.mu.
func admitRows[R any, P interface {
	*R
	size() int64
}](w *Writer, dst, src []R, key func(*keyHasher, maphash.Seed, *R) uint64, seed maphash.Seed, seq uint64, waits *[]uint64) (out []R, n int, size int64, dups int) {
	for i := range src {
		r := &src[i]
		if w.admitKey(key(&w.hasher, seed, r), seq, waits) {
			dst = append(dst, *r)
			n, size = n+1, size+P(r).size()
		} else {
			dups++
		}
	}
	return dst, n, size, dups
}

// admitKey admits a row key into the dedup window as held by batch seq and reports whether it was new. A key seen
// before whose copy is in a batch taken but not settled adds that batch to waits. Caller holds w.mu.
func (w *Writer) admitKey(h, seq uint64, waits *[]uint64) bool {
	isNew, held := w.dedup.admit(h, seq)
	if !isNew && held > w.settledSeq && held < seq && !slices.Contains(*waits, held) {
		*waits = append(*waits, held)
	}
	return isNew
}

// roomFor returns s with capacity for n more elements, at least doubling it when it must grow: append alone grows
// large slices by ~1.25×, which copies a 50k-row buffer of 232-byte rows about ten times on its way up.
func roomFor[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	return slices.Grow(s, max(n, cap(s), 256))
}

// Flush waits until every Write accepted before it was acknowledged or given up, or ctx ends. It does not stop
// other Writes meanwhile.
func (w *Writer) Flush(ctx context.Context) error {
	w.mu.Lock()
	target := w.accepted
	for w.acked < target {
		w.flushWanted = true
		changed := w.changed
		w.mu.Unlock()
		w.wake()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-w.done:
			w.mu.Lock()
			if w.acked < target {
				w.mu.Unlock()
				return ErrWriterClosed
			}
			w.mu.Unlock()
			return nil
		}
		w.mu.Lock()
	}
	w.mu.Unlock()
	return nil
}

// Stalled returns nil unless rows wait and ClickHouse has acknowledged nothing for StallTimeout: then an error
// saying for how long and how many rows wait (ClickHouse down, frozen, or every insert timing out). Batches given up
// are not progress. It is what /readyz reports for the writer; it never blocks on ClickHouse.
func (w *Writer) Stalled() error {
	d, waiting := w.unacknowledged()
	if waiting > 0 && d >= w.cfg.StallTimeout {
		return fmt.Errorf("ClickHouse has acknowledged nothing for %s while %d rows wait (clickhouse.writer.stall_timeout %s): %w",
			d.Round(time.Second), waiting, w.cfg.StallTimeout, ErrWriterStalled)
	}
	return nil
}

// unacknowledged returns how many rows wait and, if any, for how long ClickHouse has acknowledged nothing: since
// the last acknowledged batch or since the rows started waiting, whichever is later (0 when none wait). It is
// tidemark_store_writer_unacknowledged_seconds; Stalled reports it once it reaches StallTimeout.
func (w *Writer) unacknowledged() (time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.heldRows == 0 {
		return 0, 0
	}
	return max(0, w.now().Sub(w.progressAt)), w.heldRows
}

// Close stops accepting Writes, flushes everything accepted (retrying as configured) and stops the flusher. If ctx
// ends first, the batch being retried and everything still buffered are given up: their Acks get the error, and
// Close returns it. Close is idempotent.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	w.closed = true
	w.flushWanted = true
	w.mu.Unlock()
	w.wake()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		w.cancel() // ends the retry loop; the flusher then fails what is left and returns
		<-w.done
		return fmt.Errorf("close store writer: unflushed rows given up: %w", ctx.Err())
	}
}

func (w *Writer) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// batch is what the flusher took: the rows of some Writes and their acks, numbered seq in the order taken.
type batch struct {
	seq     uint64
	rows    Rows // probe, lag and clock rows
	latency latencyBatch
	acks    []pendingAck
	n       int
	bytes   int64
}

// flight is a batch on its way to ClickHouse: its tables (non-empty ones, in insertion order), their version and
// each table's first insert attempt, prepared while the batch before it was being sent.
type flight struct {
	b      *batch
	ver    uint64
	tables []tableBatch
	first  []*attempt
}

// run is the preparing stage of the flush pipeline: it takes due batches and prepares them for the sending stage,
// which it starts and waits for. The sending stage is the only caller of Acks.
func (w *Writer) run() {
	flights := make(chan *flight) // unbuffered: at most one batch is prepared ahead of the one being sent
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for f := range flights {
			w.send(f)
		}
	}()
	defer close(w.done)
	defer w.cancel()
	defer func() { close(flights); <-sent }()
	tick := time.NewTicker(w.cfg.FlushInterval)
	defer tick.Stop()
	for {
		force := false
		select {
		case <-w.kick:
		case <-tick.C:
			force = true
		}
		for {
			b, closed := w.take(force)
			if b == nil {
				if closed {
					return
				}
				break
			}
			if w.takeHook != nil {
				w.takeHook(b.seq)
			}
			flights <- w.prepare(b)
			force = false
		}
	}
}

// take returns the pending batch when it is due (full, forced by the ticker, wanted by Flush/Close, or by a
// blocked Write while no batch is in flight), else nil; closed reports that the writer is closed and nothing is pending, so the flusher may exit.
func (w *Writer) take(force bool) (b *batch, closed bool) {
	w.mu.Lock()
	roomWanted := w.roomWanted
	defer func() {
		w.mu.Unlock()
		if w.onTake != nil {
			w.onTake(b != nil, roomWanted)
		}
	}()
	empty := w.pendingRows == 0 && len(w.pendingAcks) == 0
	if empty {
		w.flushWanted, w.roomWanted = false, false
		return nil, w.closed
	}
	inFlight := w.heldRows > w.pendingRows || w.heldBytes > w.pendingBytes
	if !force && !w.flushWanted && !w.closed && w.pendingRows < w.cfg.BatchRows && (!w.roomWanted || inFlight) {
		return nil, false
	}
	b = &batch{seq: w.pendingSeq, rows: w.pending, latency: w.pendingLatency, acks: w.pendingAcks, n: w.pendingRows,
		bytes: w.pendingBytes}
	w.pendingSeq++
	w.pending, w.pendingLatency, w.pendingAcks, w.pendingRows, w.pendingBytes = Rows{}, nil, nil, 0, 0
	if n := len(w.free); n > 0 {
		w.pending, w.free = w.free[n-1], w.free[:n-1]
	}
	w.flushWanted, w.roomWanted = false, false
	return b, false
}

// prepare builds b's flight: each non-empty table's first insert attempt, encoded and started.
func (w *Writer) prepare(b *batch) *flight {
	f := &flight{b: b, ver: uint64(w.now().UnixMilli())}
	for _, tb := range []tableBatch{b.latency, probeBatch(b.rows.Probe), lagBatch(b.rows.Lag),
		clockBatch(b.rows.ClockOffsets)} {
		if tb.len() > 0 {
			f.tables = append(f.tables, tb)
			f.first = append(f.first, w.prepareAttempt(tb, f.ver))
		}
	}
	return f
}

// send inserts a flight table by table, each with retries, then runs its acks and releases its room. A table
// already inserted is never re-sent when a later one fails: that would double count it in the rollups.
func (w *Writer) send(f *flight) {
	b, tables := f.b, f.tables
	var err error
	failedFrom := len(tables)
	for i, tb := range tables {
		if err = w.insertWithRetry(tb, f.ver, f.first[i]); err != nil {
			failedFrom = i
			break
		}
		w.m.rowsWritten.WithLabelValues(tb.table()).Add(float64(tb.len()))
		w.m.batches.WithLabelValues(tb.table()).Inc()
	}
	if err != nil {
		for i, tb := range tables[failedFrom:] {
			w.m.rowsDropped.WithLabelValues(tb.table()).Add(float64(tb.len()))
			if i > 0 {
				f.first[failedFrom+i].discard() // prepared, never sent
			}
		}
		w.m.failures.WithLabelValues(tables[failedFrom].table()).Inc()
		w.log.Error("store writer gave up a batch; its writers were told", "table", tables[failedFrom].table(),
			"rows", b.n, "err", err)
		w.forget(tables[failedFrom:])
	}
	w.settle(b.seq, err)
	for _, a := range b.acks {
		if a.ack == nil {
			continue
		}
		aerr := err
		if aerr == nil && a.dep != nil {
			w.mu.Lock()
			aerr = a.dep.err
			w.mu.Unlock()
		}
		a.ack(aerr)
	}
	w.mu.Lock()
	if err == nil {
		w.progressAt = w.now()
	}
	w.heldRows -= b.n
	w.heldBytes -= b.bytes
	w.acked += uint64(len(b.acks))
	w.m.bufferedRows.Set(float64(w.heldRows))
	w.m.bufferedBytes.Set(float64(w.heldBytes))
	w.recycleLocked(b.rows)
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// settle records batch seq's outcome: from now on a copy of its rows in the dedup window is a stored one, and the
// Writes that dropped duplicates of its rows learn whether it was stored (err nil) or given up.
func (w *Writer) settle(seq uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		for _, d := range w.dependents[seq] {
			if d.err == nil {
				d.err = fmt.Errorf("rows of this write repeat rows of an earlier batch that the writer gave up on: %w", err)
			}
		}
	}
	delete(w.dependents, seq)
	w.settledSeq = seq
}

// recycleLocked keeps an acknowledged batch's (probe, lag and clock) row buffers, emptied, for a later pending
// buffer. Buffers far above BatchRows (an oversized Write) are left to the garbage collector. Latency rows are the
// Writes' own (see Write): nothing to recycle. Caller holds w.mu.
func (w *Writer) recycleLocked(r Rows) {
	if len(w.free) >= maxFree || cap(r.Probe) > 2*w.cfg.BatchRows ||
		cap(r.Lag) > 2*w.cfg.BatchRows || cap(r.ClockOffsets) > 2*w.cfg.BatchRows {
		return
	}
	clear(r.Probe) // drop the rows' strings
	clear(r.Lag)
	clear(r.ClockOffsets)
	w.free = append(w.free, Rows{Probe: r.Probe[:0], Lag: r.Lag[:0], ClockOffsets: r.ClockOffsets[:0]})
}

// forget removes the keys of rows that were given up from the dedup window, so their re-delivery is written.
func (w *Writer) forget(tables []tableBatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dedup == nil {
		return
	}
	seed := w.dedup.seed
	for _, tb := range tables {
		switch rs := tb.(type) {
		case latencyBatch:
			for _, seg := range rs {
				for i := range seg {
					w.dedup.forget(w.hasher.latency(seed, &seg[i]))
				}
			}
		case probeBatch:
			for i := range rs {
				w.dedup.forget(w.hasher.probe(seed, &rs[i]))
			}
		case lagBatch:
			for i := range rs {
				w.dedup.forget(w.hasher.lag(seed, &rs[i]))
			}
		case clockBatch:
			for i := range rs {
				w.dedup.forget(w.hasher.clock(seed, &rs[i]))
			}
		}
	}
}

// attempt is one insert attempt of one table: prepared (ins, or the preparation's err) under ctx, which bounds
// the whole attempt with InsertTimeout. took is the time spent preparing and sending, not waiting in between.
type attempt struct {
	ins    preparedInsert
	err    error
	cancel context.CancelFunc
	took   time.Duration
}

// prepareAttempt encodes tb and starts its insert. The attempt's InsertTimeout starts now: for a batch's first
// attempt it includes the wait for the batch before it, normally one send, far below the timeout.
func (w *Writer) prepareAttempt(tb tableBatch, ver uint64) *attempt {
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.InsertTimeout)
	start := time.Now()
	ins, err := w.insert(ctx, tb, ver)
	a := &attempt{ins: ins, err: err, cancel: cancel, took: time.Since(start)}
	if err != nil {
		a.ins = nil
		cancel()
	}
	return a
}

// sendAttempt sends a prepared attempt (or returns its preparation's error) and records its duration.
func (w *Writer) sendAttempt(tb tableBatch, a *attempt) error {
	defer a.cancel()
	err := a.err
	if err == nil {
		start := time.Now()
		err = a.ins.send()
		a.took += time.Since(start)
	}
	w.m.insertSeconds.WithLabelValues(tb.table()).Observe(a.took.Seconds())
	return err
}

// discard releases an attempt that will not be sent.
func (a *attempt) discard() {
	if a.ins != nil {
		a.ins.abort()
	}
	a.cancel()
}

// insertWithRetry sends first (tb's prepared first attempt), then retries retryable errors with fresh attempts and
// exponential backoff (with jitter) until success, RetryMaxElapsed, or the writer's context ends.
func (w *Writer) insertWithRetry(tb tableBatch, ver uint64, first *attempt) error {
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval = w.cfg.RetryInitial
	eb.MaxInterval = w.cfg.RetryMax
	op := func() (struct{}, error) {
		a := first
		if a == nil {
			a = w.prepareAttempt(tb, ver)
		}
		first = nil
		err := w.sendAttempt(tb, a)
		if err != nil && !retryable(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}
	notify := func(err error, next time.Duration) {
		w.m.retries.WithLabelValues(tb.table()).Inc()
		w.log.Warn("store insert failed, retrying", "table", tb.table(), "rows", tb.len(), "in", next, "err", err)
	}
	_, err := backoff.Retry(w.ctx, op, backoff.WithBackOff(eb), backoff.WithMaxElapsedTime(w.cfg.RetryMaxElapsed),
		backoff.WithNotify(notify))
	if err != nil && errors.Is(err, context.Canceled) && w.ctx.Err() != nil {
		return fmt.Errorf("insert into %s abandoned at writer close: %w", tb.table(), err)
	}
	return err
}

func rowsSize(r *Rows) int64 {
	var n int64
	for i := range r.Latency {
		n += r.Latency[i].size()
	}
	for i := range r.Probe {
		n += r.Probe[i].size()
	}
	for i := range r.Lag {
		n += r.Lag[i].size()
	}
	for i := range r.ClockOffsets {
		n += r.ClockOffsets[i].size()
	}
	return n
}
