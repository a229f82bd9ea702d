package query

import (
	"context"
	"fmt"
	"time"
)

// SlowestQuery asks for the messages with the longest latency in one stage.
type SlowestQuery struct {
	Window         Window // Step is ignored
	Stage          Stage
	Filter         Filter
	Limit          int // 1..MaxSlowest
	IncludeReplays bool
}

// MaxSlowest bounds SlowestQuery.Limit.
const MaxSlowest = 1000

// Message is one processed message and its latency in the asked stage.
type Message struct {
	ObservedTime time.Time
	Topic        string
	Group        string
	Partition    int32
	Offset       int64
	LatencyMs    int64
	ReplayClass  string // live, replay, redelivery, backfill
	TraceID      string // W3C trace id (32 hex), "" when the message carried none
	ProducerHost string
	ConsumerHost string
}

// Slowest answers q from raw rows, slowest first. A message re-delivered to ClickHouse (at-least-once) appears once.
func (r *Reader) Slowest(ctx context.Context, q SlowestQuery) ([]Message, error) {
	sp, err := q.Stage.spec()
	if err != nil {
		return nil, err
	}
	if err := (Window{From: q.Window.From, To: q.Window.To, Step: time.Second}).validate(); err != nil {
		return nil, err
	}
	if err := q.Filter.validate(); err != nil {
		return nil, err
	}
	if q.Limit < 1 || q.Limit > MaxSlowest {
		return nil, fmt.Errorf("limit %d: want 1 to %d: %w", q.Limit, MaxSlowest, ErrBadInput)
	}
	var wh where
	wh.timeRange("observed_time", q.Window.From, q.Window.To)
	liveSamples(&wh, sp, q.IncludeReplays)
	wh.in("cluster", q.Filter.Clusters)
	wh.in("topic", q.Filter.Topics)
	wh.in("consumer_group", q.Filter.Groups)
	wh.in(sp.host, q.Filter.Hosts)
	sql := "SELECT observed_time, topic, consumer_group, partition, offset, " + sp.column + " AS latency, " +
		"toString(replay_class), trace_id, producer_host, consumer_host FROM latency_events WHERE " + wh.sql() +
		" ORDER BY latency DESC, topic, consumer_group, partition, offset LIMIT 1 BY topic, consumer_group, partition, offset LIMIT ?"
	rows, err := r.conn.Query(ctx, sql, append(wh.args, q.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("query slowest messages: %w", classify(err))
	}
	defer rows.Close()
	var out []Message
	for rows.Next() {
		var m Message
		if err := rows.Scan(&m.ObservedTime, &m.Topic, &m.Group, &m.Partition, &m.Offset, &m.LatencyMs, &m.ReplayClass,
			&m.TraceID, &m.ProducerHost, &m.ConsumerHost); err != nil {
			return nil, fmt.Errorf("scan slowest messages: %w", err)
		}
		m.ObservedTime = m.ObservedTime.UTC()
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read slowest messages: %w", classify(err))
	}
	return out, nil
}
