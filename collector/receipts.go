package collector

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// Receipts is the receipts path: it decodes receipt batches from the receipts topic, corrects every receipt's stamps
// through the latency engine and writes one latency row per receipt.
//
// A receipt whose append stamp needs its topic's metadata (the leader of a LogAppendTime topic, or the timestamp
// type the consumer did not declare) never waits for Kafka on the record path: while the topic is being looked up
// its record is parked on the topic (see parking) and the partition reads on; the batch's rows go to the sink once
// its parked records are processed. A receipt naming a topic the cluster does not know is stored without the
// leader's stamp and counted; one naming a new unknown topic while collector.metadata.max_unknown_topics are tracked
// is dead-lettered (reason unknown_topic).
type Receipts struct {
	*pathDeps
	stored  storedOffsets
	pending pendingRows
	park    parking
	acks    *ackFeed // producer acknowledgements (ack batches in the receipts topic)
}

// newReceipts returns the receipts path; ctx bounds its background work (the parked records' waiters).
func newReceipts(ctx context.Context, d *pathDeps) *Receipts {
	p := &Receipts{pathDeps: d, acks: newAckFeed(ctx, d)}
	p.park.ctx = ctx
	return p
}

// pendingRows keeps, per partition of the receipts topic, the rows made from each record until the sink
// acknowledges them. When the writer gives up on a batch, ClickHouse may still have stored it (the insert went through
// and its answer was lost); the session then ends and the records are read again. Those records must produce the
// same rows, not go through the engine a second time, where each receipt would be classified a redelivery and stored
// under a second key. Bounded by what the writer holds (its max_rows) plus the batches it gave up on, which are
// read again right after.
type pendingRows struct {
	mu          sync.Mutex // guards byPartition
	byPartition map[int32]map[int64][]store.LatencyRow
}

// get returns the rows made from the record at offset, if they are still waiting for an acknowledgement.
func (p *pendingRows) get(partition int32, offset int64) ([]store.LatencyRow, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rows, ok := p.byPartition[partition][offset]
	return rows, ok
}

// put remembers the rows made from the record at offset. It keeps rows itself, not a copy, and so does the writer
// (store.Writer.Write keeps latency rows until their ack; nobody writes to them after they are handed on): the rows
// of a batch in flight are held once, where they are the bulk of the collector's memory when ClickHouse is slower
// than Kafka. Its capacity is cut to its length, so an append to it can never write into the batch's later rows.
func (p *pendingRows) put(partition int32, offset int64, rows []store.LatencyRow) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byPartition == nil {
		p.byPartition = map[int32]map[int64][]store.LatencyRow{}
	}
	m := p.byPartition[partition]
	if m == nil {
		m = map[int64][]store.LatencyRow{}
		p.byPartition[partition] = m
	}
	m[offset] = rows[:len(rows):len(rows)]
}

// release forgets the records of offsets [from, to): their rows were acknowledged.
func (p *pendingRows) release(partition int32, from, to int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.byPartition[partition]
	if to-from <= int64(len(m)) {
		for o := from; o < to; o++ {
			delete(m, o)
		}
		return
	}
	for o := range m {
		if from <= o && o < to {
			delete(m, o)
		}
	}
}

// storedOffsets remembers, per partition of the receipts topic, which records' rows the sink acknowledged in this
// process: every offset below next, plus the acknowledged batches above it (ranges [from, to)) that wait behind one
// not acknowledged yet, or behind one the writer gave up on. When a session ends before its marks were committed (a
// broker restart, a coordinator move, a rebalance, or a re-read after the writer gave up on rows), the group reads
// those records again; their rows are already in ClickHouse, and handing the receipts to the engine a second time
// would classify each as a redelivery and store a second row under another replay class (the class is part of the
// row key). Skipping them keeps the rows exactly once by key.
// It lives as long as the process: after a collector restart the re-read receipts still go through the engine
// (docs/collector.md, "Known limits"). The receipts topic must not be deleted and re-created while a collector runs
// (its new offsets would be taken for stored ones).
type storedOffsets struct {
	mu   sync.Mutex // guards next and above
	next map[int32]int64
	// above holds, per partition, acknowledged ranges [0] <= offset < [1] at or above next, unordered; ranges at or
	// below next are dropped as next advances.
	above map[int32][][2]int64
}

