package query

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// ProbeQuery asks for the probe path's health per broker.
type ProbeQuery struct {
	Window  Window
	Brokers []string // broker ids as decimal strings; empty: all
	// Clusters selects by Kafka cluster (broker ids repeat across clusters: pick one to read a broker); empty: all.
	Clusters []string
}

// ProbePoint is one bucket of one broker's probes: how many were sent, lost and duplicated, and the delivery
// latency of those that arrived.
type ProbePoint struct {
	Time       time.Time
	Broker     string // broker id
	Sent       uint64
	Lost       uint64
	Duplicates uint64 // extra deliveries beyond the first
	P50Ms      float64
	P99Ms      float64 // end-to-end (send → receive) of delivered probes; 0 when none arrived
}

// ProbeHealth answers q from probe_events, ordered by broker, time.
func (r *Reader) ProbeHealth(ctx context.Context, q ProbeQuery) ([]ProbePoint, error) {
	if err := q.Window.validate(); err != nil {
		return nil, err
	}
	if err := validateValues("broker", q.Brokers); err != nil {
		return nil, err
	}
	if err := validateValues("cluster", q.Clusters); err != nil {
		return nil, err
	}
	for _, b := range q.Brokers {
		if _, err := strconv.ParseInt(b, 10, 32); err != nil {
			return nil, fmt.Errorf("broker filter %q: want a broker id (an integer): %w", b, ErrBadInput)
		}
	}
	var wh where
	wh.timeRange("record_time", q.Window.From, q.Window.To)
	wh.in("toString(broker_id)", q.Brokers)
	wh.in("cluster", q.Clusters)
	b, args := bucket("record_time", q.Window.Step)
	args = append(args, wh.args...)
	sql := "SELECT " + b + " AS t, toString(broker_id) AS broker, count() AS sent, countIf(status = 'lost') AS lost, " +
		"sum(toUInt64(duplicates)) AS dups, quantilesTDigestIf(0.5, 0.99)(toFloat64(e2e_ms), status = 'ok') AS q " +
		"FROM probe_events WHERE " + wh.sql() + " GROUP BY t, broker ORDER BY broker, t"
	rows, err := r.conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("query probe health: %w", classify(err))
	}
	defer rows.Close()
	var out []ProbePoint
	for rows.Next() {
		var p ProbePoint
		var qs []float32
		if err := rows.Scan(&p.Time, &p.Broker, &p.Sent, &p.Lost, &p.Duplicates, &qs); err != nil {
			return nil, fmt.Errorf("scan probe health: %w", err)
		}
		p.Time = p.Time.UTC()
		if len(qs) == 2 && p.Sent > p.Lost {
			p.P50Ms, p.P99Ms = float64(qs[0]), float64(qs[1])
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read probe health: %w", classify(err))
	}
	return out, nil
}
