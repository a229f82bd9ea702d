package query

import (
	"context"
	"fmt"
	"time"
)

// SLOQuery asks how many live messages met an end-to-end latency threshold, per time bucket.
type SLOQuery struct {
	Window      Window
	ThresholdMs float64 // a message is good when its corrected end-to-end latency is <= this
	GroupBy     Dimension
	Filter      Filter
	// IncludeReplays counts replayed messages too (their latency measured from the rewind).
	IncludeReplays bool
}

// SLOPoint is one bucket of one series: Good of Total live messages met the threshold by their estimate. The true
// count lies in [GoodMin, GoodMax] (latency.Objective.GoodBounds): GoodMin counts the samples whose upper end met the
// threshold, GoodMax those whose lower end did. Unbounded counts the samples whose upper end is unbounded (a clock
// offset unknown, or a row stored without its interval): never good for the minimum.
type SLOPoint struct {
	Time             time.Time
	Key              string
	Good, Total      uint64
	GoodMin, GoodMax uint64
	Unbounded        uint64
}

// SLO answers q from raw rows. It always reads raw rows: "how many samples were at most T" is an exact count there,
// while the rollup's t-digest states only answer the inverse question (which latency a level has), and a threshold
// count read through a sketch would make the error budget drift by the sketch's error. The scan reads two narrow
// columns, so it stays fast over long ranges.
func (r *Reader) SLO(ctx context.Context, q SLOQuery) ([]SLOPoint, error) {
	if err := q.Window.validate(); err != nil {
		return nil, err
	}
	if err := validateThreshold(q.ThresholdMs); err != nil {
		return nil, err
	}
	if err := q.Filter.validate(); err != nil {
		return nil, err
	}
	sp := stages[StageE2E]
	key, err := latencyKey(q.GroupBy, SourceRaw, sp)
	if err != nil {
		return nil, err
	}
	var wh where
	wh.timeRange("observed_time", q.Window.From, q.Window.To)
	liveSamples(&wh, sp, q.IncludeReplays)
	wh.in("cluster", q.Filter.Clusters)
	wh.in("topic", q.Filter.Topics)
	wh.in("consumer_group", q.Filter.Groups)
	wh.in(sp.host, q.Filter.Hosts)
	b, args := bucket("observed_time", q.Window.Step)
	args = append(append(args, q.ThresholdMs, q.ThresholdMs, q.ThresholdMs), wh.args...)
	sql := "SELECT " + b + " AS t, " + key + " AS k, countIf(e2e_ms <= ?) AS good, count() AS total, " +
		"countIf(e2e_hi_ms <= ?) AS good_min, countIf(e2e_lo_ms <= ?) AS good_max, countIf(NOT isFinite(e2e_hi_ms)) AS unbounded " +
		"FROM latency_events WHERE " + wh.sql() + " GROUP BY t, k ORDER BY k, t"
	rows, err := r.conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("query SLO compliance: %w", classify(err))
	}
	defer rows.Close()
	var out []SLOPoint
	for rows.Next() {
		var p SLOPoint
		if err := rows.Scan(&p.Time, &p.Key, &p.Good, &p.Total, &p.GoodMin, &p.GoodMax, &p.Unbounded); err != nil {
			return nil, fmt.Errorf("scan SLO compliance: %w", err)
		}
		p.Time = p.Time.UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read SLO compliance: %w", classify(err))
	}
	return out, nil
}
