package timeline

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/lagexporter"
)

// Eval replays a timeline through the same Loop code path as a live cluster (a Player as the Cluster, the
// line's time as the clock) and calls fn with each line's file line number and snapshot. cfg must have passed
// Validate (apply tl.Config before that).
func Eval(ctx context.Context, tl *Timeline, cfg *lagexporter.Config, fn func(line int, s *lagexporter.Snapshot) error) error {
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
			return fmt.Errorf("%s:%d: %w", tl.Name, line, err)
		}
		if err := fn(line, snap); err != nil {
			return err
		}
	}
}
