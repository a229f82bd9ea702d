package collector

import (
	"context"
	"errors"
	"hash/fnv"
	"math"

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
	tt := view.TimestampType
	path := t.engine.Path(t.group, b.Topic, b.Partition)
	for i := range b.Records {
		rec := &b.Records[i]
		if !t.sampled(rec.Topic, rec.Partition, rec.Offset) {
			continue
		}
		recv := received(rec, t.clock)
		var lr latency.Record
		lr.Offset = rec.Offset
		raw := rawStamps{receive: recv.UnixMilli()}
		lr.Stamps[latency.Receive] = latency.Stamp{Value: recv.UnixNano(), Host: latency.RefHost, Unit: latency.Nanos}
		producer, broker := "", ""
		if v := rec.HeaderValue(instrument.HeaderProduceTime); v != nil {
			var h instrument.ProduceHeader
			if err := h.UnmarshalBinary(v); err != nil {
				bad = append(bad, *rec)
				errs = append(errs, err)
			} else {
				producer = h.Host
				id := t.hosts.id(h.Host)
				if h.Offset.Valid {
					t.hosts.report(id, h.Offset.Offset, h.Offset.Uncertainty, recv)
				}
				lr.Stamps[latency.Produce] = latency.Stamp{Value: h.Time.UnixNano(), Host: id, Unit: latency.Nanos}
				raw.event = h.Time.UnixMilli()
			}
		}
		if !rec.Timestamp.IsZero() {
			ms := rec.Timestamp.UnixMilli()
			switch tt {
			case kafka.TimestampLogAppend:
				// Stamped by the leader of the record's epoch (unknown: latency.UnknownHost, flagged).
				var id latency.HostID
				id, broker, _ = t.appendHost(ctx, rec.Topic, rec.Partition, rec.Offset)
				lr.Stamps[latency.Append] = latency.MillisStamp(id, ms)
				raw.append = ms
			case kafka.TimestampCreate:
				if raw.event == 0 && producer == "" {
					producer = "producer@" + rec.Topic
					lr.Stamps[latency.Produce] = latency.MillisStamp(t.hosts.id(producer), ms)
					raw.event = ms
				}
			}
		}
		var tp, sp []byte
		sc, err := instrument.SpanContextOf(rec.HeaderValue(instrument.HeaderTraceParent))
		switch {
		case err == nil:
			tid, sid := sc.TraceID(), sc.SpanID()
			tp, sp = tid[:], sid[:]
		case errors.Is(err, instrument.ErrMalformedTraceParent):
			t.metrics.BadTraceParent.WithLabelValues(PathTap).Inc() // kept, without trace context
		}
		if t.ring != nil {
			kept := tapped{offset: rec.Offset, rec: lr, raw: raw, producer: producer, broker: broker, traceID: tp, spanID: sp}
			kept.rec.Stamps[latency.Receive] = latency.Stamp{} // the tap's own receive is not the group's
			kept.raw.receive = 0
			t.ring.add(rec.Topic, rec.Partition, kept)
		}
		res := path.Observe(lr)
		if t.tracer != nil { // the ingest span only: the tap's own receive is not an application's queue wait
			t.tracer.record(&hop{path: PathTap, group: t.group, topic: rec.Topic, partition: rec.Partition, parent: sc,
				producer: producer, broker: broker, naive: raw}, &res)
		}
		t.metrics.Classes.WithLabelValues(PathTap, res.Class.String()).Inc()
		if res.Flags&latency.FlagSkewSuspected != 0 {
			t.metrics.Skewed.WithLabelValues(PathTap).Inc()
		}
		rows.Latency = append(rows.Latency, latencyRow(store.SourceTap, t.group, rec.Topic, rec.Partition, raw, &res,
			producer, broker, t.refHost, tp, sp))
	}
	if len(bad) > 0 {
		if err := t.deadLetter(ctx, PathTap, bad, errs); err != nil {
			return err
		}
	}
	return t.write(ctx, PathTap, b, rows, nil, mark)
}
