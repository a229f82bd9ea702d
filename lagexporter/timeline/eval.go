package timeline

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/lagexporter"
)

// Poll is one replayed poll of a timeline: its file line, the snapshot the cycle published (nil when the recorded
// cycle failed: Err says why) and the loop's health after it.
type Poll struct {
	Line     int
	Snapshot *lagexporter.Snapshot
	Err      error
	Health   lagexporter.Health
}

// Play replays a timeline through the same Loop code path as a live cluster (a Player as the Cluster, the line's time
// as the clock) and calls fn with every poll, failed ones included, so that a recorded incident replays with the
// same counters. cfg must have passed Validate (apply tl.Config before that). It stops at the first error fn returns.
func Play(ctx context.Context, tl *Timeline, cfg *lagexporter.Config, fn func(Poll) error) error {
	tc := NewPlayer(tl)
	var now time.Time
	loop, err := lagexporter.NewLoop(cfg, tc, func() time.Time { return now })
	if err != nil {
		return err
	}
	for {
		t, line, ok := tc.Advance()
		if !ok {
			return nil
		}
		now = t
		snap, err := loop.Cycle(ctx)
		if err != nil {
			err = fmt.Errorf("%s:%d: %w", tl.Name, line, err)
		}
		if err := fn(Poll{Line: line, Snapshot: snap, Err: err, Health: loop.Health()}); err != nil {
			return err
		}
	}
}

// Eval is Play for callers that want the published snapshots only: fn is called with each successful poll's line and
// snapshot; failed polls (recorded cycles that read nothing) are skipped, as a live loop publishes nothing for them.
func Eval(ctx context.Context, tl *Timeline, cfg *lagexporter.Config, fn func(line int, s *lagexporter.Snapshot) error) error {
	return Play(ctx, tl, cfg, func(p Poll) error {
		if p.Err != nil {
			return nil
		}
		return fn(p.Line, p.Snapshot)
	})
}
