package instrument

import (
	"sync/atomic"

	"github.com/IBM/sarama"
)

// AckConfig configures an [AckReporter].
type AckConfig struct {
	// Host is the producer host id, the same as its ProducerConfig.Host: only records whose produce-time header this
	// host wrote are reported (a record forwarded with another host's header was sent on that host's clock).
	Host string
	// Clock reads this host's wall clock, the same as its ProducerConfig.Clock; nil means time.Now.
	Clock Clock
}

// AckReporterStats are an AckReporter's counters. Every success passed to Success ends in exactly one of them.
type AckReporterStats struct {
	Reported  uint64 // handed to the emitter (Emitter.Stats().Acks counts what became of them)
	NoHeader  uint64 // the record has no (decodable) produce-time header: nothing to bracket
	OtherHost uint64 // the header names another host (a forwarded record)
	Invalid   uint64 // the success names no partition/offset a broker assigns (a negative one)
}

// AckReporter turns a producer's successes into [Ack]s on an [Emitter]: per acknowledged record, the send stamp of
// its produce-time header, the acknowledgement stamp taken when the success reaches it, topic, partition, offset
// and the timestamp the broker's answer gave the record (its LogAppendTime on a LogAppendTime topic: sarama copies
// the produce response's timestamp into the message). With these the collector brackets the producer host's clock
// two-sided: send ≤ append ≤ ack (docs/latency.md, "Producer brackets").
//
// Reporting never blocks the application: EmitAck drops and counts when the emitter's bounded ack queue is full.
// Wrap the producer with [WrapAsyncProducer] or [WrapSyncProducer], or call Success for every success yourself.
type AckReporter struct {
	cfg                                  AckConfig
	emit                                 *Emitter
	reported, noHeader, otherHost, inval atomic.Uint64
}

// NewAckReporter returns a reporter that emits through emit (shared with the host's receipts, or its own).
func NewAckReporter(cfg AckConfig, emit *Emitter) *AckReporter {
	return &AckReporter{cfg: cfg, emit: emit}
}

// Success reports one acknowledged record; call it when the success arrives (its stamp is the acknowledgement
// stamp). msg must be the message the producer returned (partition, offset and timestamp filled in).
func (a *AckReporter) Success(msg *sarama.ProducerMessage) {
	now := a.cfg.Clock.now()
	var h ProduceHeader
	if v := (producerCarrier{msg}).Get(HeaderProduceTime); v == "" || h.UnmarshalBinary([]byte(v)) != nil {
		a.noHeader.Add(1)
		return
	}
	if h.Host != a.cfg.Host {
		a.otherHost.Add(1)
		return
	}
	if msg.Partition < 0 || msg.Offset < 0 {
		a.inval.Add(1)
		return
	}
	ack := Ack{Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset, SendNs: h.Time.UnixNano(),
		AckNs: now.UnixNano(), Host: h.Host}
	if !msg.Timestamp.IsZero() {
		ack.RecordTimestampMs, ack.HasRecordTimestamp = msg.Timestamp.UnixMilli(), true
	}
	a.reported.Add(1)
	a.emit.EmitAck(ack)
}

// Stats returns the counters.
func (a *AckReporter) Stats() AckReporterStats {
	return AckReporterStats{Reported: a.reported.Load(), NoHeader: a.noHeader.Load(), OtherHost: a.otherHost.Load(),
		Invalid: a.inval.Load()}
}

// asyncProducer is a sarama.AsyncProducer whose successes pass through an AckReporter.
type asyncProducer struct {
	sarama.AsyncProducer
	acks      *AckReporter
	successes chan *sarama.ProducerMessage // nil: successes are consumed here, not forwarded
	done      chan struct{}
}

// WrapAsyncProducer returns p with every success reported to acks. p's config must have
// Producer.Return.Successes = true (sarama then delivers the acknowledgements). With forward, the returned
// producer's Successes channel delivers each success after it was reported, and the application must read it as it
// would p's; without, the wrapper consumes them and Successes returns nil. Close and AsyncClose close p; the
// returned producer's Successes channel closes once p's has.
func WrapAsyncProducer(p sarama.AsyncProducer, acks *AckReporter, forward bool) sarama.AsyncProducer {
	w := &asyncProducer{AsyncProducer: p, acks: acks, done: make(chan struct{})}
	if forward {
		w.successes = make(chan *sarama.ProducerMessage)
	}
	go w.relay()
	return w
}

// relay reports every success and forwards it when asked; it ends when p closes its Successes channel.
func (w *asyncProducer) relay() {
	defer close(w.done)
	if w.successes != nil {
		defer close(w.successes)
	}
	for m := range w.AsyncProducer.Successes() {
		w.acks.Success(m)
		if w.successes != nil {
			w.successes <- m
		}
	}
}

// Successes returns the forwarded successes (nil when not forwarding).
func (w *asyncProducer) Successes() <-chan *sarama.ProducerMessage {
	if w.successes == nil {
		return nil
	}
	return w.successes
}

// Close closes the wrapped producer and waits until its last success was reported (and forwarded, so with forward
// the application must keep reading Successes until Close returns, as sarama requires of p itself).
func (w *asyncProducer) Close() error {
	err := w.AsyncProducer.Close()
	<-w.done
	return err
}

// syncProducer is a sarama.SyncProducer whose successes pass through an AckReporter.
type syncProducer struct {
	sarama.SyncProducer
	acks *AckReporter
}

// WrapSyncProducer returns p with every message it sends successfully reported to acks (the acknowledgement stamp
// is taken when SendMessage or SendMessages returns). sarama's sync producer always returns successes.
func WrapSyncProducer(p sarama.SyncProducer, acks *AckReporter) sarama.SyncProducer {
	return &syncProducer{SyncProducer: p, acks: acks}
}

func (w *syncProducer) SendMessage(msg *sarama.ProducerMessage) (int32, int64, error) {
	partition, offset, err := w.SyncProducer.SendMessage(msg)
	if err == nil {
		w.acks.Success(msg)
	}
	return partition, offset, err
}

func (w *syncProducer) SendMessages(msgs []*sarama.ProducerMessage) error {
	err := w.SyncProducer.SendMessages(msgs)
	var failed map[*sarama.ProducerMessage]bool
	if pes, ok := err.(sarama.ProducerErrors); ok {
		failed = make(map[*sarama.ProducerMessage]bool, len(pes))
		for _, pe := range pes {
			failed[pe.Msg] = true
		}
	} else if err != nil {
		return err
	}
	for _, m := range msgs {
		if !failed[m] {
			w.acks.Success(m)
		}
	}
	return err
}
