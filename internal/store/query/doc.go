// Package query holds Tidemark's read queries over the ClickHouse schema of internal/store: the questions the Grafana
// plugin (plugin/pkg) and reports ask, each as one bound SQL statement returning typed rows.
//
// Every value that comes from a user (topic, group and host filters, percentile levels, thresholds, limits, time
// bounds) is bound with clickhouse-go's `?` placeholders; the SQL text itself is built only from fixed fragments this
// package chooses (which column a stage reads, which dimension a series is keyed by).
//
// Buckets of an hour or more are answered from the hourly rollups (latency_1h), other long ranges and minute buckets
// from the per-minute rollups (latency_1m), both t-digest states merged with quantilesTDigestMerge; short ranges
// from raw latency_events rows; ChooseSource decides. Both paths use ClickHouse's
// t-digest, so an answer changes by no more than the sketch's error when a dashboard's range crosses the threshold.
// The rollups hold only live, valid samples: a query that includes replays always reads raw rows.
//
// Main types: Reader (Open, NewReader), Filter, Window, Stage, and one result type per question.
package query
