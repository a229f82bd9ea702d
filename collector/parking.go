package collector

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency/instrument"
)

// maxParkedReceipts bounds the receipts parked at once (about 250 bytes each decoded, so some 16 MB). Past it the
// receipts handler waits for room (backpressure: the partition is not read meanwhile), which happens only when the
// cluster answers metadata lookups far slower than receipts arrive.
const maxParkedReceipts = 1 << 16

// parking holds the receipt records that must wait for a topic's metadata, or for the append leaders to place their
// append stamps' offsets in a leader epoch (up to one refresh round, kafka.AppendLeaders.Await), so that a lookup
// never blocks the record path (a lookup in the path would let one writer of receipts naming made-up topics freeze
// the receipts path for minutes).
//
// Records are parked per topic, in arrival order: a record is queued on every topic its receipts name, and it is
// processed only once it is at the head of each of those queues and none of the topics it waits for is still being
// looked up. So the receipts of one (group, topic, partition) reach the latency engine in the order they were
// read (the engine classifies replays by that order), while records of other topics go on at once. One goroutine
// waits per pending topic (on kafka.Metadata.Await, shared by every record of that topic), bounded by the cache's
// bound on unknown names; when the topic's lookup settles it processes the records that became ready and hands
// completed batches to the sink.
//
// Parking is only for waiting on lookups: a record that is merely behind parked records whose lookups have settled
// waits in the handler for them to be processed (CPU work, then a write), so the partition stays paused by the
// writer's backpressure as usual, and parked records never pile up behind a full writer.
//
// A parked record whose session has ended is dropped unprocessed (its offset was never marked: the next session
// reads it again), so a stop or a rebalance never waits for a lookup.
type parking struct {
	ctx context.Context // ends the waiters (the collector's run); nil is Background

	count atomic.Int64 // records parked: lets busy skip the lock while nothing is parked

	mu      sync.Mutex // guards the fields below
	queues  map[string][]*parkedRecord
	waiting map[string]bool // topics with a waiter
	// leaderWaiting maps each append-leader round channel with a waiter to the topics of the records parked on it.
	leaderWaiting map[<-chan struct{}][]string
	receipts      int           // receipts parked, ≤ maxParkedReceipts (or one record above it)
	room          chan struct{} // closed (signalLocked) when a record leaves its queues or a lookup settles
}

// parkedRecord is one receipt record waiting in parking.
type parkedRecord struct {
	batch    *receiptBatch
	offset   int64
	receipts []instrument.Receipt
	topics   []string // every topic its receipts name
	waitOn   []string // those being looked up when it was read
	// leaderWait, when not nil, closes once the append leaders can place its append stamps (Receipts.leaderWait),
	// asked once every topic it waits on has settled (leaderChecked).
	leaderWait    <-chan struct{}
	leaderChecked bool
	taken         bool // being processed (still at the head of its queues until done)
}

