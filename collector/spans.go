package collector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency"
)

// PathSpans is the spans path's label value.
const PathSpans = "spans"

// maxSpansPerRequest bounds the Kafka spans taken from one spans-topic record; further ones are dead-lettered.
const maxSpansPerRequest = 10000

// recordKey names one record of a monitored topic.
type recordKey struct {
	topic     string
	partition int32
	offset    int64
}

// appendStamp is a record's LogAppendTime as read from Kafka: ms since the epoch on the appending broker's clock
// (0: none, the topic keeps CreateTime or the record could not be read), and that broker (-1: unknown).
type appendStamp struct {
	ms     int64
	broker int32
}

// appendReader reads records' LogAppendTime by (topic, partition, offset). A key it could not read is absent from
// the answer; the error, if any, says why (partial failure is normal: a leaderless partition).
type appendReader interface {
	ReadAppends(ctx context.Context, keys []recordKey) (map[recordKey]appendStamp, error)
}

// producerSide is a producer span kept for the consumer spans of its record: its send and end (ns, producer clock)
// and host.
type producerSide struct {
	start, end int64
	// ackEnd is set when end is the broker's acknowledgement: the span names its record's offset, which only the
	// acknowledgement tells (the Java agent's spans). A span without the offset (Python's confluent-kafka
	// instrumentation) ends when produce() returns, before the record is sent, so its end bounds nothing.
	ackEnd    bool
	host      string
	seen      time.Time // when it was read (reference clock), for collector.spans.join_window
	bracketed bool      // fed to the engine as a bracket (guarded by Spans.mu once kept)
	// trace and span are the producer span's ids: the parent of the record's hop spans.
	trace pcommon.TraceID
	span  pcommon.SpanID
}

// spanRef names one span: a consumer span's parent or link, which for the agents' consumer spans is the producer
// span of its record (the trace context rides in the record's headers).
type spanRef struct {
	trace pcommon.TraceID
	span  pcommon.SpanID
}

// keptProducers are producer spans kept for join_window, at most max_pending, forgotten oldest first.
type keptProducers[K comparable] struct {
	m     map[K]*producerSide
	order []K // keys in arrival order (may repeat a key; expiry checks seen)
}

func (t *keptProducers[K]) get(k K) *producerSide { return t.m[k] }

// put keeps p under k, forgetting the oldest first when max producer spans are kept; it reports whether it did.
func (t *keptProducers[K]) put(k K, p *producerSide, max int) (evicted bool) {
	if t.m == nil {
		t.m = map[K]*producerSide{}
	}
	if _, ok := t.m[k]; !ok && len(t.m) >= max {
		for len(t.order) > 0 && !evicted {
			old := t.order[0]
			t.order = t.order[1:]
			if _, ok := t.m[old]; ok {
				delete(t.m, old)
				evicted = true
			}
		}
	}
	t.m[k] = p
	t.order = append(t.order, k)
	return evicted
}

// expire forgets producer spans read before cut.
func (t *keptProducers[K]) expire(cut time.Time) {
	n := 0
	for n < len(t.order) {
		k := t.order[n]
		p, ok := t.m[k]
		if ok && !p.seen.Before(cut) {
			break
		}
		if ok {
			delete(t.m, k)
		}
		n++
	}
	t.order = t.order[n:]
}

// heldConsumer is a consumer span waiting for its record's producer span (collector.spans.join_wait).
type heldConsumer struct {
	ks       kafkaSpan
	app      appendStamp
	batch    *spanBatch
	deadline time.Time
	prod     *producerSide // set once joined
	done     bool
}

// spanBatch is a spans-topic batch on its way to the sink: its rows are submitted, under the reservation taken when
// it was read, once every consumer span of it is joined or gave up waiting.
type spanBatch struct {
	ctx      context.Context
	b        kafka.Batch
	res      reservation
	from, to int64
	mu       sync.Mutex // guards left and rows once the handler released its hold
	left     int        // held consumer spans not yet completed, plus 1 while the handler runs
	rows     store.Rows
}

