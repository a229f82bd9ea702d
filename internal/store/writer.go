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

// rowsSize is the estimated size of r's rows in bytes, the sum of each row's size(): what WriterConfig.MaxBytes bounds.
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
