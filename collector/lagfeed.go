package collector

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/latency"
)

// maxHeldSnapshots bounds the snapshots a standby keeps for the backfill (FollowLag): with the default poll interval
// (30 s) and session timeout (10 s) it keeps one or two. It bounds the snapshots kept for another write after the
// writer gave up on them too: 8 minutes of lag history at the default poll interval.
const maxHeldSnapshots = 16

// FollowLag consumes the lag exporter's snapshots (from Loop.Subscribe) until ctx ends or snaps is closed. For each
// snapshot it feeds the committed offsets to the collector's engine (a decreasing commit marks a replay boundary,
// latency.Engine.ObserveCommit), writes the snapshot's lag_snapshots rows (store.LagRows) to the collector's sink
// while activity is active (lag.election: only the active replica writes them; nil is always active), then calls
// ObserveSnapshot (replay checkpoints, commit bounds of uninstrumented groups). It returns nil: a write fails only
// when ctx ends.
//
// Acknowledgement: every write carries an ack. A snapshot whose rows the writer gave up on (ClickHouse unreachable
// for longer than clickhouse.writer.retry_max_elapsed) is counted in tidemark_collector_sink_errors_total{path="lag"}
// and kept, and the next snapshot while active writes the kept ones first, oldest first: the rows reach ClickHouse
// once it answers again. At most maxHeldSnapshots are kept; an older one pushed out, or one still kept when the feed
// stops, is lost for good and its rows counted in tidemark_collector_lag_rows_lost_total.
//
// Backfill: while standby it keeps the snapshots of the last backfill (at most maxHeldSnapshots), and the first
// snapshot after it turns active writes those first. A holder that dies stops writing at its death, and the standby
// turns active about one session timeout later: with backfill = session timeout + poll interval the rows of the
// standby's own observations in between fill that gap, so lag_snapshots has no gap longer than about a poll interval
// plus the rebalance instead of the session timeout. After a clean handover (the holder left the group) the backfilled
// rows repeat up to backfill of time the old holder wrote too: each row a correct observation at its own time.
func (c *Collector) FollowLag(ctx context.Context, snaps <-chan *lagexporter.Snapshot, activity *lagexporter.Activity,
	backfill time.Duration) error {
	m := c.opts.Metrics
	var given givenUp // snapshots whose rows the writer gave up on, handed from the acks to this goroutine
	write := func(s *lagexporter.Snapshot) error {
		rows := store.LagRows(s)
		if len(rows) == 0 {
			return nil
		}
		return c.opts.Sink.Write(ctx, store.Rows{Lag: rows}, func(err error) {
			if err != nil {
				m.SinkErrors.WithLabelValues("lag").Inc()
				given.add(s)
			}
		})
	}
	b := &backfiller{window: backfill, lost: func(s *lagexporter.Snapshot) {
		m.LagRowsLost.Add(float64(len(store.LagRows(s))))
	}}
	defer func() { // what is still kept for another write is lost with the feed
		for _, s := range append(b.retry, given.take()...) {
			b.lost(s)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case s, ok := <-snaps:
			if !ok {
				return nil
			}
			for _, gl := range s.Groups {
				for _, p := range gl.Partitions {
					if p.HasCommit {
						c.opts.Engine.ObserveCommit(latency.CommitObservation{Group: gl.Group, Topic: p.Topic,
							Partition: p.Partition, Offset: p.Committed, At: s.Time})
					}
				}
			}
			b.keep(given.take())
			if err := b.handle(s, activity == nil || activity.Active(), write); err != nil {
				return nil // ctx ended
			}
			if err := c.ObserveSnapshot(ctx, s); err != nil {
				return nil // ctx ended
			}
		}
	}
}

// givenUp collects the snapshots whose writes the writer gave up on; acks run on the writer's goroutine.
type givenUp struct {
	mu    sync.Mutex // guards snaps
	snaps []*lagexporter.Snapshot
}

func (g *givenUp) add(s *lagexporter.Snapshot) {
	g.mu.Lock()
	g.snaps = append(g.snaps, s)
	g.mu.Unlock()
}

func (g *givenUp) take() []*lagexporter.Snapshot {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := g.snaps
	g.snaps = nil
	return out
}

// backfiller is FollowLag's state between snapshots: the snapshots of the last window taken while standby (held),
// and those whose rows the writer gave up on (retry).
type backfiller struct {
	window time.Duration // 0: none held
	held   []*lagexporter.Snapshot
	retry  []*lagexporter.Snapshot     // oldest first, at most maxHeldSnapshots
	lost   func(*lagexporter.Snapshot) // called for a snapshot dropped from retry; nil: not counted
}

// keep adds snapshots the writer gave up on to the retry buffer, in time order; beyond maxHeldSnapshots the oldest
// are dropped (lost).
func (b *backfiller) keep(given []*lagexporter.Snapshot) {
	if len(given) == 0 {
		return
	}
	b.retry = append(b.retry, given...)
	slices.SortStableFunc(b.retry, func(x, y *lagexporter.Snapshot) int { return x.Time.Compare(y.Time) })
	if over := len(b.retry) - maxHeldSnapshots; over > 0 {
		for _, s := range b.retry[:over] {
			if b.lost != nil {
				b.lost(s)
			}
		}
		n := copy(b.retry, b.retry[over:])
		clear(b.retry[n:])
		b.retry = b.retry[:n]
	}
}

// handle takes snapshot s: while standby (active false) it is held, and the held ones older than window before it
// (or beyond maxHeldSnapshots) are dropped; while active the ones kept for a retry are written first, then the held
// ones, oldest first, then s. It returns write's first error.
func (b *backfiller) handle(s *lagexporter.Snapshot, active bool, write func(*lagexporter.Snapshot) error) error {
	if !active {
		if b.window > 0 {
			b.held = append(b.held, s)
			drop := 0
			for drop < len(b.held) && (s.Time.Sub(b.held[drop].Time) > b.window || len(b.held)-drop > maxHeldSnapshots) {
				drop++
			}
			n := copy(b.held, b.held[drop:])
			clear(b.held[n:]) // no reference kept to a dropped snapshot
			b.held = b.held[:n]
		}
		return nil
	}
	for i, r := range b.retry { // given up by the writer earlier: ClickHouse may answer again
		if err := write(r); err != nil {
			n := copy(b.retry, b.retry[i:])
			clear(b.retry[n:])
			b.retry = b.retry[:n]
			return err
		}
		b.retry[i] = nil
	}
	b.retry = b.retry[:0]
	for i, h := range b.held { // taken while standby, in the time before this replica turned active
		if err := write(h); err != nil {
			return err
		}
		b.held[i] = nil
	}
	b.held = b.held[:0]
	return write(s)
}