func (sb *spanBatch) add(row store.LatencyRow) {
	sb.mu.Lock()
	sb.rows.Latency = append(sb.rows.Latency, row)
	sb.mu.Unlock()
}

// release drops one hold and reports whether the batch is complete.
func (sb *spanBatch) release() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.left--
	return sb.left == 0
}

// Spans is the spans path: it consumes OTLP trace requests from the spans topic and turns the Kafka messaging
// spans of OpenTelemetry agents into the stamps receipts carry: produce (producer span start), append (the record's
// LogAppendTime, read by offset), receive and processed (the consumer span's start and, for a span that covers
// processing, its end). A producer span that names its offset ends at the acknowledgement, so it brackets its
// record's append (start ≤ append ≤ end) and its host's clock (latency.Engine.ObserveAck, as for acknowledged
// records); one without the offset ends before the append and brackets its host only up to its record's receipt on
// the same host (start ≤ append ≤ receive); consumer hosts get the causal envelope from their rows.
//
// Consumer spans are joined with their record's producer span: a producer span is kept for join_window; a consumer
// span whose producer span is not there yet waits up to join_wait, in its (group, topic, partition)'s arrival
// order, and is then stored without the produce stamp. What is held is bounded by max_pending (producer spans and
// waiting consumer spans each); beyond it the oldest producer span is forgotten and a new consumer span is stored
// at once without waiting.
type Spans struct {
	*pathDeps
	cfg    SpansConfig
	reader appendReader
	stored storedOffsets

	mu sync.Mutex // guards producers, bySpan, queues, waiting, waitingBySpan, held
	// producers are the producer spans that name their record; bySpan those that do not (no offset: Python's
	// confluent-kafka instrumentation), found through a consumer span's parent or link.
	producers     keptProducers[recordKey]
	bySpan        keptProducers[spanRef]
	queues        map[pathKey][]*heldConsumer
	waiting       map[recordKey][]*heldConsumer
	waitingBySpan map[spanRef][]*heldConsumer
	held          int
}

func newSpans(d *pathDeps, cfg SpansConfig, appends appendReader) *Spans {
	return &Spans{pathDeps: d, cfg: cfg, reader: appends, queues: map[pathKey][]*heldConsumer{},
		waiting: map[recordKey][]*heldConsumer{}, waitingBySpan: map[spanRef][]*heldConsumer{}}
}

// HandleBatch is the spans path's kafka.BatchHandler.
func (s *Spans) HandleBatch(ctx context.Context, b kafka.Batch, mark func(int64)) error {
	s.metrics.Records.WithLabelValues(PathSpans).Add(float64(len(b.Records)))
	part := b.Partition
	sb := &spanBatch{ctx: ctx, b: b, left: 1, from: b.Records[0].Offset, to: b.Records[len(b.Records)-1].Offset + 1}
	sb.res = s.reserve(b, func(next int64) {
		s.stored.advance(part, next)
		mark(next)
	})
	spans, bad, errs := s.decode(b)
	if len(bad) > 0 {
		if err := s.deadLetter(ctx, PathSpans, bad, errs); err != nil {
			return err
		}
	}
	appends, err := s.readAppends(ctx, spans)
	if err != nil {
		return err // ctx ended
	}
	now := s.clock()
	// Producer spans first: a consumer span of the same batch then joins at once.
	for i := range spans {
		if spans[i].side == sideProducer {
			if spans[i].noOffset {
				s.metrics.Spans.WithLabelValues("producer_no_offset").Inc()
			}
			s.producer(ctx, &spans[i], appends, now)
		}
	}
	var complete []*spanBatch
	s.mu.Lock()
	for i := range spans {
		if spans[i].side == sideConsumer {
			complete = append(complete, s.consumerLocked(ctx, &spans[i], appends[recordKey{spans[i].topic, spans[i].partition, spans[i].offset}], sb, now)...)
		}
	}
	s.mu.Unlock()
	if sb.release() {
		complete = append(complete, sb)
	}
	return s.submitAll(complete)
}

