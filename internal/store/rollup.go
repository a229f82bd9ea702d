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
		if err := s.conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DROP PARTITION ID '%s'", s.partitionTarget(tier.table), id)); err != nil {
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
