package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// RebuildRollup recomputes one UTC day of latency_1m from latency_events FINAL, so rows that were inserted more than
// once (re-delivered after a collector crash, or a retried insert whose acknowledgement was lost) stop being counted
// twice: the materialized view aggregates inserts, FINAL reads each key once. It drops the day's rollup partition,
// then inserts the materialized view's own SELECT (taken from the embedded migration, so the two cannot drift) over
// the raw rows observed that day.
//
// Run it only for closed days (e.g. the day before yesterday): a row of that day inserted while the rebuild runs
// could be counted by both the view and the rebuild, or by neither. Raw rows already dropped by retention are gone
// from the rebuilt day as well.
func (s *Store) RebuildRollup(ctx context.Context, day time.Time) error {
	sel, err := rollupSelect()
	if err != nil {
		return err
	}
	d := day.UTC()
	from := time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, time.UTC)
	id := from.Format("20060102")
	if err := s.conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DROP PARTITION ID '%s'", TableLatency1m, id)); err != nil {
		return fmt.Errorf("rebuild rollup %s: drop partition: %w", id, err)
	}
	// observed_time is compared as seconds: a bound time.Time would be sent in the session's timezone format.
	q := "INSERT INTO " + TableLatency1m + " " + sel
	if err := s.conn.Exec(ctx, q, from.Unix(), from.AddDate(0, 0, 1).Unix()); err != nil {
		return fmt.Errorf("rebuild rollup %s: %w", id, err)
	}
	return nil
}

// rollupSelect returns the materialized view's SELECT rewritten to read latency_events FINAL over an observed_time
// range bound as two ? (Unix seconds, half-open).
func rollupSelect() (string, error) {
	ms, err := Migrations(SchemaParams{Dialect: DialectLegacy, RetentionDays: 1, RollupRetentionDays: 1})
	if err != nil {
		return "", err
	}
	prefix := "CREATE MATERIALIZED VIEW IF NOT EXISTS " + ViewLatency1m + " TO " + TableLatency1m + " AS\n"
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
		return "", fmt.Errorf("rebuild rollup: the view's SELECT in the migrations has an unexpected shape")
	}
	sel = strings.Replace(sel, from, "\nFROM "+TableLatency+" FINAL\n", 1)
	sel = strings.Replace(sel, group,
		"\nWHERE observed_time >= toDateTime(?, 'UTC') AND observed_time < toDateTime(?, 'UTC')"+group, 1)
	return sel, nil
}