// decode returns the Kafka spans of b's records not stored already (records read again after an uncommitted
// session ended), counting the spans by outcome. A record that is not an OTLP request goes to bad whole; one
// holding malformed Kafka spans goes to bad as a request holding those spans only, its good spans being kept.
func (s *Spans) decode(b kafka.Batch) (spans []kafkaSpan, bad []kafka.Record, errs []error) {
	for i := range b.Records {
		rec := &b.Records[i]
		if s.stored.stored(b.Partition, rec.Offset) {
			continue // read again after an uncommitted session ended: its rows are stored already
		}
		d, err := decodeSpans(rec.Value, maxSpansPerRequest, s.cfg.ConsumerGroups)
		if err != nil {
			s.metrics.Spans.WithLabelValues("malformed_request").Inc()
			bad, errs = append(bad, *rec), append(errs, err)
			continue
		}
		s.metrics.Spans.WithLabelValues("not_kafka").Add(float64(d.notKafka))
		s.metrics.Spans.WithLabelValues("batch").Add(float64(d.batch))
		if d.malformed > 0 {
			s.metrics.Spans.WithLabelValues("malformed").Add(float64(d.malformed))
			r := *rec
			r.Value = d.malformedRequestOut
			bad, errs = append(bad, r), append(errs, fmt.Errorf("%d of the request's spans: %w", d.malformed, d.firstErr))
		}
		spans = append(spans, d.spans...)
	}
	return spans, bad, errs
}

// readAppends reads, in one read for the whole batch (producer and consumer spans of one record share it), the
// LogAppendTime of every record spans name by offset, and places each in the leader epoch of the broker that
// stamped it where the read could not. Records it could not read are absent (counted no_append, logged); the
// error is ctx's, when it ended.
func (s *Spans) readAppends(ctx context.Context, spans []kafkaSpan) (map[recordKey]appendStamp, error) {
	if len(spans) == 0 || s.reader == nil {
		return nil, nil
	}
	keys := make([]recordKey, 0, len(spans))
	seen := make(map[recordKey]bool, len(spans))
	for i := range spans {
		k := recordKey{spans[i].topic, spans[i].partition, spans[i].offset}
		if !spans[i].noOffset && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	appends, err := s.reader.ReadAppends(ctx, keys)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.log.Warn("spans: some append times could not be read; their rows have no append stamp", "err", err)
	}
	if missing := len(keys) - len(appends); missing > 0 {
		s.metrics.Spans.WithLabelValues("no_append").Add(float64(missing))
	}
	// Whose clock stamped an append the read could not place: the leader of its epoch (placed in the background;
	// waited for here, before the join's lock).
	for k, app := range appends {
		if app.ms > 0 && app.broker < 0 {
			_, _, app.broker = s.appendHost(ctx, k.topic, k.partition, k.offset)
			appends[k] = app
		}
	}
	return appends, nil
}

// producer records a producer span: kept for its record's consumer spans, and fed to the engine as a bracket of its
// host's clock when its record's append time is known.
func (s *Spans) producer(ctx context.Context, ks *kafkaSpan, appends map[recordKey]appendStamp, now time.Time) {
	s.metrics.Spans.WithLabelValues("producer").Inc()
	k := recordKey{ks.topic, ks.partition, ks.offset}
	p := &producerSide{start: ks.start, end: ks.end, ackEnd: !ks.noOffset, host: ks.host, seen: now, trace: ks.traceID,
		span: ks.spanID}
	if app, ok := appends[k]; ok && app.ms > 0 && p.ackEnd {
		s.bracket(p, app, p.end)
	}
	s.mu.Lock()
	s.producers.expire(now.Add(-s.cfg.JoinWindow))
	s.bySpan.expire(now.Add(-s.cfg.JoinWindow))
	var waiting []*heldConsumer
	var evicted bool
	if ks.noOffset {
		ref := spanRef{ks.traceID, ks.spanID}
		evicted = s.bySpan.put(ref, p, s.cfg.MaxPending)
		waiting = s.waitingBySpan[ref]
	} else {
		evicted = s.producers.put(k, p, s.cfg.MaxPending)
		waiting = s.waiting[k]
	}
	if evicted {
		s.metrics.Spans.WithLabelValues("producer_evicted").Inc()
	}
	for _, h := range waiting {
		h.prod = p
	}
	// Waiting consumers of this record may now complete, in their paths' order.
	ready := s.drainLocked(ctx, now)
	s.mu.Unlock()
	_ = s.submitAll(ready) // a failed write ends its batch's session (submit); nothing to add here
}

