package store

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestRollupCountsAndQuantiles feeds latency_events through the writer and reads latency_1m back: counts must be
// exact, and the t-digest quantiles within the documented error (docs/schema.md: 1% of rank).
func TestRollupCountsAndQuantiles(t *testing.T) {
	s, conn := migratedStore(t, nil)
	ctx := testCtx(t)
	w := newTestWriter(t, s, nil, nil)
	minute := time.Date(2026, 11, 29, 10, 7, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))

	const live = 10000
	var e2e, naive []float64
	var rows []LatencyRow
	offset := int64(0)
	add := func(r LatencyRow) {
		r.Group, r.Topic, r.Partition, r.Offset = "g", "orders", 0, offset
		r.ProducerHost, r.ConsumerHost = "prod-1", "cons-1"
		r.AppendMs = minute.UnixMilli() + offset%50000
		r.ObservedMs = r.AppendMs + 100 // every row lands in the same minute
		offset++
		rows = append(rows, r)
	}
	for range live {
		// Log-normal-ish latencies, median ≈ 20 ms with a long tail: what queue waits look like.
		v := int64(math.Round(math.Exp(3 + rng.NormFloat64())))
		nv := v + 2500 // a naive value on skewed clocks
		e2e, naive = append(e2e, float64(v)), append(naive, float64(nv))
		add(LatencyRow{Class: ClassLive, E2EMs: v, E2ENaiveMs: nv, IngestMs: 1, QueueMs: v - 1,
			Valid: ValidE2E | NaiveE2E | ValidIngest | ValidQueue})
	}
	for range 300 { // replays: counted, never in the live quantiles, whatever their latency
		add(LatencyRow{Class: ClassReplay, E2EMs: 999999, Valid: ValidE2E})
	}
	for range 200 {
		add(LatencyRow{Class: ClassBackfill, E2EMs: 999999, Valid: ValidE2E})
	}
	for range 150 { // live but the e2e stage is invalid (e.g. a sentinel timestamp): flagged
		add(LatencyRow{Class: ClassLive, E2EMs: 0, Valid: ValidIngest})
	}
	for range 50 { // unclassified: flagged too
		add(LatencyRow{Class: ClassUnknown, E2EMs: 5, Valid: ValidE2E})
	}
	// Several inserts, so the rollup holds several partial states that -Merge combines.
	for i := 0; i < len(rows); i += 2000 {
		writeAndFlush(t, w, Rows{Latency: rows[i:min(i+2000, len(rows))]})
	}
	// Re-delivered through the same writer: the dedup window keeps them out of the rollup.
	writeAndFlush(t, w, Rows{Latency: rows[:1000]})

	var gotMinute time.Time
	var liveN, flagged, replay, backfill uint64
	var q, nq []float64
	var maxMs int64
	err := conn.QueryRow(ctx, "SELECT minute, sumMerge(live), sumMerge(flagged), sumMerge(replay), sumMerge(backfill), "+
		"quantilesTDigestMerge(0.5, 0.9, 0.99)(latency_ms), quantilesTDigestMerge(0.5, 0.9, 0.99)(naive_ms), maxMerge(max_ms) "+
		"FROM latency_1m WHERE stage = 'e2e' AND topic = 'orders' AND consumer_group = 'g' AND host = 'cons-1' GROUP BY minute").
		Scan(&gotMinute, &liveN, &flagged, &replay, &backfill, &q, &nq, &maxMs)
	if err != nil {
		t.Fatal(err)
	}
	if !gotMinute.Equal(minute) || liveN != live || flagged != 200 || replay != 300 || backfill != 200 {
		t.Fatalf("minute %v live %d flagged %d replay %d backfill %d; want %v 10000 200 300 200",
			gotMinute, liveN, flagged, replay, backfill, minute)
	}
	if want := int64(slices.Max(e2e)); maxMs != want {
		t.Errorf("max_ms %d, want %d", maxMs, want)
	}
	slices.Sort(e2e)
	slices.Sort(naive)
	for i, level := range []float64{0.5, 0.9, 0.99} {
		// Rank error: the estimate must lie between the exact quantiles at level ± 0.01.
		lo, hi := exactQuantile(e2e, level-0.01), exactQuantile(e2e, level+0.01)
		if q[i] < lo || q[i] > hi {
			t.Errorf("p%v = %v, exact %v, want within [%v, %v]", level*100, q[i], exactQuantile(e2e, level), lo, hi)
		}
		lo, hi = exactQuantile(naive, level-0.01), exactQuantile(naive, level+0.01)
		if nq[i] < lo || nq[i] > hi {
			t.Errorf("naive p%v = %v, want within [%v, %v]", level*100, nq[i], lo, hi)
		}
		t.Logf("p%v: rollup %.1f exact %.1f", level*100, q[i], exactQuantile(e2e, level))
	}

	// The ingest stage belongs to the producer host; queue to the consumer. Validity is per stage: the 150 rows whose
	// e2e is invalid still have a valid ingest stage.
	var ingestLive, queueLive uint64
	if err := conn.QueryRow(ctx, "SELECT sumMergeIf(live, stage = 'ingest' AND host = 'prod-1'), "+
		"sumMergeIf(live, stage = 'queue' AND host = 'cons-1') FROM latency_1m").Scan(&ingestLive, &queueLive); err != nil {
		t.Fatal(err)
	}
	if ingestLive != live+150 || queueLive != live {
		t.Errorf("ingest live on prod-1 %d, queue live on cons-1 %d; want %d and %d", ingestLive, queueLive, live+150, live)
	}
}

