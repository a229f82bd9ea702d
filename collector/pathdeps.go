package collector

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency"
)

// TopicInfo answers what the paths need to know about source topics (internal/kafka's Metadata satisfies it): the
// partition's current leader, and what a topic's timestamps mean. Whose clock stamped a LogAppendTime is not the
// current leader's but that of the leader of the record's epoch: see appendLeaders. Topic never blocks: a name
// being looked up answers kafka.TopicPending, and Await's channel closes when its lookup settles.
type TopicInfo interface {
	Topic(name string) *kafka.TopicView
	Await(name string) <-chan struct{}
}

// pathDeps are what every path shares.
type pathDeps struct {
	engine  *latency.Engine
	hosts   *hosts
	sink    Sink
	dlq     DeadLetters
	meta    TopicInfo
	appends appendLeaders // whose clock stamped a LogAppendTime (nil: unknown)
	metrics *Metrics
	clock   func() time.Time
	log     *slog.Logger
	markers markers
	live    liveHistograms
	health  health
	tracer  *hopTracer // nil: tracing off
	// checkpoints keeps the replay trackers' state durable across restarts (nil: not kept).
	checkpoints *replayCheckpoints
	// instrumented holds the groups seen in receipts (their processing is known exactly: no commit bounds), each
	// with the Unix second it was last seen (*atomic.Int64); groups idle longer than the idle TTL are forgotten.
	instrumented sync.Map
}

// touchInstrumented records that group sent a receipt at now.
func (d *pathDeps) touchInstrumented(group string, now time.Time) {
	t := now.Unix()
	v, ok := d.instrumented.Load(group)
	if !ok {
		v, _ = d.instrumented.LoadOrStore(group, new(atomic.Int64))
	}
	if seen := v.(*atomic.Int64); seen.Load() != t {
		seen.Store(t)
	}
}

// isInstrumented reports whether group sent a receipt within the idle TTL.
func (d *pathDeps) isInstrumented(group string) bool {
	_, ok := d.instrumented.Load(group)
	return ok
}

// write hands rows to the sink and marks next once they are acknowledged (at-least-once). acked, if not nil, is
// called when this batch's rows are acknowledged, before the in-order mark.
func (d *pathDeps) write(ctx context.Context, path string, b kafka.Batch, rows store.Rows, acked func(), mark func(int64)) error {
	return d.submit(ctx, path, b, d.reserve(b, mark), rows, acked)
}

// reservation is a batch's place in its partition's in-order marks, taken when the batch is read: its rows may be
// handed to the sink later (a receipts batch waiting for topic metadata) without a later batch's mark overtaking it.
type reservation struct {
	m    *marker
	seg  *segment
	next int64 // the offset after the batch's last record
}

// reserve takes b's place in the marks (in read order).
func (d *pathDeps) reserve(b kafka.Batch, mark func(int64)) reservation {
	next := b.Records[len(b.Records)-1].Offset + 1
	m := d.markers.get(b.Topic, b.Partition, b.Generation, mark)
	return reservation{m: m, seg: m.add(next), next: next}
}

// submit hands b's rows to the sink under reservation res and marks res once they are acknowledged. acked, if not
// nil, is called when the rows are acknowledged, before the in-order mark.
func (d *pathDeps) submit(ctx context.Context, path string, b kafka.Batch, res reservation, rows store.Rows, acked func()) error {
	m, seg, next := res.m, res.seg, res.next
	n := rows.Len()
	if n == 0 {
		if acked != nil {
			acked()
		}
		m.ack(seg)
		return nil
	}
	d.metrics.Rows.WithLabelValues(path).Add(float64(n))
	start := time.Now()
	waiting := d.metrics.SinkWaiting.WithLabelValues(path)
	waiting.Inc()
	defer waiting.Dec()
	err := d.sink.Write(ctx, rows, func(err error) {
		if err != nil {
			// At-least-once: these rows are lost to the writer, so nothing from this batch on may be committed, and
			// the records must be read again. Ending the session makes the group resume from its committed offsets.
			d.metrics.SinkErrors.WithLabelValues(path).Inc()
			d.health.failed(err, d.clock())
			d.log.Error("writer gave up on a batch; re-reading the partition from its last committed offset",
				"path", path, "topic", b.Topic, "partition", b.Partition, "next", next, "err", err)
			m.fail()
			if b.Restart != nil {
				b.Restart(fmt.Errorf("writer gave up on rows of %s/%d: %w", b.Topic, b.Partition, err))
			}
			return
		}
		d.health.ok()
		if acked != nil {
			acked()
		}
		d.metrics.RowsAcked.WithLabelValues(path).Add(float64(n))
		m.ack(seg)
	})
	d.metrics.SinkBlocked.WithLabelValues(path).Add(time.Since(start).Seconds())
	if err != nil {
		return fmt.Errorf("write %d rows of %s/%d: %w", n, b.Topic, b.Partition, err)
	}
	return nil
}

// deadLetter sends bad records to the dead-letter topic, retrying until it succeeds or ctx ends: an offset is never
// committed past a record that is neither stored nor dead-lettered.
func (d *pathDeps) deadLetter(ctx context.Context, path string, recs []kafka.Record, errs []error) error {
	for i := range errs {
		d.metrics.DeadLetters.WithLabelValues(path, reason(errs[i])).Inc()
	}
	backoff := 100 * time.Millisecond
	for {
		err := d.dlq.Send(ctx, path, recs, errs)
		if err == nil {
			return nil
		}
		d.log.Warn("dead-letter send failed; retrying", "path", path, "records", len(recs), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// received is when the consumer took rec from Kafka (before it waited in a batch), or now if not stamped.
func received(rec *kafka.Record, now func() time.Time) time.Time {
	if !rec.Received.IsZero() {
		return rec.Received
	}
	return now()
}