// bracket feeds producer span p, whose record was appended at app, to the engine as a bracket of its host's clock,
// from the span's start to after, a moment (ns, the same host's clock) known to follow the append: the
// acknowledgement, or the record's receipt by a consumer on the same host. Once per producer span.
func (s *Spans) bracket(p *producerSide, app appendStamp, after int64) {
	if p.bracketed {
		return
	}
	p.bracketed = true
	broker, _ := s.brokerOf(app)
	err := s.engine.ObserveAck(latency.ProducerAck{Host: s.hosts.id(p.host), Broker: broker,
		Send: time.Unix(0, p.start), Ack: time.Unix(0, after), AppendMs: app.ms})
	s.metrics.SpanBrackets.WithLabelValues(bracketOutcome(err)).Inc()
}

// brokerOf is the engine host and broker_host name of the broker that stamped app (latency.UnknownHost when not
// known: the engine flags its stages).
func (s *Spans) brokerOf(app appendStamp) (latency.HostID, string) {
	id, name, _ := s.leaderHost(app.broker)
	return id, name
}

// bracketOutcome is the label of a producer span's bracket.
func bracketOutcome(err error) string {
	switch {
	case err == nil:
		return "bracketed"
	case errors.Is(err, latency.ErrAppendClockUnknown):
		return "broker_not_bracketed"
	case errors.Is(err, latency.ErrImplausibleOffset):
		return "implausible"
	case errors.Is(err, latency.ErrBadRoundTrip):
		return "bad_round_trip"
	}
	return "unknown_host"
}

// consumerLocked takes one consumer span: it completes now when its path has nothing waiting and its producer span
// is known (or cannot wait: max_pending), else it waits in its path's queue. It returns the batches completed.
func (s *Spans) consumerLocked(ctx context.Context, ks *kafkaSpan, app appendStamp, sb *spanBatch, now time.Time) []*spanBatch {
	s.metrics.Spans.WithLabelValues("consumer").Inc()
	k := recordKey{ks.topic, ks.partition, ks.offset}
	pk := pathKey{ks.group, ks.topic, ks.partition}
	h := &heldConsumer{ks: *ks, app: app, batch: sb, deadline: now.Add(s.cfg.JoinWait), prod: s.producers.get(k)}
	for _, ref := range ks.refs {
		if h.prod == nil {
			h.prod = s.bySpan.get(ref)
		}
	}
	var ready []*spanBatch
	if h.prod == nil && s.held >= s.cfg.MaxPending && s.cfg.JoinWait > 0 {
		// Full: this span cannot wait, and so neither can those of its path before it (their order is kept).
		s.metrics.Spans.WithLabelValues("join_overflow").Inc()
		ready = s.drainPathLocked(ctx, pk, now, true, nil)
	}
	if len(s.queues[pk]) == 0 && (h.prod != nil || s.held >= s.cfg.MaxPending || s.cfg.JoinWait <= 0) {
		sb.add(s.row(ctx, h, now))
		s.metrics.SpansHeld.Set(float64(s.held))
		return ready
	}
	sb.mu.Lock()
	sb.left++
	sb.mu.Unlock()
	s.queues[pk] = append(s.queues[pk], h)
	if h.prod == nil {
		s.waiting[k] = append(s.waiting[k], h)
		for _, ref := range ks.refs {
			s.waitingBySpan[ref] = append(s.waitingBySpan[ref], h)
		}
	}
	s.held++
	return append(ready, s.drainLocked(ctx, now)...)
}

