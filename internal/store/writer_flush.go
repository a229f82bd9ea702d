package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// The flush pipeline: the flusher takes due batches (take), prepares each one's inserts (prepare) while the batch
// before it is being sent (send), retries a failed insert (insertWithRetry), and settles each batch's acks in the
// order taken (settle).

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