// stored reports whether offset's rows were acknowledged.
func (s *storedOffsets) stored(partition int32, offset int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.next[partition]; ok && offset < n {
		return true
	}
	for _, r := range s.above[partition] {
		if r[0] <= offset && offset < r[1] {
			return true
		}
	}
	return false
}

// acked records that the rows of offsets [from, to) were acknowledged.
func (s *storedOffsets) acked(partition int32, from, to int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.next[partition]; ok && to <= n {
		return
	}
	if s.above == nil {
		s.above = map[int32][][2]int64{}
	}
	s.above[partition] = append(s.above[partition], [2]int64{from, to})
}

// advance records that every offset below next is acknowledged (the marked, in-order prefix).
func (s *storedOffsets) advance(partition int32, next int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == nil {
		s.next = map[int32]int64{}
	}
	if n, ok := s.next[partition]; !ok || next > n {
		s.next[partition] = next
	}
	if rs := s.above[partition]; len(rs) > 0 {
		keep := rs[:0]
		for _, r := range rs {
			if r[1] > next {
				keep = append(keep, r)
			}
		}
		s.above[partition] = keep
	}
}

// PathReceipts, PathProbe and PathTap are the path label values.
const (
	PathReceipts = "receipts"
	PathProbe    = "probe"
	PathTap      = "tap"
)

// HandleBatch is the receipts path's kafka.BatchHandler.
func (p *Receipts) HandleBatch(ctx context.Context, b kafka.Batch, mark func(int64)) error {
	p.metrics.Records.WithLabelValues(PathReceipts).Add(float64(len(b.Records)))
	var (
		bad  []kafka.Record
		errs []error
		buf  []instrument.Receipt
		acks []instrument.Ack
	)
	part, from, to := b.Partition, b.Records[0].Offset, b.Records[len(b.Records)-1].Offset+1
	rb := &receiptBatch{ctx: ctx, b: b, left: 1, from: from, to: to}
	src := source{b.Topic, part}
	rb.res = p.reserve(b, func(next int64) {
		p.stored.advance(part, next)
		if p.checkpoints == nil {
			mark(next)
			return
		}
		p.checkpoints.marked(src, next, mark) // released once the checkpoints below next are published
	})
	now := p.clock()
	var cache batchCache
	defer cache.flush(p.metrics, PathReceipts)
	for i := range b.Records {
		off := b.Records[i].Offset
		if p.stored.stored(part, off) {
			continue // read again after an uncommitted session ended: its rows are stored already
		}
		if again, ok := p.pending.get(part, off); ok {
			rb.rows.Latency = append(rb.rows.Latency, again...) // read again after the writer gave up on it: same rows
			continue
		}
		if instrument.IsAckBatch(b.Records[i].Value) {
			var err error
			if acks, err = instrument.DecodeAckBatch(acks[:0], b.Records[i].Value); err != nil {
				bad, errs = append(bad, b.Records[i]), append(errs, err)
			} else {
				p.acks.add(acks)
			}
			continue
		}
		var err error
		buf, err = instrument.DecodeReceiptBatch(buf[:0], b.Records[i].Value)
		if err == nil {
			var pr *parkedRecord
			if pr, err = p.needs(buf, off); pr != nil {
				pr.batch, pr.receipts = rb, append([]instrument.Receipt(nil), buf...) // buf is reused
				rb.holdParked(len(buf))
				parked, perr := p.park.admit(ctx, pr, p)
				if perr != nil {
					return perr // ctx ended
				}
				if parked {
					continue
				}
				rb.release()
			}
		}
		if err != nil {
			bad = append(bad, b.Records[i])
			errs = append(errs, err)
			continue
		}
		rb.rows.Latency = p.rows(ctx, rb.rows.Latency, src, off, buf, now, &cache, len(b.Records))
	}
	if len(bad) > 0 {
		if err := p.deadLetter(ctx, PathReceipts, bad, errs); err != nil {
			return err
		}
	}
	rb.touched = cache.touched
	if !rb.release() {
		return nil // records wait for topic metadata: the last of them to be processed hands the batch to the sink
	}
	return p.submitBatch(rb)
}

