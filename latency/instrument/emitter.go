package instrument

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// DefaultReceiptsTopic is the receipts topic the collector reads unless configured otherwise.
const DefaultReceiptsTopic = "tidemark-receipts"

// EmitterConfig configures an [Emitter]. Zero values take the documented defaults.
type EmitterConfig struct {
	// Topic is the receipts topic; default DefaultReceiptsTopic.
	Topic string
	// QueueSize bounds the receipts waiting to be batched (memory ≈ QueueSize × ~200 B); default 16384. When it is
	// full, Emit drops the receipt and counts it.
	QueueSize int
	// MaxBatch is the most receipts packed into one Kafka record; default 256, at most MaxReceiptsPerBatch.
	MaxBatch int
	// Linger is how long a partial batch waits for more receipts; default 100 ms.
	Linger time.Duration
}

func (c *EmitterConfig) setDefaults() {
	if c.Topic == "" {
		c.Topic = DefaultReceiptsTopic
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 16384
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 256
	}
	if c.MaxBatch > MaxReceiptsPerBatch {
		c.MaxBatch = MaxReceiptsPerBatch
	}
	if c.Linger <= 0 {
		c.Linger = 100 * time.Millisecond
	}
}

// EmitterStats are the emitter's counters since it started. Every receipt passed to Emit ends in exactly one of
// Sent, Dropped, Failed, or is still in flight (queued or in the producer).
type EmitterStats struct {
	Emitted uint64 // receipts passed to Emit
	Dropped uint64 // refused because the queue was full or the emitter closed
	Sent    uint64 // acknowledged by Kafka
	Failed  uint64 // the producer reported an error for their record, or they failed Receipt.Validate
	Records uint64 // Kafka records (batches) handed to the producer
	// Acks counts producer acknowledgements (EmitAck) the same way, apart from receipts: each ends in exactly one
	// of its Sent, Dropped, Failed, or is in flight; its Records are the ack batches.
	Acks AckStats
}

// AckStats are an emitter's counters of producer acknowledgements (see EmitterStats).
type AckStats struct {
	Emitted, Dropped, Sent, Failed, Records uint64
}

// Emitter sends receipts to the receipts topic asynchronously: Emit puts a receipt on a bounded queue and returns at
// once; one goroutine packs queued receipts into batches (one Kafka record per source partition per flush, keyed
// "topic/partition" so a source partition's receipts stay on one receipts partition and in order with an idempotent
// producer) and hands them to a sarama AsyncProducer.
type Emitter struct {
	cfg      EmitterConfig
	producer sarama.AsyncProducer
	queue    chan Receipt
	acks     chan Ack // bounded like queue, by QueueSize
	done     chan struct{}
	wg       sync.WaitGroup

	closeOnce sync.Once
	// closeMu guards closed against a concurrent Emit sending on the closed queue.
	closeMu sync.RWMutex
	closed  bool

	emitted, dropped, sent, failed, records                atomic.Uint64
	ackEmitted, ackDropped, ackSent, ackFailed, ackRecords atomic.Uint64
}

// ackCount is the Metadata of an ack batch's Kafka record (a receipt batch's is an int): how many acks it holds.
type ackCount int

// NewEmitter starts an emitter that owns producer (it drains the producer's Successes and Errors channels and
// closes it in Close). Sent is counted only when the producer's Config.Producer.Return.Successes is true. The producer should be idempotent (or MaxOpenRequests 1) so retries keep order;
// the collector collapses duplicates either way.
func NewEmitter(producer sarama.AsyncProducer, cfg EmitterConfig) *Emitter {
	cfg.setDefaults()
	e := &Emitter{cfg: cfg, producer: producer, queue: make(chan Receipt, cfg.QueueSize), acks: make(chan Ack, cfg.QueueSize),
		done: make(chan struct{})}
	e.wg.Add(3)
	go e.batchLoop()
	go e.drainSuccesses()
	go e.drainErrors()
	return e
}

// Emit queues r without blocking. It returns false, and counts a drop, when the queue is full or the emitter closed.
func (e *Emitter) Emit(r Receipt) bool { return offer(e, e.queue, r, &e.emitted, &e.dropped) }

// EmitAck queues a producer acknowledgement without blocking, on a queue of its own (QueueSize) so acks never crowd
// out receipts. It returns false, and counts a drop in Stats().Acks, when that queue is full or the emitter closed.
// Acks are sent in ack batches (AckBatchVersion), never mixed with receipts, so a collector that predates them
// dead-letters only the ack records.
func (e *Emitter) EmitAck(a Ack) bool { return offer(e, e.acks, a, &e.ackEmitted, &e.ackDropped) }

// offer queues v on q without blocking, counting it in emitted, and in dropped when q is full or e is closed.
func offer[T any](e *Emitter, q chan<- T, v T, emitted, dropped *atomic.Uint64) bool {
	emitted.Add(1)
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		dropped.Add(1)
		return false
	}
	select {
	case q <- v:
		return true
	default:
		dropped.Add(1)
		return false
	}
}

