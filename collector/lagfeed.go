package collector

import (
	"context"
	"time"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/latency"
)

// maxHeldSnapshots bounds the snapshots a standby keeps for the backfill (FollowLag): with the default poll interval
// (30 s) and session timeout (10 s) it keeps one or two.
const maxHeldSnapshots = 16

// FollowLag consumes the lag exporter's snapshots (from Loop.Subscribe) until ctx ends or snaps is closed. For each
// snapshot it feeds the committed offsets to the collector's engine (a decreasing commit marks a replay boundary,
// latency.Engine.ObserveCommit), writes the snapshot's lag_snapshots rows (store.LagRows) to the collector's sink
// while activity is active (lag.election: only the active replica writes them; nil is always active), then calls
// ObserveSnapshot (replay checkpoints, commit bounds of uninstrumented groups). It returns nil: a write fails only
// when ctx ends.
//
// Backfill: while standby it keeps the snapshots of the last backfill (at most maxHeldSnapshots), and the first
// snapshot after it turns active writes those first. A holder that dies stops writing at its death, and the standby
// turns active about one session timeout later: with backfill = session timeout + poll interval the rows of the
// standby's own observations in between fill that gap, so lag_snapshots has no gap longer than about a poll interval
// plus the rebalance instead of the session timeout. After a clean handover (the holder left the group) the backfilled
// rows repeat up to backfill of time the old holder wrote too: each row a correct observation at its own time.
func (c *Collector) FollowLag(ctx context.Context, snaps <-chan *lagexporter.Snapshot, activity *lagexporter.Activity,
	backfill time.Duration) error {
	write := func(s *lagexporter.Snapshot) error {
		if rows := store.LagRows(s); len(rows) > 0 {
			return c.opts.Sink.Write(ctx, store.Rows{Lag: rows}, nil)
		}
		return nil
	}
	b := &backfiller{window: backfill}
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
			if err := b.handle(s, activity == nil || activity.Active(), write); err != nil {
				return nil // ctx ended
			}
			if err := c.ObserveSnapshot(ctx, s); err != nil {
				return nil // ctx ended
			}
		}
	}
}

// backfiller is FollowLag's standby state: the snapshots of the last window taken while standby.
type backfiller struct {
	window time.Duration // 0: none kept
	held   []*lagexporter.Snapshot
}

// handle takes snapshot s: while standby (active false) it is held, and the held ones older than window before it
// (or beyond maxHeldSnapshots) are dropped; while active the held ones are written first, oldest first, then s.
// It returns write's first error.
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
	for i, h := range b.held { // taken while standby, in the time before this replica turned active
		if err := write(h); err != nil {
			return err
		}
		b.held[i] = nil
	}
	b.held = b.held[:0]
	return write(s)
}
