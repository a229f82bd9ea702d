package collector

import (
	"context"
	"sync"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/latency"
)

// tapRingSize is how many recent tapped records the tap keeps per partition to bound uninstrumented groups'
// processing by their commits. A group further behind than this gets no commit-bound rows for the older records.
const tapRingSize = 4096

// tapped is what the tap saw of one record, kept to bound its processing time by a group's later commit.
type tapped struct {
	offset           int64
	rec              latency.Record // produce and append stamps
	raw              rawStamps
	producer, broker string
	traceID, spanID  []byte
}

type tpKey struct {
	topic     string
	partition int32
}

// tapRing keeps the recent tapped records of every partition (ring buffers of tapRingSize, in offset order).
type tapRing struct {
	mu    sync.Mutex // guards parts
	parts map[tpKey][]tapped
}

func (r *tapRing) add(topic string, partition int32, t tapped) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.parts == nil {
		r.parts = map[tpKey][]tapped{}
	}
	k := tpKey{topic, partition}
	s := r.parts[k]
	if len(s) >= tapRingSize {
		s = append(s[:0], s[len(s)-tapRingSize/2:]...) // drop the older half; amortised O(1)
	}
	r.parts[k] = append(s, t)
}

// between returns copies of the tapped records of topic/partition with from ≤ offset < to.
func (r *tapRing) between(topic string, partition int32, from, to int64) []tapped {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []tapped
	for _, t := range r.parts[tpKey{topic, partition}] {
		if t.offset >= from && t.offset < to {
			out = append(out, t)
		}
	}
	return out
}

// commitBounds turns the lag exporter's view of uninstrumented groups into latency rows: a record the tap saw at
// offset o was processed by group G no later than the first snapshot in which G's committed offset passed o. The
// rows carry the snapshot time as a Commit stamp (reference clock), so their delivery and end-to-end stages are
// upper bounds (latency.FlagCommitBound) and never enter percentiles as exact values.
type commitBounds struct {
	deps *pathDeps
	ring *tapRing
	skip func(group string) bool // the collector's own groups and groups that send receipts
	mu   sync.Mutex              // guards last
	last map[commitKey]int64     // committed offset seen in the previous snapshot
}

type commitKey struct {
	group, topic string
	partition    int32
}

// observe processes one snapshot and writes the rows it yields.
func (cb *commitBounds) observe(ctx context.Context, s *lagexporter.Snapshot) error {
	var rows store.Rows
	var touched []*latency.Path
	for gi := range s.Groups {
		g := &s.Groups[gi]
		if cb.skip(g.Group) {
			continue
		}
		for pi := range g.Partitions {
			p := &g.Partitions[pi]
			if !p.HasCommit {
				continue
			}
			k := commitKey{g.Group, p.Topic, p.Partition}
			cb.mu.Lock()
			prev, seen := cb.last[k]
			cb.last[k] = p.Committed
			cb.mu.Unlock()
			if !seen || p.Committed <= prev {
				continue // the first sighting has no lower edge; a decrease is a rewind (the engine sees it as a commit)
			}
			path := cb.deps.engine.Path(g.Group, p.Topic, p.Partition)
			tapped := cb.ring.between(p.Topic, p.Partition, prev, p.Committed)
			if len(tapped) > 0 {
				touched = append(touched, path)
			}
			for _, t := range tapped {
				rec := t.rec
				rec.Stamps[latency.Commit] = latency.Stamp{Value: s.Time.UnixNano(), Host: latency.RefHost, Unit: latency.Nanos}
				raw := t.raw
				raw.processed = s.Time.UnixMilli()
				res := path.Observe(rec)
				cb.deps.metrics.Classes.WithLabelValues(PathTap, res.Class.String()).Inc()
				rows.Latency = append(rows.Latency, latencyRow(store.SourceTap, g.Group, p.Topic, p.Partition, raw, &res,
					t.producer, t.broker, "", t.traceID, t.spanID))
			}
		}
	}
	if len(rows.Latency) == 0 {
		return nil
	}
	cb.deps.metrics.Rows.WithLabelValues(PathTap).Add(float64(len(rows.Latency)))
	// No Kafka offsets ride on these rows: they are derived from a snapshot, so there is nothing to mark; their
	// paths' checkpoints go out with the next publish.
	if err := cb.deps.sink.Write(ctx, rows, nil); err != nil {
		return err
	}
	cb.deps.checkpoints.put(touched)
	return nil
}

// newCommitBounds returns the commit-bound stage of the tap.
func newCommitBounds(d *pathDeps, ring *tapRing, skip func(string) bool) *commitBounds {
	return &commitBounds{deps: d, ring: ring, skip: skip, last: map[commitKey]int64{}}
}
