package instrument

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/trace"
)

// ConsumerConfig configures a [Consumer].
type ConsumerConfig struct {
	// Group is the consumer group the application consumes as. Required.
	Group string
	// Host identifies this consumer host (its clock). Required.
	Host string
	// Clock reads this host's wall clock; nil means time.Now.
	Clock Clock
	// Offsets, when set, supplies a measured clock offset that travels in each receipt.
	Offsets OffsetSource
	// MaxPending bounds the receive stamps held for records not yet Done (memory ≈ MaxPending × ~80 B); default 65536.
	// When full, a new record's receive stamp is not kept and its receipt says "receive unknown".
	MaxPending int
	// TimestampTypes tells, per topic, what the record timestamp means; topics not listed are sent as
	// TimestampUnknown and the collector resolves them from the topic's configuration.
	TimestampTypes map[string]TimestampType
	// TracerProvider is the application's OpenTelemetry tracer provider: each record then gets a "process <topic>"
	// span (kind CONSUMER) from Receive to Done on this host's clock, parented to and linked with the producer's
	// context from traceparent. nil (the default) turns spans off at no cost.
	TracerProvider trace.TracerProvider
}

// ConsumerStats are the consumer helper's counters since it started.
type ConsumerStats struct {
	Done           uint64 // Done calls
	ReceiveMissing uint64 // Done for a record with no receive stamp kept (not Received, or MaxPending was full)
	PendingFull    uint64 // receive stamps not kept because MaxPending was reached
	BadHeaders     uint64 // produce-time headers that did not decode or held a stamp ≤ 0; the receipt has no produce stamp
	BadTraceParent uint64 // traceparent headers that were present but malformed; the receipt has no trace context (and a process span, if any, is a root)
	EmitDropped    uint64 // receipts the emitter refused (its queue was full)
	PendingRecords int    // receive stamps held now
}

type recordKey struct {
	topic     string
	partition int32
	offset    int64
}

// Consumer records receive and processed stamps for an application's consumed records and emits a [Receipt] per
// processed record. It is safe for concurrent use by the partition goroutines of a consumer group session. It can also
// be registered as a sarama ConsumerInterceptor, which stamps the time the client fetched the record instead of the
// time the application took it (then queue wait excludes, and processing includes, the client's buffer).
type Consumer struct {
	cfg  ConsumerConfig
	emit *Emitter

	tracer *tracer // nil: tracing off

	// mu guards pending (receive stamps, consumer clock ns, by record) and spans (open process spans by record, only
	// with tracing); Done removes a record's entries. spans never holds a record pending does not.
	mu      sync.Mutex
	pending map[recordKey]int64
	spans   map[recordKey]trace.Span

	done, receiveMissing, pendingFull, badHeaders, badTraceParent, emitDropped atomic.Uint64
}

var _ sarama.ConsumerInterceptor = (*Consumer)(nil)