// Stats returns the counters.
func (e *Emitter) Stats() EmitterStats {
	return EmitterStats{
		Emitted: e.emitted.Load(), Dropped: e.dropped.Load(), Sent: e.sent.Load(), Failed: e.failed.Load(),
		Records: e.records.Load(),
		Acks: AckStats{Emitted: e.ackEmitted.Load(), Dropped: e.ackDropped.Load(), Sent: e.ackSent.Load(),
			Failed: e.ackFailed.Load(), Records: e.ackRecords.Load()},
	}
}

// Close stops accepting receipts, sends what is queued, and closes the producer (which waits for in-flight records,
// bounded by the producer's own retry and timeout settings).
func (e *Emitter) Close() {
	e.closeOnce.Do(func() {
		e.closeMu.Lock()
		e.closed = true
		close(e.queue)
		close(e.acks)
		e.closeMu.Unlock()
		<-e.done // batch loop flushed everything it had
		e.producer.AsyncClose()
		e.wg.Wait()
	})
}

type partKey struct {
	topic     string
	partition int32
}

func (e *Emitter) batchLoop() {
	defer e.wg.Done()
	defer close(e.done)
	pending := make(map[partKey][]Receipt)
	pendingAcks := make(map[partKey][]Ack)
	n := 0 // receipts and acks waiting
	timer := time.NewTimer(e.cfg.Linger)
	timer.Stop()
	flush := func() {
		for k, rs := range pending {
			for len(rs) > 0 {
				m := min(len(rs), e.cfg.MaxBatch)
				e.send(k, rs[:m])
				rs = rs[m:]
			}
			delete(pending, k)
		}
		for k, as := range pendingAcks {
			for len(as) > 0 {
				m := min(len(as), e.cfg.MaxBatch)
				e.sendAcks(k, as[:m])
				as = as[m:]
			}
			delete(pendingAcks, k)
		}
		n = 0
	}
	added := func() {
		if n == 0 {
			timer.Reset(e.cfg.Linger)
		}
		n++
		if n >= e.cfg.MaxBatch {
			timer.Stop()
			flush()
		}
	}
	queue, acks := e.queue, e.acks
	for queue != nil || acks != nil {
		select {
		case r, ok := <-queue:
			if !ok {
				queue = nil // Close closes both: the loop ends once both are drained
				continue
			}
			k := partKey{r.Topic, r.Partition}
			pending[k] = append(pending[k], r)
			added()
		case a, ok := <-acks:
			if !ok {
				acks = nil
				continue
			}
			k := partKey{a.Topic, a.Partition}
			pendingAcks[k] = append(pendingAcks[k], a)
			added()
		case <-timer.C:
			flush()
		}
	}
	flush()
}

func (e *Emitter) send(k partKey, rs []Receipt) {
	v, err := AppendReceiptBatch(nil, rs)
	if err != nil {
		// Only a receipt failing Receipt.Validate gets here (a string over 255 bytes, an empty group, a negative offset, a
		// hand-built value); encode the receipts one by one so only the bad ones are lost.
		for i := range rs {
			if one, err := AppendReceiptBatch(nil, rs[i:i+1]); err == nil {
				e.produce(k, one, int(1))
			} else {
				e.failed.Add(1)
			}
		}
		return
	}
	e.produce(k, v, int(len(rs)))
}

// sendAcks is send for producer acknowledgements: one ack batch, or the good ones one by one.
func (e *Emitter) sendAcks(k partKey, as []Ack) {
	v, err := AppendAckBatch(nil, as)
	if err != nil {
		for i := range as {
			if one, err := AppendAckBatch(nil, as[i:i+1]); err == nil {
				e.produce(k, one, ackCount(1))
			} else {
				e.ackFailed.Add(1)
			}
		}
		return
	}
	e.produce(k, v, ackCount(len(as)))
}

// produce hands one record to the producer; meta is its count, an int for receipts or an ackCount for acks.
func (e *Emitter) produce(k partKey, value []byte, meta any) {
	if _, ok := meta.(ackCount); ok {
		e.ackRecords.Add(1)
	} else {
		e.records.Add(1)
	}
	e.producer.Input() <- &sarama.ProducerMessage{
		Topic:    e.cfg.Topic,
		Key:      sarama.StringEncoder(k.topic + "/" + strconv.Itoa(int(k.partition))),
		Value:    sarama.ByteEncoder(value),
		Metadata: meta,
	}
}

func (e *Emitter) drainSuccesses() {
	defer e.wg.Done()
	for m := range e.producer.Successes() {
		switch n := m.Metadata.(type) {
		case int:
			e.sent.Add(uint64(n))
		case ackCount:
			e.ackSent.Add(uint64(n))
		}
	}
}

func (e *Emitter) drainErrors() {
	defer e.wg.Done()
	for pe := range e.producer.Errors() {
		switch n := pe.Msg.Metadata.(type) {
		case int:
			e.failed.Add(uint64(n))
		case ackCount:
			e.ackFailed.Add(uint64(n))
		}
	}
}