// rows appends to dst the rows of the receipts rs decoded from the record at offset of receipts partition part,
// remembering them until acknowledged (pendingRows). hint sizes a first allocation.
func (p *Receipts) rows(ctx context.Context, dst []store.LatencyRow, src source, off int64, rs []instrument.Receipt, now time.Time, cache *batchCache, hint int) []store.LatencyRow {
	start := len(dst)
	cache.traces.fill(rs)
	for j := range rs {
		var tid, sid string
		if rs[j].HasTrace {
			tid, sid = cache.traces.take()
		}
		if j == 0 || rs[j].Group != rs[j-1].Group {
			p.touchInstrumented(rs[j].Group, now)
		}
		if p.checkpoints.done(pathKey{rs[j].Group, rs[j].Topic, rs[j].Partition}, src, off) {
			continue // processed and stored by the process before a restart, and counted by its checkpoint
		}
		if dst == nil { // most records of a batch hold as many receipts as the first
			dst = make([]store.LatencyRow, 0, len(rs)*hint)
		}
		// The next row is zero already: past its length, a slice of pointerful rows is zeroed when allocated.
		dst = slices.Grow(dst, 1)[:len(dst)+1]
		row := &dst[len(dst)-1]
		p.row(ctx, row, &rs[j], now, cache, tid, sid)
		// where the row came from: a successor assigned the partition seeds its dedup window from these
		row.ReceiptPartition, row.ReceiptOffset = src.partition, off
	}
	p.pending.put(src.partition, off, dst[start:])
	return dst
}

// submitBatch hands a complete receipts batch's rows to the sink; its records are remembered as stored once acked.
func (p *Receipts) submitBatch(rb *receiptBatch) error {
	part, from, to := rb.b.Partition, rb.from, rb.to
	rows := rb.rows
	switch {
	case len(rows.Latency) == 0:
		rows.Latency = rb.parkedRows
	case len(rb.parkedRows) > 0:
		rows.Latency = append(rows.Latency, rb.parkedRows...)
	}
	// The batch's checkpoints are taken now that every receipt of it, parked or not, went through the engine.
	touched := rb.touched
	for _, tp := range rb.parkedTouched {
		if !slices.Contains(touched, tp) {
			touched = append(touched, tp)
		}
	}
	p.checkpoints.queue(source{rb.b.Topic, part}, to, touched)
	return p.submit(rb.ctx, PathReceipts, rb.b, rb.res, rows, func() {
		p.stored.acked(part, from, to)
		p.pending.release(part, from, to)
	})
}

// needs reports whether the receipts rs of the record at offset must wait for topic metadata: it returns the record
// to park (naming every topic its receipts name, and those still being looked up), or nil. It returns an error,
// for the dead-letter topic, when a receipt needs the metadata of a topic the cache refuses to track (too many
// unknown names).
func (p *Receipts) needs(rs []instrument.Receipt, off int64) (*parkedRecord, error) {
	var topics, waitOn []string
	for j := range rs {
		r := &rs[j]
		if j > 0 && r.Topic == rs[j-1].Topic {
			continue
		}
		if !slices.Contains(topics, r.Topic) {
			topics = append(topics, r.Topic)
		}
		if !needsMetadata(r) {
			continue
		}
		switch v := p.meta.Topic(r.Topic); v.State {
		case kafka.TopicPending:
			if !slices.Contains(waitOn, r.Topic) {
				waitOn = append(waitOn, r.Topic)
			}
		case kafka.TopicOverflow:
			return nil, fmt.Errorf("receipt names topic %q, unknown to this collector, while collector.metadata.max_unknown_topics names unknown to the cluster are tracked: %w",
				r.Topic, errUnknownTopic)
		}
	}
	// The append leaders are asked about once the topics' metadata is known (it says which stamps are append stamps).
	var lw <-chan struct{}
	if len(waitOn) == 0 {
		lw = p.leaderWait(rs)
	}
	if len(waitOn) == 0 && lw == nil && !p.park.busy(topics) {
		return nil, nil
	}
	return &parkedRecord{offset: off, topics: topics, waitOn: waitOn, leaderWait: lw, leaderChecked: len(waitOn) == 0}, nil
}

