package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// rollupTier is one rollup table and the materialized view on latency_events that feeds it.
type rollupTier struct {
	table, view string
}

// rollupTiers are every rollup RebuildRollup recomputes, finest first.
var rollupTiers = []rollupTier{
	{TableLatency1m, ViewLatency1m},
	{TableLatency1h, ViewLatency1h},
}

// RebuildRollup recomputes one UTC day of every rollup tier (latency_1m, latency_1h) from latency_events FINAL, so
// rows that were inserted more than once (re-delivered after a collector crash, or a retried insert whose
// acknowledgement was lost) stop being counted twice: the materialized views aggregate inserts, FINAL reads each
// key once. For each tier it drops the day's partition, then inserts the tier's view's own SELECT (taken from the
// embedded migrations, so the two cannot drift) over the raw rows observed that day. It also fills latency_1h for
// days observed before migration 0002 created it.
//
// Run it only for closed days (e.g. the day before yesterday): a row of that day inserted while the rebuild runs
// could be counted by both the view and the rebuild, or by neither. Raw rows already dropped by retention are gone
// from the rebuilt day as well. On error the tiers before the failing one are rebuilt, the failing one may be empty
// for that day: run it again. In cluster mode the day is dropped on every shard's local tier, and the SELECT reads
// and the INSERT writes the Distributed tables (FINAL collapses on each shard: same-key rows share a shard).
func (s *Store) RebuildRollup(ctx context.Context, day time.Time) error {
	d := day.UTC()
	from := time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, time.UTC)
	id := from.Format("20060102")
	for _, tier := range rollupTiers {
		sel, err := rollupSelect(tier)
		if err != nil {
			return err
		}
		if err := s.dropPartition(ctx, tier.table, id); err != nil {
			return fmt.Errorf("rebuild %s %s: drop partition: %w", tier.table, id, err)
		}
		// observed_time is compared as seconds: a bound time.Time would be sent in the session's timezone format.
		q := "INSERT INTO " + tier.table + " " + sel
		if err := s.conn.Exec(ctx, q, from.Unix(), from.AddDate(0, 0, 1).Unix()); err != nil {
			return fmt.Errorf("rebuild %s %s: %w", tier.table, id, err)
		}
	}
	return nil
}

// rollupSelect returns tier's materialized view's SELECT rewritten to read latency_events FINAL over an
// observed_time range bound as two ? (Unix seconds, half-open). An hour and a minute never straddle a UTC day, so a
// day of raw rows makes exactly the day's partition of either tier.
func rollupSelect(tier rollupTier) (string, error) {
	ms, err := Migrations(SchemaParams{Dialect: DialectLegacy, RetentionDays: 1, RollupRetentionDays: 1})
	if err != nil {
		return "", err
	}
	prefix := "CREATE MATERIALIZED VIEW IF NOT EXISTS " + tier.view + " TO " + tier.table + " AS\n"
	var sel string
	for _, m := range ms {
		for _, st := range m.Statements {
			if strings.HasPrefix(st, prefix) {
				sel = strings.TrimPrefix(st, prefix) // a later migration redefining the view wins
			}
		}
	}
	const from, group = "\nFROM " + TableLatency + "\n", "\nGROUP BY "
	if sel == "" || strings.Count(sel, from) != 1 || strings.Count(sel, group) != 1 {
		return "", fmt.Errorf("rebuild %s: the view's SELECT in the migrations has an unexpected shape", tier.table)
	}
	sel = strings.Replace(sel, from, "\nFROM "+TableLatency+" FINAL\n", 1)
	sel = strings.Replace(sel, group,
		"\nWHERE observed_time >= toDateTime(?, 'UTC') AND observed_time < toDateTime(?, 'UTC')"+group, 1)
	return sel, nil
}

// RollupCount is one UTC day of one rollup tier compared with the raw table: Rollup is the rows the tier counted
// (live + flagged + replay + backfill + redelivery of its e2e stage: every row is counted in exactly one of them,
// once per stage), Raw the rows of latency_events FINAL observed that day (each key once, as RebuildRollup counts
// them). Rollup > Raw: rows inserted more than once were aggregated more than once; Rollup < Raw: rows the tier
// never saw (inserted while a migration redefined its view, or before the tier existed).
type RollupCount struct {
	Table       string
	Day         time.Time // 00:00 UTC
	Rollup, Raw int64
}

// CountRollups compares each rollup tier's row count for the UTC day of day with the distinct rows of
// latency_events FINAL observed that day: three queries (one per tier, one on the raw table), each bounded by the
// store's max_execution_time.
func (s *Store) CountRollups(ctx context.Context, day time.Time) ([]RollupCount, error) {
	d := day.UTC()
	from := time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 0, 1)
	var raw uint64
	if err := s.conn.QueryRow(ctx, "SELECT count() FROM "+TableLatency+" FINAL WHERE observed_time >= toDateTime(?, 'UTC')"+
		" AND observed_time < toDateTime(?, 'UTC')", from.Unix(), to.Unix()).Scan(&raw); err != nil {
		return nil, fmt.Errorf("count %s rows observed %s: %w", TableLatency, from.Format(time.DateOnly), err)
	}
	out := make([]RollupCount, 0, len(rollupTiers))
	for _, tier := range rollupTiers {
		bucket := "minute"
		if tier.table == TableLatency1h {
			bucket = "hour"
		}
		var n uint64
		if err := s.conn.QueryRow(ctx, "SELECT sumMerge(live) + sumMerge(flagged) + sumMerge(replay) + sumMerge(backfill) + "+
			"sumMerge(redelivery) FROM "+tier.table+" WHERE stage = 'e2e' AND "+bucket+" >= toDateTime(?, 'UTC') AND "+
			bucket+" < toDateTime(?, 'UTC')", from.Unix(), to.Unix()).Scan(&n); err != nil {
			return nil, fmt.Errorf("count %s rows of %s: %w", tier.table, from.Format(time.DateOnly), err)
		}
		out = append(out, RollupCount{Table: tier.table, Day: from, Rollup: int64(n), Raw: int64(raw)})
	}
	return out, nil
}

// RepairRollups checks the days closed days before now's UTC day, newest first (days 2: yesterday and the day
// before), and rebuilds (RebuildRollup) each day on which some tier's count differs from the raw table's. It returns
// every count it read, before any repair, and the days it rebuilt. A day that closed minutes ago may still receive
// rows from a collector working through a backlog; a rebuild racing such a row can miscount it, which the next
// check finds and repairs again.
func (s *Store) RepairRollups(ctx context.Context, now time.Time, days int) (counts []RollupCount, rebuilt []time.Time, err error) {
	today := now.UTC().Truncate(24 * time.Hour)
	for i := 1; i <= days; i++ {
		day := today.AddDate(0, 0, -i)
		cs, err := s.CountRollups(ctx, day)
		if err != nil {
			return counts, rebuilt, err
		}
		counts = append(counts, cs...)
		differ := false
		for _, c := range cs {
			differ = differ || c.Rollup != c.Raw
		}
		if !differ {
			continue
		}
		if err := s.RebuildRollup(ctx, day); err != nil {
			return counts, rebuilt, err
		}
		rebuilt = append(rebuilt, day)
	}
	return counts, rebuilt, nil
}
