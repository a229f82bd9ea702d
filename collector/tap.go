package collector

import (
	"context"
	"errors"
	"hash/fnv"
	"math"

	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// Tap is the tap path: the collector's own group reads monitored topics and records, for a deterministic sample of
// records, the produce stamp (produce-time header, else CreateTime), the append stamp (LogAppendTime, leader's
// clock), the trace id, and its own receive time on the reference clock. Its rows carry the tap group as
// consumer_group, so they measure delivery to a consumer that is always keeping up: a baseline for the instrumented
// groups, and the produce/append stamps of uninstrumented ones.
type Tap struct {
	*pathDeps
	group string
	// threshold: a record is sampled when its hash is below it (SampleRate × 2^64).
	threshold uint64
	refHost   string
	ring      *tapRing // recent records, for the commit bounds of uninstrumented groups
}

func newTap(d *pathDeps, group string, sampleRate float64, refHost string, ring *tapRing) *Tap {
	t := &Tap{pathDeps: d, group: group, refHost: refHost, ring: ring}
	switch {
	case sampleRate >= 1:
		t.threshold = math.MaxUint64
	case sampleRate > 0:
		t.threshold = uint64(sampleRate * float64(math.MaxUint64))
	}
	return t
}

// sampled decides by a hash of the record's position, so a re-read after a restart samples the same records and
// their rows collapse as duplicates instead of adding new ones.
func (t *Tap) sampled(topic string, partition int32, offset int64) bool {
	if t.threshold == math.MaxUint64 {
		return true
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(topic))
	x := h.Sum64() ^ uint64(partition)<<48 ^ uint64(offset)
	// splitmix64 finaliser: spreads consecutive offsets uniformly.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x < t.threshold
}

// topicView returns the metadata of a tapped topic, waiting for its first lookup (the tap's topics are the
// operator's own, few, and exist; a lookup settles within the cache's request timeout) or until ctx ends.
func (t *Tap) topicView(ctx context.Context, topic string) (*kafka.TopicView, error) {
	v := t.meta.Topic(topic)
	if v.State != kafka.TopicPending {
		return v, nil
	}
	select {
	case <-t.meta.Await(topic):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return t.meta.Topic(topic), nil
}

// HandleBatch is the tap's kafka.BatchHandler.
func (t *Tap) HandleBatch(ctx context.Context, b kafka.Batch, mark func(int64)) error {
	t.metrics.Records.WithLabelValues(PathTap).Add(float64(len(b.Records)))
	var rows store.Rows
	var bad []kafka.Record
	var errs []error
	view, err := t.topicView(ctx, b.Topic)
	if err != nil {
		return err // ctx ended
	}
	path := t.engine.Path(t.group, b.Topic, b.Partition)
	for i := range b.Records {
		rec := &b.Records[i]
		if !t.sampled(rec.Topic, rec.Partition, rec.Offset) {
			continue
		}
		kept, sc, err := t.read(ctx, rec, view.TimestampType)
		if err != nil {
			// The produce-time header does not decode: the record is dead-lettered and keeps its other stamps.
			bad = append(bad, *rec)
			errs = append(errs, err)
		}
		rows.Latency = append(rows.Latency, t.row(rec, kept, sc, path))
	}
	if len(bad) > 0 {
		if err := t.deadLetter(ctx, PathTap, bad, errs); err != nil {
			return err
		}
	}
	return t.write(ctx, PathTap, b, rows, nil, mark)
}

// read returns what the tap learns from rec, of a topic whose timestamps are tt: the tap's own receive (reference
// clock), the produce stamp (produce-time header, else CreateTime on an unnamed producer clock "producer@<topic>"),
// the append stamp (LogAppendTime, of the leader of the record's epoch: latency.UnknownHost, flagged, when not
// known), the producer and broker hosts and the trace context. A produce-time header that does not decode is
// returned as the error; the record keeps its other stamps.
func (t *Tap) read(ctx context.Context, rec *kafka.Record, tt kafka.TimestampType) (tapped, trace.SpanContext, error) {
	recv := received(rec, t.clock)
	k := tapped{offset: rec.Offset, raw: rawStamps{receive: recv.UnixMilli()}}
	k.rec.Offset = rec.Offset
	k.rec.Stamps[latency.Receive] = latency.Stamp{Value: recv.UnixNano(), Host: latency.RefHost, Unit: latency.Nanos}
	var headerErr error
	if v := rec.HeaderValue(instrument.HeaderProduceTime); v != nil {
		var h instrument.ProduceHeader
		if headerErr = h.UnmarshalBinary(v); headerErr == nil {
			k.producer = h.Host
			id := t.hosts.id(h.Host)
			if h.Offset.Valid {
				t.hosts.report(id, h.Offset.Offset, h.Offset.Uncertainty, recv)
			}
			k.rec.Stamps[latency.Produce] = latency.Stamp{Value: h.Time.UnixNano(), Host: id, Unit: latency.Nanos}
			k.raw.event = h.Time.UnixMilli()
		}
	}
	if !rec.Timestamp.IsZero() {
		ms := rec.Timestamp.UnixMilli()
		switch tt {
		case kafka.TimestampLogAppend:
			var id latency.HostID
			id, k.broker, _ = t.appendHost(ctx, rec.Topic, rec.Partition, rec.Offset)
			k.rec.Stamps[latency.Append] = latency.MillisStamp(id, ms)
			k.raw.append = ms
		case kafka.TimestampCreate:
			if k.raw.event == 0 && k.producer == "" {
				k.producer = "producer@" + rec.Topic
				k.rec.Stamps[latency.Produce] = latency.MillisStamp(t.hosts.id(k.producer), ms)
				k.raw.event = ms
			}
		}
	}
	sc, err := instrument.SpanContextOf(rec.HeaderValue(instrument.HeaderTraceParent))
	switch {
	case err == nil:
		tid, sid := sc.TraceID(), sc.SpanID()
		k.traceID, k.spanID = tid[:], sid[:]
	case errors.Is(err, instrument.ErrMalformedTraceParent):
		t.metrics.BadTraceParent.WithLabelValues(PathTap).Inc() // kept, without trace context
	}
	return k, sc, headerErr
}

// row keeps k in the ring (without the tap's own receive, which is not the owning group's), puts it through the
// engine path, records its ingest hop span, counts its class and returns its latency row.
func (t *Tap) row(rec *kafka.Record, k tapped, sc trace.SpanContext, path *latency.Path) store.LatencyRow {
	if t.ring != nil {
		kept := k
		kept.rec.Stamps[latency.Receive] = latency.Stamp{} // the tap's own receive is not the group's
		kept.raw.receive = 0
		t.ring.add(rec.Topic, rec.Partition, kept)
	}
	res := path.Observe(k.rec)
	if t.tracer != nil { // the ingest span only: the tap's own receive is not an application's queue wait
		t.tracer.record(&hop{path: PathTap, group: t.group, topic: rec.Topic, partition: rec.Partition, parent: sc,
			producer: k.producer, broker: k.broker, naive: k.raw}, &res)
	}
	t.metrics.Classes.WithLabelValues(PathTap, res.Class.String()).Inc()
	if res.Flags&latency.FlagSkewSuspected != 0 {
		t.metrics.Skewed.WithLabelValues(PathTap).Inc()
	}
	return latencyRow(store.SourceTap, t.group, rec.Topic, rec.Partition, k.raw, &res, k.producer, k.broker, t.refHost,
		k.traceID, k.spanID)
}