// leaderWait returns nil when the leader of every append stamp among rs is known now (kafka.AppendLeaders.Await),
// else the channel to wait on before processing them: the record is parked on it, so that placing an offset in its
// leader epoch (up to one refresh round) never holds up the receipts partition. Only receipts of topics the metadata
// cache knows are asked about (as in row). Caller has checked no topic of rs is being looked up.
//
// Offsets are placed in order (every offset below a placed one is placed), so each run of consecutive receipts of
// one partition is asked about once, for its highest offset: one call (a lock and a map lookup) per run instead of
// one per receipt.
func (p *Receipts) leaderWait(rs []instrument.Receipt) <-chan struct{} {
	if p.appends == nil {
		return nil
	}
	var (
		wait   <-chan struct{}
		view   *kafka.TopicView
		topicT string
		run    = -1  // the first receipt of the run to ask about
		high   int64 // the run's highest offset
	)
	ask := func() {
		// Channels close in round order, so the last one returned is the latest: waiting for it covers every receipt.
		if run >= 0 {
			if ch := p.appends.Await(rs[run].Topic, rs[run].Partition, high); ch != nil {
				wait = ch
			}
		}
	}
	for j := range rs {
		r := &rs[j]
		if !r.HasRecordTimestamp || r.TimestampType == instrument.TimestampCreate {
			continue
		}
		if view == nil || topicT != r.Topic {
			view, topicT = p.meta.Topic(r.Topic), r.Topic
		}
		if view.State != kafka.TopicKnown {
			continue
		}
		if r.TimestampType == instrument.TimestampUnknown && view.TimestampType != kafka.TimestampLogAppend {
			continue
		}
		if run >= 0 && r.Topic == rs[run].Topic && r.Partition == rs[run].Partition {
			high = max(high, r.Offset)
			continue
		}
		ask()
		run, high = j, r.Offset
	}
	ask()
	return wait
}

// needsMetadata reports whether a receipt's stamps depend on its topic's metadata: a record timestamp that is an
// append stamp (its leader) or whose meaning the consumer did not declare (the topic's timestamp type).
func needsMetadata(r *instrument.Receipt) bool {
	return r.HasRecordTimestamp && (r.TimestampType == instrument.TimestampUnknown || r.TimestampType == instrument.TimestampLogAppend)
}

// receiptBatch is a receipts batch on its way to the sink. Its rows are submitted, under the reservation taken
// when it was read, by whoever completes it: the handler when none of its records was parked, else the processing
// of its last parked record.
type receiptBatch struct {
	ctx      context.Context // the batch's session
	b        kafka.Batch
	res      reservation
	from, to int64      // its records' offsets
	rows     store.Rows // the handler's rows (only the handler touches them until it releases)

	mu             sync.Mutex         // guards left, lost, parkedReceipts, parkedRows
	left           int                // parked records not yet processed, plus 1 while the handler runs
	lost           bool               // a parked record was abandoned (its session ended): the batch is never submitted
	parkedReceipts int                // receipts of the records parked so far: the capacity parkedRows starts with
	parkedRows     []store.LatencyRow // rows of its parked records, processed in their topics' order
	// touched and parkedTouched are the engine paths the handler's and the parked records' receipts went through
	// (their replay checkpoints are taken when the batch is complete); parkedTouched is guarded by mu.
	touched, parkedTouched []*latency.Path
}

// holdParked holds the batch for a parked record of n receipts.
func (rb *receiptBatch) holdParked(n int) {
	rb.mu.Lock()
	rb.left++
	rb.parkedReceipts += n
	rb.mu.Unlock()
}

// release drops one hold (the handler's, or a parked record's once processed) and reports whether the batch is
// now complete and to be submitted.
func (rb *receiptBatch) release() bool {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	rb.left--
	return rb.left == 0 && !rb.lost
}

