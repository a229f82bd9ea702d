package query

import (
	"context"
	"fmt"
	"time"
)

// ClockOffsetQuery asks for hosts' clock offsets against the collector's reference clock.
type ClockOffsetQuery struct {
	Window Window
	Hosts  []string // empty: all
	// Clusters selects by Kafka cluster (each cluster's collector estimates its own hosts' clocks); empty: all.
	Clusters []string
}

// ClockOffsetPoint is a host's last estimate of one kind in a bucket: the host clock minus the reference clock.
// The true offset lies in [LowerMs, UpperMs]; a causal envelope bounds one side only, and its open side is ±Inf
// (UncertaintyMs, the half-width, is then +Inf). EstimateMs is the point to plot (docs/schema.md, clock_offsets).
type ClockOffsetPoint struct {
	Time          time.Time
	Host          string
	Kind          string // bracketed, synced or envelope
	OffsetMs      float64
	UncertaintyMs float64
	LowerMs       float64
	UpperMs       float64
	EstimateMs    float64
}

// ClockOffsets answers q from clock_offsets, ordered by host, kind, time.
func (r *Reader) ClockOffsets(ctx context.Context, q ClockOffsetQuery) ([]ClockOffsetPoint, error) {
	if err := q.Window.validate(); err != nil {
		return nil, err
	}
	if err := validateValues("host", q.Hosts); err != nil {
		return nil, err
	}
	if err := validateValues("cluster", q.Clusters); err != nil {
		return nil, err
	}
	var wh where
	wh.timeRange("at", q.Window.From, q.Window.To)
	wh.in("host", q.Hosts)
	wh.in("cluster", q.Clusters)
	b, args := bucket("at", q.Window.Step)
	args = append(args, wh.args...)
	sql := "SELECT " + b + " AS t, host, toString(kind) AS kd, argMax(offset_ms, at_ms), argMax(uncertainty_ms, at_ms), " +
		"argMax(lower_ms, at_ms), argMax(upper_ms, at_ms), argMax(estimate_ms, at_ms) " +
		"FROM clock_offsets WHERE " + wh.sql() + " GROUP BY t, host, kd ORDER BY host, kd, t"
	rows, err := r.conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("query clock offsets: %w", classify(err))
	}
	defer rows.Close()
	var out []ClockOffsetPoint
	for rows.Next() {
		var p ClockOffsetPoint
		if err := rows.Scan(&p.Time, &p.Host, &p.Kind, &p.OffsetMs, &p.UncertaintyMs, &p.LowerMs, &p.UpperMs, &p.EstimateMs); err != nil {
			return nil, fmt.Errorf("scan clock offsets: %w", err)
		}
		p.Time = p.Time.UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read clock offsets: %w", classify(err))
	}
	return out, nil
}
