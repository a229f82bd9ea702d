package collector

import (
	"context"
	"errors"
	"time"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// ackQueueSize bounds the producer acknowledgements waiting for their topic's metadata and append leader (about
// 100 B each). Acks feed only the clock estimate, whose windows keep the narrowest bracket per bucket: one that
// does not fit is counted (outcome queue_full) and costs nothing else.
const ackQueueSize = 8192

// Outcomes of a producer acknowledgement (tidemark_collector_producer_acks_total's outcome label).
const (
	AckBracketed           = "bracketed"             // fed to the engine as a bracket of its producer host
	AckCreateTime          = "create_time"           // its topic is CreateTime: the record carries no append stamp
	AckNoAppendStamp       = "no_append_stamp"       // LogAppendTime topic, but the broker's answer gave no timestamp
	AckUnknownTopic        = "unknown_topic"         // the topic's metadata is not known (missing, failed, or over max_unknown_topics)
	AckAppendLeaderUnknown = "append_leader_unknown" // the broker that appended the offset could not be known
	AckAppendClockUnknown  = "append_clock_unknown"  // that broker's clock has no two-sided estimate yet (no probe bracket)
	AckBadRoundTrip        = "bad_round_trip"        // acknowledged before it was sent on the producer's clock (a step)
	AckImplausible         = "implausible_offset"    // the bracket's offset is beyond latency.bounds.max_skew
	AckQueueFull           = "queue_full"            // more acks waiting than ackQueueSize
	AckOther               = "other"
)

// ackFeed brackets producer hosts with the acknowledgements instrumented producers send to the receipts topic
// (instrument.Ack): each is resolved to (producer host, send, append stamp and the broker that stamped it, ack) and
// handed to latency.Engine.ObserveAck. Resolving may wait for topic metadata and for the append leader's placement
// (one refresh round of kafka.AppendLeaders, as the tap path waits), so it runs on its own goroutine, fed through a
// bounded queue: the receipts path never waits for it. Acks write no rows: the receipts batch that carried them is
// marked like any other once its receipts' rows (if any) are acknowledged.
type ackFeed struct {
	d     *pathDeps
	queue chan instrument.Ack
}

// newAckFeed starts the feed's goroutine; it ends when ctx does.
func newAckFeed(ctx context.Context, d *pathDeps) *ackFeed {
	f := &ackFeed{d: d, queue: make(chan instrument.Ack, ackQueueSize)}
	go f.run(ctx)
	return f
}

// add queues acks without blocking; those that do not fit are counted.
func (f *ackFeed) add(as []instrument.Ack) {
	for i := range as {
		select {
		case f.queue <- as[i]:
		default:
			f.d.metrics.ProducerAcks.WithLabelValues(AckQueueFull).Inc()
		}
	}
}

func (f *ackFeed) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-f.queue:
			f.d.metrics.ProducerAcks.WithLabelValues(f.observe(ctx, &a)).Inc()
		}
	}
}

// observe resolves one ack and feeds it to the engine; it returns the outcome.
func (f *ackFeed) observe(ctx context.Context, a *instrument.Ack) string {
	d := f.d
	view := d.meta.Topic(a.Topic)
	if view.State == kafka.TopicPending {
		select {
		case <-d.meta.Await(a.Topic):
		case <-ctx.Done():
			return AckOther
		}
		view = d.meta.Topic(a.Topic)
	}
	if view.State != kafka.TopicKnown {
		return AckUnknownTopic
	}
	tt := a.TimestampType
	if tt == instrument.TimestampUnknown {
		tt = instrument.TimestampType(view.TimestampType)
	}
	switch {
	case tt != instrument.TimestampLogAppend:
		return AckCreateTime
	case !a.HasRecordTimestamp || a.RecordTimestampMs < 0:
		return AckNoAppendStamp
	}
	broker, _, leader := d.appendHost(ctx, a.Topic, a.Partition, a.Offset)
	if leader < 0 {
		return AckAppendLeaderUnknown
	}
	err := d.engine.ObserveAck(latency.ProducerAck{Host: d.hosts.id(a.Host), Broker: broker,
		Send: time.Unix(0, a.SendNs), Ack: time.Unix(0, a.AckNs), AppendMs: a.RecordTimestampMs})
	return ackOutcome(err)
}

// ackOutcome names ObserveAck's answer.
func ackOutcome(err error) string {
	switch {
	case err == nil:
		return AckBracketed
	case errors.Is(err, latency.ErrAppendClockUnknown):
		return AckAppendClockUnknown
	case errors.Is(err, latency.ErrBadRoundTrip):
		return AckBadRoundTrip
	case errors.Is(err, latency.ErrImplausibleOffset):
		return AckImplausible
	}
	return AckOther
}
