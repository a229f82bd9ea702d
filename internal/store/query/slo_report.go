package query

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/latency"
)

// SLOReportQuery asks, per topic and consumer group, for the counts behind an end-to-end latency SLO report
// (`tidemark slo report`): the live samples that met a threshold over a period and over trailing burn-rate windows,
// and the samples the SLO leaves out and why.
type SLOReportQuery struct {
	// End is the end of every window (exclusive); each window is [End − length, End), on observed_time.
	End time.Time
	// Period is the SLO period the compliance and error budget are computed over, e.g. 30 days.
	Period time.Duration
	// Windows are the trailing burn-rate windows, e.g. 5m, 30m, 1h, 2h, 6h, 1d, 3d (at most MaxSLOWindows, each at
	// least a second). They may be longer than Period.
	Windows []time.Duration
	// ThresholdMs: a live sample is good when its corrected end-to-end latency is <= this.
	ThresholdMs float64
	// Filter selects topics and groups; Hosts matches the consumer host.
	Filter Filter
}

// MaxSLOWindows is the most burn-rate windows one SLOReportQuery may ask for.
const MaxSLOWindows = 16

// SLOCounts are the live samples of one window: Good of Total met the threshold.
type SLOCounts struct {
	Good, Total uint64
}

// SLOReportRow is one topic and group. A live sample is a latency_events row of class live whose corrected
// end-to-end latency is valid: the same rows the live percentiles and the rollups use. The other counts cover the
// Period only and are disjoint from the live samples.
type SLOReportRow struct {
	Topic, Group string
	Period       SLOCounts
	Windows      []SLOCounts // in the order of SLOReportQuery.Windows
	// Replayed counts rows of class replay (reprocessed after a committed-offset decrease, case C30), Redelivered rows
	// of class redelivery (the uncommitted tail reprocessed after a rebalance) and Backfill rows of class backfill (a
	// new group's first pass over old data): never live latency.
	Replayed, Redelivered, Backfill uint64
	// SkewFlagged counts live rows whose clock correction was suspect (latency.FlagSkewSuspected): their end-to-end
	// latency is not trusted, so they are neither good nor bad. The collector never sets a stage's validity bit on
	// such a row (collector/rows.go), so they are disjoint from the live samples.
	SkewFlagged uint64
	// Unmeasured counts the other live rows without a valid end-to-end latency (a stamp missing or invalid).
	Unmeasured uint64
	// PeriodGoodMin and PeriodGoodMax bound the true number of good live samples of the Period
	// (latency.Objective.GoodBounds): the samples whose end-to-end upper end, resp. lower end, met the threshold.
	// PeriodUnbounded counts the Period's live samples whose upper end is unbounded (never good for the minimum).
	PeriodGoodMin, PeriodGoodMax, PeriodUnbounded uint64
}

// SLOReport answers q from raw latency_events rows read with FINAL, so a row the collector delivered twice
// (at-least-once) is counted once: a report is an exact count, not an estimate. Rows are ordered by topic, then
// group; a topic and group without any row in the scanned range is absent.
func (r *Reader) SLOReport(ctx context.Context, q SLOReportQuery) ([]SLOReportRow, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	sql, args := sloReportSQL(q)
	rows, err := r.conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("query SLO report: %w", classify(err))
	}
	defer rows.Close()
	var out []SLOReportRow
	for rows.Next() {
		row := SLOReportRow{Windows: make([]SLOCounts, len(q.Windows))}
		if err := rows.Scan(row.dest()...); err != nil {
			return nil, fmt.Errorf("scan SLO report: %w", err)
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read SLO report: %w", classify(err))
	}
	return out, nil
}

// validate checks q's end, period, windows, threshold and filter; its errors wrap ErrBadInput.
func (q *SLOReportQuery) validate() error {
	if q.End.IsZero() {
		return fmt.Errorf("SLO report end time missing: %w", ErrBadInput)
	}
	if err := CheckTime("SLO report end", q.End); err != nil {
		return err
	}
	if q.Period < time.Second {
		return fmt.Errorf("SLO report period %s: must be at least 1s: %w", q.Period, ErrBadInput)
	}
	if len(q.Windows) > MaxSLOWindows {
		return fmt.Errorf("%d burn-rate windows: at most %d: %w", len(q.Windows), MaxSLOWindows, ErrBadInput)
	}
	for _, w := range q.Windows {
		if w < time.Second {
			return fmt.Errorf("burn-rate window %s: must be at least 1s: %w", w, ErrBadInput)
		}
	}
	if err := validateThreshold(q.ThresholdMs); err != nil {
		return err
	}
	return q.Filter.validate()
}

