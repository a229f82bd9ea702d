// Package store is Tidemark's ClickHouse adapter and the only importer of clickhouse-go outside tests and the read
// queries in internal/store/query.
//
// It owns the schema (embedded, versioned migrations rendered in a legacy dialect for ClickHouse 18.16 and a modern
// one for >= 23; see docs/schema.md), the migrations runner (Store.Migrate, recorded in schema_migrations), retention
// (Store.DropExpired drops whole daily partitions), and the batched Writer that the collector and the lag exporter
// write through.
//
// Delivery is at-least-once and idempotent: a Write's Ack runs only after ClickHouse acknowledged every row of it, so
// the collector commits Kafka offsets only then; a row re-delivered after a crash collapses with its first copy in
// the raw ReplacingMergeTree tables (key: consumer_group, topic, partition, offset, replay_class), and the writer's
// dedup window, seeded on assignment with the rows already stored (SeedReceiptKeys), keeps re-deliveries out of the
// rollups; RollupRepairer rebuilds (Store.RebuildRollup) a closed day whose rollup counts differ from the raw
// table's. The rollups come in two tiers fed by their own materialized views on
// latency_events: per minute (latency_1m) and per hour (latency_1h, migration 0002, for hour-wide buckets, where
// merging minute states costs as much as scanning raw rows). docs/schema.md says exactly what the rollups can and
// cannot promise.
//
// Main types: Config, Store, Writer, and the row types LatencyRow, ProbeRow, LagRow and ClockOffsetRow.
package store
