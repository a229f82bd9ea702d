package store

import (
	"math"
	"testing"
	"time"
)

// TestStageBoundsStoredAndRolledUp writes rows with and without stage intervals through the writer and reads them
// back raw and from both rollup tiers: a row's interval is stored as given, a row without one reads as [0, +Inf),
// and the rollups' lower and upper states and unbounded count cover exactly the live samples of the estimate.
func TestStageBoundsStoredAndRolledUp(t *testing.T) {
	s, conn := migratedStore(t, nil)
	ctx := testCtx(t)
	w := newTestWriter(t, s, nil, nil)
	minute := time.Date(2026, 11, 29, 10, 7, 0, 0, time.UTC)
	var rows []LatencyRow
	for i := range 100 {
		r := LatencyRow{Group: "g", Topic: "orders", Offset: int64(i), Class: ClassLive, ProducerHost: "p", ConsumerHost: "c",
			AppendMs: minute.UnixMilli() + int64(i), E2EMs: int64(100 + i), Valid: ValidE2E}
		r.ObservedMs = r.AppendMs + 100
		switch {
		case i < 90: // a bounded e2e: [v − 10, v + 20]
			r.LowerMs[BoundE2E], r.UpperMs[BoundE2E] = float64(90+i), float64(120+i)
			r.Bounded = ValidE2E
		case i < 95: // an end's offset unknown
			r.LowerMs[BoundE2E], r.UpperMs[BoundE2E] = float64(95+i), math.Inf(1)
			r.Bounded = ValidE2E
		default: // no interval given: stored as unknown
		}
		rows = append(rows, r)
	}
	// A replay with a bound: never in the live states.
	rows = append(rows, LatencyRow{Group: "g", Topic: "orders", Offset: 1000, Class: ClassReplay, ConsumerHost: "c",
		AppendMs: minute.UnixMilli(), ObservedMs: minute.UnixMilli() + 1, E2EMs: 5, Valid: ValidE2E, Bounded: ValidE2E,
		LowerMs: [4]float64{3: 1}, UpperMs: [4]float64{3: 1e9}})
	writeAndFlush(t, w, Rows{Latency: rows})

	var lo, hi float64
	if err := conn.QueryRow(ctx, "SELECT e2e_lo_ms, e2e_hi_ms FROM latency_events WHERE offset = 3").Scan(&lo, &hi); err != nil {
		t.Fatal(err)
	}
	if lo != 93 || hi != 123 {
		t.Errorf("offset 3: [%v, %v], want [93, 123]", lo, hi)
	}
	if err := conn.QueryRow(ctx, "SELECT e2e_lo_ms, e2e_hi_ms FROM latency_events WHERE offset = 97").Scan(&lo, &hi); err != nil {
		t.Fatal(err)
	}
	if lo != 0 || !math.IsInf(hi, 1) {
		t.Errorf("offset 97 (no interval): [%v, %v], want [0, +Inf)", lo, hi)
	}
	for _, table := range []string{TableLatency1m, TableLatency1h} {
		var live, unbounded uint64
		var lower, upper []float32
		if err := conn.QueryRow(ctx, "SELECT sumMerge(live), sumMerge(unbounded), quantilesTDigestMerge(0.5)(lower_ms), "+
			"quantilesTDigestMerge(0.5, 0.99)(upper_ms) FROM "+table+" WHERE stage = 'e2e'").
			Scan(&live, &unbounded, &lower, &upper); err != nil {
			t.Fatal(err)
		}
		// 100 live samples, 10 of them unbounded above (5 with +Inf, 5 stored without an interval).
		if live != 100 || unbounded != 10 {
			t.Errorf("%s: live %d unbounded %d, want 100 and 10", table, live, unbounded)
		}
		// Lower ends: 90..179 and 190..194 and five 0s; their median is ≈ 137. Upper ends' median ≈ 167; their p99 lands
		// among the unbounded tenth and reads as at least 1e15 ms.
		if lower[0] < 130 || lower[0] > 145 || upper[0] < 160 || upper[0] > 175 || upper[1] < 1e15 {
			t.Errorf("%s: lower p50 %v, upper p50 %v p99 %v; want ≈137, ≈167, >= 1e15", table, lower[0], upper[0], upper[1])
		}
	}
}