// drainLocked completes, in every path's queue, the consumer spans at its head that are joined or expired (now
// past their deadline). It returns the batches that became complete.
func (s *Spans) drainLocked(ctx context.Context, now time.Time) []*spanBatch {
	var ready []*spanBatch
	for pk := range s.queues {
		ready = s.drainPathLocked(ctx, pk, now, false, ready)
	}
	s.metrics.SpansHeld.Set(float64(s.held))
	return ready
}

// drainPathLocked completes the consumer spans at the head of pk's queue that are joined, expired or, with all,
// any; it appends the batches that became complete to ready.
func (s *Spans) drainPathLocked(ctx context.Context, pk pathKey, now time.Time, all bool, ready []*spanBatch) []*spanBatch {
	q := s.queues[pk]
	n := 0
	for n < len(q) {
		h := q[n]
		if h.prod == nil && !all && now.Before(h.deadline) {
			break
		}
		if h.prod == nil {
			s.metrics.Spans.WithLabelValues("join_timeout").Inc()
		}
		s.unwaitLocked(h)
		h.batch.add(s.row(ctx, h, now))
		h.done = true
		s.held--
		if h.batch.release() {
			ready = append(ready, h.batch)
		}
		n++
	}
	if n == len(q) {
		delete(s.queues, pk)
	} else if n > 0 {
		s.queues[pk] = append(q[:0:0], q[n:]...)
	}
	return ready
}

// unwaitLocked removes h from the waiting lists of its record and of the spans that may be its producer span.
func (s *Spans) unwaitLocked(h *heldConsumer) {
	k := recordKey{h.ks.topic, h.ks.partition, h.ks.offset}
	if w := without(s.waiting[k], h); len(w) == 0 {
		delete(s.waiting, k)
	} else {
		s.waiting[k] = w
	}
	for _, ref := range h.ks.refs {
		if w := without(s.waitingBySpan[ref], h); len(w) == 0 {
			delete(s.waitingBySpan, ref)
		} else {
			s.waitingBySpan[ref] = w
		}
	}
}

// without returns w without h (in place).
func without(w []*heldConsumer, h *heldConsumer) []*heldConsumer {
	keep := w[:0]
	for _, x := range w {
		if x != h {
			keep = append(keep, x)
		}
	}
	return keep
}

