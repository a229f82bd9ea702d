package query

import (
	"context"
	"fmt"
	"time"
)

// ListKind is what a template variable lists.
type ListKind string

// The list kinds the plugin's resource handler serves.
const (
	ListTopics ListKind = "topics"
	ListGroups ListKind = "groups"
	ListHosts  ListKind = "hosts"
	// ListClusters lists the Kafka clusters (the cluster column; a dashboard's cluster variable).
	ListClusters ListKind = "clusters"
)

// ListQuery asks for the names of one kind seen since Since, optionally narrowed to a topic or group.
type ListQuery struct {
	Kind   ListKind
	Since  time.Time
	Filter Filter // Topics narrows groups and hosts; Groups narrows topics and hosts
}

// MaxList bounds how many names a list returns.
const MaxList = 10000

// List returns the sorted distinct names of q.Kind seen in the rollups and lag snapshots (topics, groups) or the
// rollups and clock offsets (hosts) since q.Since.
func (r *Reader) List(ctx context.Context, q ListQuery) ([]string, error) {
	if err := q.Filter.validate(); err != nil {
		return nil, err
	}
	var col string
	switch q.Kind {
	case ListTopics:
		col = "topic"
	case ListGroups:
		col = "consumer_group"
	case ListHosts:
		col = "host"
	case ListClusters:
		col = "cluster"
	default:
		return nil, fmt.Errorf("list %q: want topics, groups, hosts or clusters: %w", q.Kind, ErrBadInput)
	}
	var roll where
	roll.add("minute >= toDateTime(?)", q.Since.Unix())
	roll.in("cluster", q.Filter.Clusters)
	roll.in("topic", q.Filter.Topics)
	roll.in("consumer_group", q.Filter.Groups)
	var other where
	var otherTable string
	if q.Kind == ListHosts {
		otherTable = "clock_offsets"
		other.add("at >= toDateTime(?)", q.Since.Unix())
		other.in("cluster", q.Filter.Clusters)
		if len(q.Filter.Topics)+len(q.Filter.Groups) > 0 {
			other.add("0") // clock offsets know no topic or group: a narrowed list comes from the rollups alone
		}
	} else {
		otherTable = "lag_snapshots"
		other.add("at >= toDateTime(?)", q.Since.Unix())
		other.in("cluster", q.Filter.Clusters)
		other.in("topic", q.Filter.Topics)
		other.in("consumer_group", q.Filter.Groups)
	}
	args := append(append([]any{}, roll.args...), other.args...)
	args = append(args, MaxList)
	sql := "SELECT DISTINCT name FROM (SELECT " + col + " AS name FROM latency_1m WHERE " + roll.sql() +
		" UNION ALL SELECT " + col + " AS name FROM " + otherTable + " WHERE " + other.sql() +
		") WHERE name != '' ORDER BY name LIMIT ?"
	rows, err := r.conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", q.Kind, classify(err))
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("scan %s: %w", q.Kind, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", q.Kind, classify(err))
	}
	return out, nil
}
