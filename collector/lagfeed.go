package collector

import (
	"context"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/latency"
)

// FollowLag consumes the lag exporter's snapshots (from Loop.Subscribe) until ctx ends or snaps is closed. For each
// snapshot it feeds the committed offsets to the collector's engine (a decreasing commit marks a replay boundary,
// latency.Engine.ObserveCommit), writes the snapshot's lag_snapshots rows (store.LagRows) to the collector's sink
// while activity is active (lag.election: only the active replica writes them; nil is always active), then calls
// ObserveSnapshot (replay checkpoints, commit bounds of uninstrumented groups). It returns nil: a write fails only
// when ctx ends.
func (c *Collector) FollowLag(ctx context.Context, snaps <-chan *lagexporter.Snapshot, activity *lagexporter.Activity) error {
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
			if rows := store.LagRows(s); len(rows) > 0 && (activity == nil || activity.Active()) {
				if err := c.opts.Sink.Write(ctx, store.Rows{Lag: rows}, nil); err != nil {
					return nil // ctx ended
				}
			}
			if err := c.ObserveSnapshot(ctx, s); err != nil {
				return nil // ctx ended
			}
		}
	}
}