// exactQuantile is the nearest-rank quantile of sorted xs.
func exactQuantile(xs []float64, q float64) float64 {
	q = min(max(q, 0), 1)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// TestRebuildRollupRemovesCrashDuplicates: a collector crash re-delivers rows that a fresh writer (empty dedup
// window) inserts again; the view counts them twice, RebuildRollup restores the exact counts and quantiles.
func TestRebuildRollupRemovesCrashDuplicates(t *testing.T) {
	s, conn := migratedStore(t, nil)
	ctx := testCtx(t)
	day := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	var rows []LatencyRow
	for i := range 1000 {
		ms := day.Add(time.Duration(i) * time.Minute).UnixMilli() // 1000 minutes of the day
		rows = append(rows, LatencyRow{Group: "g", Topic: "t", Offset: int64(i), Class: ClassLive, AppendMs: ms,
			ObservedMs: ms + 5, E2EMs: int64(i % 100), Valid: ValidE2E, ConsumerHost: "c"})
	}
	// A row observed the next day must survive a rebuild of this one.
	next := day.AddDate(0, 0, 1).Add(time.Hour).UnixMilli()
	rows = append(rows, LatencyRow{Group: "g", Topic: "t", Offset: 5000, Class: ClassLive, AppendMs: next,
		ObservedMs: next, E2EMs: 1, Valid: ValidE2E, ConsumerHost: "c"})
	writeAndFlush(t, newTestWriter(t, s, nil, nil), Rows{Latency: rows})
	writeAndFlush(t, newTestWriter(t, s, nil, nil), Rows{Latency: rows[:400]}) // after the "crash"

	// count reads both tiers: they must agree with each other at every step.
	count := func() (dayLive, nextLive uint64) {
		t.Helper()
		var got [2][2]uint64
		for i, tc := range [][2]string{{TableLatency1m, "minute"}, {TableLatency1h, "hour"}} {
			err := conn.QueryRow(ctx, "SELECT sumMergeIf(live, toDate("+tc[1]+") = '2026-11-27'), "+
				"sumMergeIf(live, toDate("+tc[1]+") = '2026-11-28') FROM "+tc[0]+" WHERE stage = 'e2e'").Scan(&got[i][0], &got[i][1])
			if err != nil {
				t.Fatal(err)
			}
		}
		if got[0] != got[1] {
			t.Fatalf("latency_1m counts %v, latency_1h %v: the tiers disagree", got[0], got[1])
		}
		return got[0][0], got[0][1]
	}
	if d, n := count(); d != 1400 || n != 1 {
		t.Fatalf("before rebuild: %d live on the day, %d the next; want 1400 (400 counted twice) and 1", d, n)
	}
	if err := s.RebuildRollup(ctx, day.Add(13*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if d, n := count(); d != 1000 || n != 1 {
		t.Fatalf("after rebuild: %d live on the day, %d the next; want 1000 and 1", d, n)
	}
	var p50, maxMs float64
	if err := conn.QueryRow(ctx, "SELECT toFloat64(quantilesTDigestMerge(0.5)(latency_ms)[1]), toFloat64(maxMerge(max_ms)) FROM latency_1m "+
		"WHERE stage = 'e2e' AND toDate(minute) = '2026-11-27'").Scan(&p50, &maxMs); err != nil {
		t.Fatal(err)
	}
	// Values are i % 100 for 1000 rows: uniform over 0..99, median 49.5 (±1 for rank error), max 99.
	if p50 < 48.5 || p50 > 50.5 || maxMs != 99 {
		t.Errorf("after rebuild p50 %v max %v, want ≈49.5 and 99", p50, maxMs)
	}
	// Idempotent: a second rebuild gives the same counts.
	if err := s.RebuildRollup(ctx, day); err != nil {
		t.Fatal(err)
	}
	if d, _ := count(); d != 1000 {
		t.Fatalf("second rebuild: %d live, want 1000", d)
	}
}

// TestHourlyRollupCountsAndQuantiles reads latency_1h against the raw values it was fed: per hour, live, flagged and
// replay counts exact and equal to the minute tier's, and p50/p90/p99/p99.9 within the documented 1% of rank.
func TestHourlyRollupCountsAndQuantiles(t *testing.T) {
	s, conn := migratedStore(t, nil)
	ctx := testCtx(t)
	w := newTestWriter(t, s, nil, nil)
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(3, 4))

	const hours, perHour = 3, 12000
	exact := make([][]float64, hours)
	var rows []LatencyRow
	for i := range hours * perHour {
		h := i % hours
		// Spread over every minute of the hour, so each hour merges many minute-sized inserts' states.
		obs := start.Add(time.Duration(h)*time.Hour + time.Duration(rng.IntN(3600))*time.Second)
		// Each hour has its own distribution (median ≈ 20, 55, 148 ms) with a heavy tail: an hourly state that
		// mixed hours up would miss by far more than 1% of rank.
		v := int64(math.Round(math.Exp(3 + float64(h) + 1.2*rng.NormFloat64())))
		r := LatencyRow{Group: "g", Topic: "orders", Offset: int64(i), Class: ClassLive, AppendMs: obs.UnixMilli() - v,
			ObservedMs: obs.UnixMilli(), E2EMs: v, Valid: ValidE2E, ConsumerHost: "c1"}
		switch {
		case i%50 == 7: // replays: counted apart, never in the quantiles
			r.Class, r.E2EMs = ClassReplay, 1e7
		case i%50 == 11: // live with an invalid e2e stage: flagged
			r.Valid = ValidIngest
		default:
			exact[h] = append(exact[h], float64(v))
		}
		rows = append(rows, r)
	}
	for i := 0; i < len(rows); i += 5000 {
		writeAndFlush(t, w, Rows{Latency: rows[i:min(i+5000, len(rows))]})
	}

	type hourRow struct {
		Hour    time.Time `ch:"t"`
		Live    uint64    `ch:"live"`
		Flagged uint64    `ch:"flagged"`
		Replay  uint64    `ch:"replay"`
		Q       []float32 `ch:"q"`
	}
	read := func(table, col string) []hourRow {
		t.Helper()
		var out []hourRow
		err := conn.Select(ctx, &out, "SELECT toStartOfHour("+col+") AS t, sumMerge(live) AS live, sumMerge(flagged) AS flagged, "+
			"sumMerge(replay) AS replay, quantilesTDigestMerge(0.5, 0.9, 0.99, 0.999)(latency_ms) AS q FROM "+table+
			" WHERE stage = 'e2e' GROUP BY t ORDER BY t")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	hourly, minutely := read(TableLatency1h, "hour"), read(TableLatency1m, "minute")
	if len(hourly) != hours || len(minutely) != hours {
		t.Fatalf("%d hourly and %d minute-tier hours, want %d", len(hourly), len(minutely), hours)
	}
	for h, got := range hourly {
		// 12000 rows an hour; every 50th offset from 7 and from 11 is a replay / flagged: 240 each.
		want := hourRow{Hour: start.Add(time.Duration(h) * time.Hour), Live: uint64(len(exact[h])), Flagged: 240, Replay: 240}
		if !got.Hour.Equal(want.Hour) || got.Live != want.Live || got.Flagged != want.Flagged || got.Replay != want.Replay {
			t.Fatalf("hour %d: %v live %d flagged %d replay %d; want %v %d 240 240", h, got.Hour, got.Live, got.Flagged,
				got.Replay, want.Hour, want.Live)
		}
		if m := minutely[h]; m.Live != got.Live || m.Flagged != got.Flagged || m.Replay != got.Replay {
			t.Errorf("hour %d: minute tier counts %d/%d/%d, hourly %d/%d/%d", h, m.Live, m.Flagged, m.Replay,
				got.Live, got.Flagged, got.Replay)
		}
		xs := exact[h]
		slices.Sort(xs)
		for i, level := range []float64{0.5, 0.9, 0.99, 0.999} {
			// Rank error (docs/schema.md): the estimate lies between the exact quantiles at level ± 0.01.
			lo, hi := exactQuantile(xs, level-0.01), exactQuantile(xs, level+0.01)
			if q := float64(got.Q[i]); q < lo || q > hi {
				t.Errorf("hour %d p%v = %v, exact %v, want within [%v, %v]", h, level*100, q, exactQuantile(xs, level), lo, hi)
			}
		}
		t.Logf("hour %d: p50 %.1f (exact %.1f), p99 %.1f (exact %.1f)", h, got.Q[0], exactQuantile(xs, 0.5),
			got.Q[2], exactQuantile(xs, 0.99))
	}
}

// TestMigrateFromVersion1 upgrades a database that a build with only 0001_init migrated: Migrate applies 0002 on,
// an old probe row keeps its key (an empty instance after 0005_probe_instance), the hourly tier starts empty for rows
// written before it, and RebuildRollup fills their day.
func TestMigrateFromVersion1(t *testing.T) {
	db, conn := testenv.ClickHouseDB(t)
	ctx := testCtx(t)
	s, err := Open(ctx, Config{Addr: []string{testenv.ClickHouseAddr(t)}, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ms, err := Migrations(s.schemaParams(DialectLegacy))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.conn.Exec(ctx, schemaMigrationsDDL); err != nil {
		t.Fatal(err)
	}
	for _, st := range ms[0].Statements {
		if err := s.conn.Exec(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.recordMigration(ctx, ms[0], DialectLegacy); err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	// 600 rows a minute apart, inserted as a version-1 build did (this build's writer also writes later columns)
	if err := s.conn.Exec(ctx, fmt.Sprintf(`INSERT INTO latency_events (record_time, observed_time, consumer_group, topic,
		partition, offset, replay_class, append_ts_ms, e2e_ms, valid, consumer_host, ver)
		SELECT toDateTime(%d + number * 60), toDateTime(%d + number * 60), 'g', 't', 0, number, 'live',
		(%d + number * 60) * 1000, 3, %d, 'c', 1 FROM numbers(600)`, day.Unix(), day.Unix(), day.Unix(), ValidE2E)); err != nil {
		t.Fatal(err)
	}
	// A probe row of the one-replica schema (no instance column yet).
	if err := s.conn.Exec(ctx, "INSERT INTO probe_events (record_time, topic, partition, seq, ver) SELECT toDateTime(?, 'UTC'), 'pt', 0, 5, 1", day); err != nil {
		t.Fatal(err)
	}

	res, err := s.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.From != 1 || res.To != CurrentSchemaVersion || len(res.Applied) != CurrentSchemaVersion-1 || res.Applied[0] != "0002_latency_1h" ||
		res.Applied[len(res.Applied)-1] != "0008_stage_bounds" {
		t.Fatalf("upgrade: %+v, want from 1 to %d applying 0002_latency_1h first, 0008_stage_bounds last", res, CurrentSchemaVersion)
	}
	// 0005: the old probe row reads instance ''; a replica's probe with the same (topic, partition, seq) is a
	// different row, not a newer version of it.
	writeAndFlush(t, newTestWriter(t, s, nil, nil), Rows{Probe: []ProbeRow{{Topic: "pt", Partition: 0, Seq: 5, Instance: "pod-a",
		SendMs: day.UnixMilli(), AppendMs: -1, AckMs: -1, ReceiveMs: -1}}})
	var probes []struct {
		Instance string `ch:"instance"`
	}
	if err := s.conn.Select(ctx, &probes, "SELECT instance FROM probe_events FINAL WHERE topic = 'pt' AND seq = 5 ORDER BY instance"); err != nil {
		t.Fatal(err)
	}
	if len(probes) != 2 || probes[0].Instance != "" || probes[1].Instance != "pod-a" {
		t.Fatalf("probe rows after 0005: %+v, want instances '' and pod-a", probes)
	}
	hourly := func() uint64 {
		t.Helper()
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT sumMerge(live) FROM latency_1h WHERE stage = 'e2e'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := hourly(); n != 0 {
		t.Fatalf("latency_1h holds %d live before a rebuild, want 0 (a view sees only later inserts)", n)
	}
	if err := s.RebuildRollup(ctx, day); err != nil {
		t.Fatal(err)
	}
	if n := hourly(); n != 600 {
		t.Fatalf("latency_1h holds %d live after rebuilding the day, want 600", n)
	}
}