// NewConsumer returns a consumer helper emitting through emit. It fails when Group or Host is empty or emit is nil.
func NewConsumer(cfg ConsumerConfig, emit *Emitter) (*Consumer, error) {
	var errs []error
	if cfg.Group == "" {
		errs = append(errs, errors.New("group is required"))
	}
	if cfg.Host == "" {
		errs = append(errs, errors.New("host is required"))
	}
	if emit == nil {
		errs = append(errs, errors.New("emitter is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("new tidemark consumer: %w", err)
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 65536
	}
	c := &Consumer{cfg: cfg, emit: emit, tracer: newTracer(cfg.TracerProvider, cfg.Host), pending: make(map[recordKey]int64)}
	if c.tracer != nil {
		c.spans = make(map[recordKey]trace.Span)
	}
	return c, nil
}

// OnConsume implements sarama.ConsumerInterceptor: it stamps the receive time when the client hands the record on.
func (c *Consumer) OnConsume(msg *sarama.ConsumerMessage) { c.Receive(msg) }

// Receive stamps msg's receive time (call it when the application takes the record from the consumer). A second
// Receive for the same record keeps the first stamp.
func (c *Consumer) Receive(msg *sarama.ConsumerMessage) {
	now := c.cfg.Clock.now()
	k := recordKey{msg.Topic, msg.Partition, msg.Offset}
	c.mu.Lock()
	if _, ok := c.pending[k]; ok {
		c.mu.Unlock()
		return
	}
	if len(c.pending) >= c.cfg.MaxPending {
		c.mu.Unlock()
		c.pendingFull.Add(1)
		return
	}
	c.pending[k] = now.UnixNano()
	c.mu.Unlock()
	if c.tracer != nil {
		// Started outside the lock (a recording span allocates); nil when it records nothing.
		span := c.tracer.process(msg, c.cfg.Group, now)
		if span == nil {
			return
		}
		c.mu.Lock()
		if _, ok := c.pending[k]; ok {
			if _, open := c.spans[k]; !open {
				c.spans[k] = span
				span = nil
			}
		}
		c.mu.Unlock()
		if span != nil { // forgotten meanwhile (a revoked partition): the record will not be Done here
			span.End(trace.WithTimestamp(now))
		}
	}
}

// Done stamps msg's processed time and emits its receipt. It never blocks and never fails: a receipt the emitter
// cannot queue is counted (Stats().EmitDropped).
func (c *Consumer) Done(msg *sarama.ConsumerMessage) {
	at := c.cfg.Clock.now()
	processed := at.UnixNano()
	c.done.Add(1)
	k := recordKey{msg.Topic, msg.Partition, msg.Offset}
	var span trace.Span
	c.mu.Lock()
	recv, ok := c.pending[k]
	delete(c.pending, k)
	if c.spans != nil {
		span = c.spans[k]
		delete(c.spans, k)
	}
	c.mu.Unlock()
	if !ok {
		c.receiveMissing.Add(1)
	}
	if span != nil {
		span.End(trace.WithTimestamp(at))
	}
	r := Receipt{
		Group: c.cfg.Group, Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset,
		TimestampType: c.cfg.TimestampTypes[msg.Topic],
		ReceiveNs:     recv, ProcessedNs: processed, Host: c.cfg.Host,
	}
	// Kafka's -1 (NO_TIMESTAMP) is reported as is; any other negative value is not a timestamp and the receipt
	// would be refused (Receipt.Validate), so it is reported as unread.
	if ms := msg.Timestamp.UnixMilli(); !msg.Timestamp.IsZero() && ms >= -1 {
		r.RecordTimestampMs = ms
		r.HasRecordTimestamp = true
	}
	if c.cfg.Offsets != nil {
		r.Clock = c.cfg.Offsets.ClockOffset().sane()
	}
	if v := header(msg.Headers, HeaderProduceTime); v != nil {
		var h ProduceHeader
		if err := h.UnmarshalBinary(v); err != nil || h.Time.UnixNano() <= 0 {
			c.badHeaders.Add(1)
		} else {
			r.ProduceNs = h.Time.UnixNano()
			r.ProduceHost = h.Host
			r.ProduceClock = h.Offset
		}
	}
	sc, err := SpanContextOf(header(msg.Headers, HeaderTraceParent))
	if err == nil {
		r.TraceID, r.SpanID, r.HasTrace, r.TraceUnsampled = sc.TraceID(), sc.SpanID(), true, !sc.IsSampled()
	}
	if errors.Is(err, ErrMalformedTraceParent) {
		c.badTraceParent.Add(1)
	}
	if !c.emit.Emit(r) {
		c.emitDropped.Add(1)
	}
}

// Forget drops the receive stamps of a partition's records, e.g. when the partition is revoked in a rebalance and
// the records will not be Done here; their open process spans end now, marked tidemark.revoked.
func (c *Consumer) Forget(topic string, partition int32) {
	var now time.Time
	if c.spans != nil {
		now = c.cfg.Clock.now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.pending {
		if k.topic == topic && k.partition == partition {
			delete(c.pending, k)
		}
	}
	for k, span := range c.spans {
		if k.topic == topic && k.partition == partition { // processing did not complete here: the span ends, marked
			span.SetAttributes(attrRevoked)
			span.End(trace.WithTimestamp(now))
			delete(c.spans, k)
		}
	}
}

// Stats returns the counters.
func (c *Consumer) Stats() ConsumerStats {
	c.mu.Lock()
	n := len(c.pending)
	c.mu.Unlock()
	return ConsumerStats{
		Done: c.done.Load(), ReceiveMissing: c.receiveMissing.Load(), PendingFull: c.pendingFull.Load(),
		BadHeaders: c.badHeaders.Load(), BadTraceParent: c.badTraceParent.Load(), EmitDropped: c.emitDropped.Load(), PendingRecords: n,
	}
}