// topicView returns the metadata of r's topic, cached for the run of receipts c is for.
func (p *Receipts) topicView(r *instrument.Receipt, c *batchCache) *kafka.TopicView {
	if c.view == nil {
		c.view = p.meta.Topic(r.Topic)
	}
	return c.view
}

// row corrects one receipt into *row; tid and sid are the hex of its trace and span ids (traceHex), "" without.
func (p *Receipts) row(ctx context.Context, row *store.LatencyRow, r *instrument.Receipt, now time.Time, c *batchCache, tid, sid string) {
	p.enter(r, c)
	var st receiptStamps
	p.stamps(r, now, c, &st)
	if c.view != nil && c.view.State != kafka.TopicKnown && needsMetadata(r) {
		// No such topic, its lookup failed, or (rarely: an expired answer was dropped after the record was checked)
		// it is being looked up again: the row has no leader's stamp.
		c.noMeta[c.view.State]++
	}
	var res latency.Result
	c.path.ObserveInto(&st.rec, &res)
	c.classes[res.Class]++
	if res.Flags&latency.FlagSkewSuspected != 0 {
		c.skewed++
	}
	var exemplar []byte
	if r.HasTrace {
		exemplar = r.TraceID[:]
	}
	if p.tracer != nil {
		kept := p.traceReceipt(r, &res, st.producer, st.broker, st.raw)
		if !kept && r.TraceUnsampled {
			exemplar = nil // neither the producer nor Tidemark recorded this trace: an exemplar would link to nothing
		}
	}
	var e2e e2eBounds // computed once for the live histograms and the row
	e2e.lo, e2e.hi, e2e.ok = res.StageBounds(latency.StageE2E)
	p.observeLive(r, &res, e2e, exemplar, now, c)
	latencyRowInto(row, store.SourceReceipt, r.Group, r.Topic, r.Partition, st.raw, &res, e2e, st.producer, st.broker, r.Host)
	row.TraceID, row.SpanID = tid, sid
}

// enter points c at r's (group, topic, partition) when it is not there already: the engine path, and nothing
// looked up yet for it; the batch's counts and touched paths carry over.
func (p *Receipts) enter(r *instrument.Receipt, c *batchCache) {
	if c.valid && c.partition == r.Partition && c.topic == r.Topic && c.group == r.Group {
		return
	}
	classes, skewed, noMeta, overflow, touched := c.classes, c.skewed, c.noMeta, c.overflow, c.touched
	hosts, traces := c.hosts, c.traces
	*c = batchCache{group: r.Group, topic: r.Topic, partition: r.Partition, valid: true, classes: classes, skewed: skewed,
		noMeta: noMeta, overflow: overflow,
		path: p.engine.Path(r.Group, r.Topic, r.Partition), tt: 255, touched: touched, hosts: hosts, traces: traces}
	if !slices.Contains(c.touched, c.path) {
		c.touched = append(c.touched, c.path)
	}
}

// receiptStamps are a receipt's stamps for the engine, the same in Unix ms on their own clocks for the naive
// stages, and the producer and broker host names of its row.
type receiptStamps struct {
	rec              latency.Record
	raw              rawStamps
	producer, broker string
}

// stamps reads r's stamps into st: processed and receive on the consumer's clock, produce on the producer's (from
// the produce-time header), and the record timestamp as its topic's timestamps mean it (recordStamp). Clock
// offsets the hosts report (time sync) are fed to the engine.
func (p *Receipts) stamps(r *instrument.Receipt, now time.Time, c *batchCache, st *receiptStamps) {
	st.rec.Offset = r.Offset
	consumer := c.hosts.id(p.hosts, r.Host)
	if r.Clock.Valid {
		p.hosts.report(consumer, r.Clock.Offset, r.Clock.Uncertainty, now)
	}
	st.rec.Stamps[latency.Processed] = latency.Stamp{Value: r.ProcessedNs, Host: consumer, Unit: latency.Nanos}
	st.raw.processed = nsToMs(r.ProcessedNs)
	if r.ReceiveNs != 0 {
		st.rec.Stamps[latency.Receive] = latency.Stamp{Value: r.ReceiveNs, Host: consumer, Unit: latency.Nanos}
		st.raw.receive = nsToMs(r.ReceiveNs)
	}
	st.producer = r.ProduceHost
	if r.ProduceNs != 0 {
		id := c.hosts.id(p.hosts, r.ProduceHost)
		if r.ProduceClock.Valid {
			p.hosts.report(id, r.ProduceClock.Offset, r.ProduceClock.Uncertainty, now)
		}
		st.rec.Stamps[latency.Produce] = latency.Stamp{Value: r.ProduceNs, Host: id, Unit: latency.Nanos}
		st.raw.event = nsToMs(r.ProduceNs)
	}
	if r.HasRecordTimestamp {
		p.recordStamp(r, c, st)
	}
}