// busy reports whether a record naming topics must queue behind parked ones.
func (k *parking) busy(topics []string) bool {
	if k.count.Load() == 0 {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, t := range topics {
		if len(k.queues[t]) > 0 {
			return true
		}
	}
	return false
}

// admit parks r unless, by now, it need not wait (every topic it waits for has settled and none of its topics has
// a queue). A record that is only behind parked records whose lookups have all settled (they are being processed
// and handed to the sink right now) is not parked: admit waits for them to leave their queues and returns false, so
// the handler processes and writes it itself, and the writer's backpressure still stops the partition being read.
// While maxParkedReceipts are parked it waits for room before parking. It returns ctx's error if ctx ends while it
// waits.
func (k *parking) admit(ctx context.Context, r *parkedRecord, p *Receipts) (bool, error) {
	k.mu.Lock()
	for {
		busy, lookup := false, false
		for _, t := range r.topics {
			busy = busy || len(k.queues[t]) > 0
		}
		for _, t := range r.waitOn {
			lookup = lookup || p.meta.Topic(t).State == kafka.TopicPending
		}
		lookup = lookup || (r.leaderWait != nil && !isClosed(r.leaderWait))
		if !busy && !lookup {
			k.mu.Unlock()
			return false, nil
		}
		// Park when a lookup is involved (r's own, or any parked record's: one of those may be ahead of r), or
		// there is room; else wait for the queues to move.
		if lookup || len(k.waiting) > 0 || len(k.leaderWaiting) > 0 {
			if k.receipts == 0 || k.receipts+len(r.receipts) <= maxParkedReceipts {
				break
			}
		}
		if k.room == nil {
			k.room = make(chan struct{})
		}
		room := k.room
		k.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		k.mu.Lock()
	}
	if k.queues == nil {
		k.queues, k.waiting = map[string][]*parkedRecord{}, map[string]bool{}
	}
	for _, t := range r.topics {
		k.queues[t] = append(k.queues[t], r)
	}
	k.receipts += len(r.receipts)
	k.count.Add(1)
	p.metrics.Parked.Add(float64(len(r.receipts)))
	for _, t := range r.waitOn {
		k.waitLocked(t, p)
	}
	if r.leaderWait != nil {
		k.waitLeaderLocked(r.leaderWait, r.topics, p)
	}
	k.mu.Unlock()
	return true, nil
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitLeaderLocked starts ch's waiter unless it has one, and adds topics to those it releases. One waiter per
// round channel (there are at most two: the round under way's and the next), however many records wait on it.
// Caller holds k.mu.
func (k *parking) waitLeaderLocked(ch <-chan struct{}, topics []string, p *Receipts) {
	if k.leaderWaiting == nil {
		k.leaderWaiting = map[<-chan struct{}][]string{}
	}
	ts, ok := k.leaderWaiting[ch]
	for _, t := range topics {
		if !slices.Contains(ts, t) {
			ts = append(ts, t)
		}
	}
	k.leaderWaiting[ch] = ts
	if ok {
		return
	}
	ctx := k.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	go func() {
		select {
		case <-ch:
		case <-ctx.Done():
		}
		k.mu.Lock()
		ts := k.leaderWaiting[ch]
		delete(k.leaderWaiting, ch)
		k.signalLocked()
		k.mu.Unlock()
		k.release(p, ts)
	}()
}

// signalLocked wakes the handlers waiting in admit: a record left its queues or a lookup settled. Caller holds k.mu.
func (k *parking) signalLocked() {
	if k.room != nil {
		close(k.room)
		k.room = nil
	}
}

// waitLocked starts topic's waiter unless it has one. Caller holds k.mu.
func (k *parking) waitLocked(topic string, p *Receipts) {
	if k.waiting[topic] {
		return
	}
	k.waiting[topic] = true
	ctx := k.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	go func() {
		select {
		case <-p.meta.Await(topic):
		case <-ctx.Done():
		}
		k.mu.Lock()
		delete(k.waiting, topic)
		k.signalLocked()
		k.mu.Unlock()
		k.release(p, []string{topic})
	}()
}

// ready reports whether r may be processed now: at the head of each of its queues, and no topic it waits for still
// pending (a pending one gets a waiter, which calls release when it settles). Caller holds k.mu.
func (k *parking) readyLocked(r *parkedRecord, p *Receipts) bool {
	for _, t := range r.topics {
		if q := k.queues[t]; len(q) == 0 || q[0] != r {
			return false
		}
	}
	ok := true
	for _, t := range r.waitOn {
		if p.meta.Topic(t).State == kafka.TopicPending {
			k.waitLocked(t, p)
			ok = false
		}
	}
	if ok && !r.leaderChecked { // its topics are known now: which stamps are append stamps is too
		r.leaderChecked = true
		r.leaderWait = p.leaderWait(r.receipts)
	}
	if r.leaderWait != nil && !isClosed(r.leaderWait) {
		k.waitLeaderLocked(r.leaderWait, r.topics, p)
		ok = false
	}
	return ok
}

// release processes, in order, every parked record at the head of topics' queues that is ready, and those that
// become ready as records ahead of them are done; then it hands the batches this completed to the sink. Records
// leave their queues as soon as they are processed, before any write: a write blocked by the writer's
// backpressure must not keep later records of the topic parked (they go to the handler's own, blocking, writes,
// which is what stops the partition being read).
func (k *parking) release(p *Receipts, topics []string) {
	var complete []*receiptBatch
	released := 0
	for len(topics) > 0 {
		k.mu.Lock()
		var ready []*parkedRecord
		for _, t := range topics {
			if q := k.queues[t]; len(q) > 0 && !q[0].taken && k.readyLocked(q[0], p) {
				q[0].taken = true
				ready = append(ready, q[0])
			}
		}
		k.mu.Unlock()
		topics = topics[:0:0]
		for _, r := range ready {
			k.process(p, r)
			k.mu.Lock()
			for _, t := range r.topics {
				q := k.queues[t]
				if len(q) > 0 && q[0] == r {
					q[0] = nil
					q = q[1:]
				}
				if len(q) == 0 {
					delete(k.queues, t)
				} else {
					k.queues[t] = q
				}
				if !slices.Contains(topics, t) {
					topics = append(topics, t)
				}
			}
			k.receipts -= len(r.receipts)
			k.count.Add(-1)
			k.signalLocked()
			k.mu.Unlock()
			released += len(r.receipts)
			if rb := r.batch; rb.release() {
				complete = append(complete, rb)
			}
		}
	}
	for _, rb := range complete {
		if err := p.submitBatch(rb); err != nil {
			p.log.Debug("parked receipts not written: their session ended", "err", err)
		}
	}
	p.metrics.Parked.Sub(float64(released)) // last: a test that sees 0 sees the batches handed over
}

// process makes r's rows into its batch, unless its session has ended (then the batch is lost: the next session
// reads the records again).
func (k *parking) process(p *Receipts, r *parkedRecord) {
	rb := r.batch
	if rb.ctx.Err() != nil {
		rb.mu.Lock()
		rb.lost = true
		rb.mu.Unlock()
		return
	}
	part := rb.b.Partition
	if p.stored.stored(part, r.offset) {
		return // a copy read in an earlier session was stored meanwhile
	}
	// The rows are built straight into the batch's parked rows, sized once for every receipt parked from the batch so
	// far: no per-record slice, no copy. The lock is the batch's alone (its other parked records, and the handler
	// only when it parks or finishes).
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.parkedRows == nil {
		rb.parkedRows = make([]store.LatencyRow, 0, rb.parkedReceipts)
	}
	if again, ok := p.pending.get(part, r.offset); ok {
		rb.parkedRows = append(rb.parkedRows, again...) // a copy read in an earlier session was processed meanwhile: same rows
		return
	}
	var cache batchCache
	rb.parkedRows = p.rows(rb.ctx, rb.parkedRows, source{rb.b.Topic, part}, r.offset, r.receipts, p.clock(), &cache, 1)
	for _, tp := range cache.touched { // taken before flush, which empties the cache
		if !slices.Contains(rb.parkedTouched, tp) {
			rb.parkedTouched = append(rb.parkedTouched, tp)
		}
	}
	cache.flush(p.metrics, PathReceipts)
}
