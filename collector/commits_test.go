package collector

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/latency"
)

func snapshot(at time.Time, group string, committed int64) *lagexporter.Snapshot {
	return &lagexporter.Snapshot{Time: at, Groups: []lagexporter.GroupLag{{Group: group,
		Partitions: []lagexporter.PartitionLag{{Topic: "orders", Partition: 0, HasCommit: true, Committed: committed}}}}}
}

// TestCommitBoundsForUninstrumentedGroups: records the tap saw at offsets 10..12 (appended at t0); group "legacy"
// commits 10 at t0+1s and 12 at t0+6s, so offsets 10 and 11 were processed no later than t0+6s: two rows whose
// processed stamp is that commit, flagged commit-bound, end-to-end never valid for percentiles.
func TestCommitBoundsForUninstrumentedGroups(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	deps, sink, _ := newTestDeps(t, t0)
	ring := &tapRing{}
	for off := int64(10); off <= 12; off++ {
		var rec latency.Record
		rec.Offset = off
		rec.Stamps[latency.Append] = latency.MillisStamp(latency.RefHost, t0.UnixMilli())
		ring.add("orders", 0, tapped{offset: off, rec: rec, raw: rawStamps{append: t0.UnixMilli()}, broker: "broker-1"})
	}
	deps.instrumented.Store("instrumented-app", struct{}{})
	cb := newCommitBounds(deps, ring, func(g string) bool { _, ok := deps.instrumented.Load(g); return ok })
	ctx := context.Background()
	for _, s := range []*lagexporter.Snapshot{
		snapshot(t0.Add(time.Second), "legacy", 10),           // first sighting: no lower edge yet
		snapshot(t0.Add(time.Second), "instrumented-app", 10), // sends receipts: skipped
		snapshot(t0.Add(6*time.Second), "instrumented-app", 12),
		snapshot(t0.Add(6*time.Second), "legacy", 12),
	} {
		if err := cb.observe(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if len(sink.rows) != 1 || len(sink.rows[0].Latency) != 2 {
		t.Fatalf("sink got %+v", sink.rows)
	}
	for i, row := range sink.rows[0].Latency {
		if row.Group != "legacy" || row.Offset != int64(10+i) || row.Source != store.SourceTap ||
			row.ProcessedMs != t0.Add(6*time.Second).UnixMilli() || row.Flags&uint32(latency.FlagCommitBound) == 0 ||
			row.Valid&store.ValidE2E != 0 {
			t.Fatalf("row %d: %+v", i, row)
		}
	}
	// A commit that goes backwards (a rewind) bounds nothing.
	if err := cb.observe(ctx, snapshot(t0.Add(9*time.Second), "legacy", 5)); err != nil {
		t.Fatal(err)
	}
	if len(sink.rows) != 1 {
		t.Fatalf("a rewind produced rows: %+v", sink.rows[1:])
	}
}
