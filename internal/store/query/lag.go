package query

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// LagQuery asks for consumer lag per time bucket, for every group type (a share group's lag is its share-partition
// lag, docs/lag.md).
type LagQuery struct {
	Window  Window
	GroupBy Dimension // DimNone, DimGroup, DimTopic, DimGroupType or DimSubtopology
	Filter  Filter    // Hosts is ignored: lag belongs to a group, not a host
}

// LagPoint is one bucket of one series. In each bucket every partition contributes its last snapshot; offset lag and
// expired offsets are summed over partitions, time lag is the maximum (the oldest unconsumed record decides how late
// the group is). Definitions are the lag exporter's (docs/architecture.md, "Lag").
type LagPoint struct {
	Time       time.Time
	Key        string
	Lag        int64 // messages
	Expired    int64 // offsets below the log start that the group never consumed
	TimeLagMs  int64
	Partitions uint64 // partitions that reported in the bucket
}

// ConsumerLag answers q from lag_snapshots.
func (r *Reader) ConsumerLag(ctx context.Context, q LagQuery) ([]LagPoint, error) {
	if err := q.Window.validate(); err != nil {
		return nil, err
	}
	if err := q.Filter.validate(); err != nil {
		return nil, err
	}
	var key string
	switch q.GroupBy {
	case DimNone, "":
		key = "''"
	case DimGroup:
		key = "consumer_group"
	case DimTopic:
		key = "topic"
	case DimGroupType:
		key = "gt"
	case DimSubtopology: // a streams group's lag per subtopology; other groups keep one series each
		key = "if(sub = '', consumer_group, concat(consumer_group, '/', sub))"
	default:
		return nil, fmt.Errorf("consumer lag grouped by %q: want none, group, topic, group_type or subtopology: %w", q.GroupBy, ErrBadInput)
	}
	for _, gt := range q.Filter.GroupTypes {
		if !slices.Contains(GroupTypes, gt) {
			return nil, fmt.Errorf("consumer lag for group type %q: want one of %s: %w", gt, strings.Join(GroupTypes, ", "), ErrBadInput)
		}
	}
	var wh where
	wh.timeRange("at", q.Window.From, q.Window.To)
	wh.in("cluster", q.Filter.Clusters)
	wh.in("topic", q.Filter.Topics)
	wh.in("consumer_group", q.Filter.Groups)
	wh.in("toString(group_type)", q.Filter.GroupTypes)
	b, args := bucket("at", q.Window.Step)
	args = append(args, wh.args...)
	sql := "SELECT t, " + key + " AS k, sum(l) AS lag, sum(e) AS expired, max(tl) AS time_lag, count() AS parts FROM (" +
		"SELECT " + b + " AS t, cluster, consumer_group, topic, partition, argMax(lag, at_ms) AS l, " +
		"argMax(expired, at_ms) AS e, argMax(time_lag_ms, at_ms) AS tl, toString(argMax(group_type, at_ms)) AS gt, " +
		"argMax(subtopology, at_ms) AS sub FROM lag_snapshots WHERE " + wh.sql() +
		" GROUP BY t, cluster, consumer_group, topic, partition) GROUP BY t, k ORDER BY k, t"
	rows, err := r.conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("query consumer lag: %w", classify(err))
	}
	defer rows.Close()
	var out []LagPoint
	for rows.Next() {
		var p LagPoint
		if err := rows.Scan(&p.Time, &p.Key, &p.Lag, &p.Expired, &p.TimeLagMs, &p.Partitions); err != nil {
			return nil, fmt.Errorf("scan consumer lag: %w", err)
		}
		p.Time = p.Time.UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read consumer lag: %w", classify(err))
	}
	return out, nil
}