// sloReportSQL is the query of q (validated) and its arguments: per topic and group, the good and total live
// samples of the period and of each window, the period's excluded samples by kind, and the period's good bounds;
// the columns in the order SLOReportRow.dest scans them.
func sloReportSQL(q SLOReportQuery) (string, []any) {
	sp := stages[StageE2E]
	end := q.End.Unix()
	// A window starting before 1970 starts at MinTime: DateTime holds nothing earlier, and a negative bound would wrap.
	since := func(d time.Duration) int64 { return max(end-int64(d/time.Second), MinTime.Unix()) }
	scanned := slices.Max(append([]time.Duration{q.Period}, q.Windows...))

	// Each aggregate is a fixed fragment; only its bound values (window starts, the threshold, bits) vary.
	live := "replay_class = 'live' AND bitAnd(valid, ?) != 0"
	var cols []string
	var args []any
	counts := func(from int64) {
		cols = append(cols, "countIf("+live+" AND observed_time >= toDateTime(?) AND e2e_ms <= ?)",
			"countIf("+live+" AND observed_time >= toDateTime(?))")
		args = append(args, sp.bit, from, q.ThresholdMs, sp.bit, from)
	}
	periodFrom := since(q.Period)
	counts(periodFrom)
	for _, w := range q.Windows {
		counts(since(w))
	}
	skew := uint32(latency.FlagSkewSuspected)
	cols = append(cols,
		"countIf(replay_class = 'replay' AND observed_time >= toDateTime(?))",
		"countIf(replay_class = 'redelivery' AND observed_time >= toDateTime(?))",
		"countIf(replay_class = 'backfill' AND observed_time >= toDateTime(?))",
		"countIf(replay_class = 'live' AND bitAnd(flags, ?) != 0 AND observed_time >= toDateTime(?))",
		"countIf(replay_class = 'live' AND bitAnd(valid, ?) = 0 AND bitAnd(flags, ?) = 0 AND observed_time >= toDateTime(?))")
	args = append(args, periodFrom, periodFrom, periodFrom, skew, periodFrom, sp.bit, skew, periodFrom)
	cols = append(cols,
		"countIf("+live+" AND observed_time >= toDateTime(?) AND e2e_hi_ms <= ?)",
		"countIf("+live+" AND observed_time >= toDateTime(?) AND e2e_lo_ms <= ?)",
		"countIf("+live+" AND observed_time >= toDateTime(?) AND NOT isFinite(e2e_hi_ms))")
	args = append(args, sp.bit, periodFrom, q.ThresholdMs, sp.bit, periodFrom, q.ThresholdMs, sp.bit, periodFrom)

	var wh where
	wh.timeRange("observed_time", time.Unix(since(scanned), 0), q.End)
	wh.in("cluster", q.Filter.Clusters)
	wh.in("topic", q.Filter.Topics)
	wh.in("consumer_group", q.Filter.Groups)
	wh.in(sp.host, q.Filter.Hosts)
	args = append(args, wh.args...)
	return "SELECT topic, consumer_group, " + strings.Join(cols, ", ") + " FROM latency_events FINAL WHERE " + wh.sql() +
		" GROUP BY topic, consumer_group ORDER BY topic, consumer_group", args
}

// dest is the scan destinations of one row of sloReportSQL, in its column order; row.Windows has one entry per
// window of the query.
func (row *SLOReportRow) dest() []any {
	dest := []any{&row.Topic, &row.Group, &row.Period.Good, &row.Period.Total}
	for i := range row.Windows {
		dest = append(dest, &row.Windows[i].Good, &row.Windows[i].Total)
	}
	return append(dest, &row.Replayed, &row.Redelivered, &row.Backfill, &row.SkewFlagged, &row.Unmeasured,
		&row.PeriodGoodMin, &row.PeriodGoodMax, &row.PeriodUnbounded)
}