// row corrects one consumer span (joined with its producer span when h.prod is set) and returns its latency row.
func (s *Spans) row(_ context.Context, h *heldConsumer, now time.Time) store.LatencyRow {
	ks := &h.ks
	var rec latency.Record
	var raw rawStamps
	rec.Offset = ks.offset
	consumer := s.hosts.id(ks.host)
	if ks.covers {
		rec.Stamps[latency.Receive] = latency.Stamp{Value: ks.start, Host: consumer, Unit: latency.Nanos}
		rec.Stamps[latency.Processed] = latency.Stamp{Value: ks.end, Host: consumer, Unit: latency.Nanos}
		raw.receive, raw.processed = nsToMs(ks.start), nsToMs(ks.end)
	} else {
		// A receive span ends when the record is handed over: the processed moment is not in the span.
		s.metrics.Spans.WithLabelValues("no_processed_end").Inc()
		rec.Stamps[latency.Receive] = latency.Stamp{Value: ks.end, Host: consumer, Unit: latency.Nanos}
		raw.receive = nsToMs(ks.end)
	}
	producer, broker := "", ""
	if p := h.prod; p != nil {
		// A producer span without the offset learns its record from the consumer span. Its end is no
		// acknowledgement, but the record's receipt follows its append: on the producer's own host that closes the
		// bracket (wider by the ingest and queue wait); on another host it bounds nothing.
		switch receive := rec.Stamps[latency.Receive].Value; {
		case h.app.ms <= 0:
		case p.ackEnd:
			s.bracket(p, h.app, p.end)
		case p.host == ks.host && receive >= p.start:
			s.bracket(p, h.app, receive)
		}
		producer = p.host
		rec.Stamps[latency.Produce] = latency.Stamp{Value: p.start, Host: s.hosts.id(p.host), Unit: latency.Nanos}
		raw.event = nsToMs(p.start)
	}
	if h.app.ms > 0 {
		var id latency.HostID
		id, broker = s.brokerOf(h.app)
		rec.Stamps[latency.Append] = latency.MillisStamp(id, h.app.ms)
		raw.append = h.app.ms
	}
	s.touchInstrumented(ks.group, now)
	res := s.engine.UnorderedPath(ks.group, ks.topic, ks.partition).Observe(rec)
	s.metrics.Classes.WithLabelValues(PathSpans, res.Class.String()).Inc()
	if res.Flags&latency.FlagSkewSuspected != 0 {
		s.metrics.Skewed.WithLabelValues(PathSpans).Inc()
	}
	if res.Live {
		if live := s.live.get(s.metrics, ks.group, ks.topic, now); live != nil {
			live.observe(&res, ks.traceID[:], now)
		}
	}
	if s.tracer != nil {
		s.tracer.record(&hop{path: PathSpans, group: ks.group, topic: ks.topic, partition: ks.partition,
			parent: hopParent(h), producer: producer, broker: broker, consumer: ks.host, naive: raw}, &res)
	}
	row := latencyRow(store.SourceReceipt, ks.group, ks.topic, ks.partition, raw, &res, producer, broker, ks.host,
		ks.traceID[:], ks.spanID[:])
	row.ReceiptPartition, row.ReceiptOffset = -1, -1 // not from the receipts topic: no receipts dedup seed
	return row
}

// hopParent is the span the hop spans of a consumer span's record hang under: its producer span once joined, else the
// consumer span's first reference (the agents parent or link a consumer span to its record's producer span). The
// spans were exported, so their traces were sampled. Invalid (no hop spans) when neither is known.
func hopParent(h *heldConsumer) trace.SpanContext {
	tid, sid := pcommon.TraceID{}, pcommon.SpanID{}
	switch {
	case h.prod != nil:
		tid, sid = h.prod.trace, h.prod.span
	case len(h.ks.refs) > 0:
		tid, sid = h.ks.refs[0].trace, h.ks.refs[0].span
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(tid), SpanID: trace.SpanID(sid),
		TraceFlags: trace.FlagsSampled, Remote: true})
}

// submitAll hands complete batches to the sink; their records are remembered as stored once acknowledged.
func (s *Spans) submitAll(batches []*spanBatch) error {
	var first error
	for _, sb := range batches {
		part, from, to := sb.b.Partition, sb.from, sb.to
		if err := s.submit(sb.ctx, PathSpans, sb.b, sb.res, sb.rows, func() { s.stored.acked(part, from, to) }); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Run completes, until ctx ends, the consumer spans whose join_wait is over (every quarter of join_wait, at least
// every 50 ms, at most every second) and forgets producer spans past join_window.
func (s *Spans) Run(ctx context.Context) error {
	period := min(max(s.cfg.JoinWait/4, 50*time.Millisecond), time.Second)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := s.sweep(ctx, s.clock()); err != nil && ctx.Err() == nil {
			s.log.Warn("spans: submit rows of consumer spans stored without their producer span", "err", err)
		}
	}
}

// sweep completes the consumer spans whose join_wait is over at now and forgets producer spans past join_window.
func (s *Spans) sweep(ctx context.Context, now time.Time) error {
	s.mu.Lock()
	s.producers.expire(now.Add(-s.cfg.JoinWindow))
	s.bySpan.expire(now.Add(-s.cfg.JoinWindow))
	ready := s.drainLocked(ctx, now)
	s.mu.Unlock()
	return s.submitAll(ready)
}