// recordStamp reads r's record timestamp into st. The consumer declares what it means, else its topic's
// timestamp type says (looked up once per batch run). A LogAppendTime is the append stamp of the broker that led
// the record's epoch, not of today's leader; only a topic the metadata cache knows is asked about (names the
// cluster does not know stay bounded there). A CreateTime is the produce stamp, on an unnamed producer clock
// "producer@<topic>", when no produce-time header gave it.
func (p *Receipts) recordStamp(r *instrument.Receipt, c *batchCache, st *receiptStamps) {
	tt := r.TimestampType
	if tt == instrument.TimestampUnknown {
		if c.tt == 255 { // not looked up yet in this batch
			c.tt = instrument.TimestampType(p.topicView(r, c).TimestampType)
		}
		tt = c.tt
	}
	switch tt {
	case instrument.TimestampLogAppend:
		if p.topicView(r, c).State == kafka.TopicKnown {
			id, broker := p.placedBroker(r, c) // waited for, if need be, in parking
			st.broker = broker
			st.rec.Stamps[latency.Append] = latency.MillisStamp(id, r.RecordTimestampMs)
			st.raw.append = r.RecordTimestampMs
		}
	case instrument.TimestampCreate:
		if r.ProduceNs == 0 { // no header: the record timestamp is the produce time, on an unnamed producer clock
			if c.createHost == "" {
				c.createHost = "producer@" + r.Topic
			}
			st.producer = c.createHost
			st.rec.Stamps[latency.Produce] = latency.MillisStamp(c.hosts.id(p.hosts, st.producer), r.RecordTimestampMs)
			st.raw.event = r.RecordTimestampMs
		}
	}
}

// placedBroker is appendHost for r's offset without waiting (Await said it was placed, or its wait is over): the
// engine id and broker_host name of its epoch's leader, whose host is looked up once per batch (hostIDs.brokerHost).
func (p *Receipts) placedBroker(r *instrument.Receipt, c *batchCache) (latency.HostID, string) {
	leader := int32(-1)
	if p.appends != nil {
		leader = p.appends.Placed(r.Topic, r.Partition, r.Offset)
	}
	if leader < 0 {
		id, name, _ := p.leaderHost(leader)
		return id, name
	}
	return c.hosts.brokerHost(p.hosts, leader)
}

// observeLive feeds a live receipt's trusted stages to the live histograms of its (group, topic), with exemplar.
// Every live record with a valid stage feeds them (observe takes the stages the engine trusts): a record flagged
// for one invalid stage, e.g. an append whose leader is not known, still has a valid e2e. Commit-bounded results
// never do. Over collector.max_live_series pairs the row is stored and the histograms miss it (counted).
func (p *Receipts) observeLive(r *instrument.Receipt, res *latency.Result, e2e e2eBounds, exemplar []byte, now time.Time, c *batchCache) {
	if res.Class != latency.ClassLive || res.Flags&latency.FlagCommitBound != 0 || res.Has&^res.Untrusted == 0 {
		return
	}
	if c.live == nil && !c.liveFull {
		c.live = p.live.get(p.metrics, r.Group, r.Topic, now)
		c.liveFull = c.live == nil
	}
	if c.live != nil {
		c.live.observeWith(res, e2e, exemplar, now)
	} else {
		c.overflow++
	}
}
