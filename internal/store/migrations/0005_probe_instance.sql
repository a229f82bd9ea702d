-- 0005_probe_instance: the replica of `tidemark run` that sent a probe (collector.probe.instance_id).
-- Why: every replica probes the same probe topic with sequence numbers that start at its start time in µs, so two
-- replicas' sequences meet after (start gap in µs / probes per second) seconds, e.g. 55 min for replicas started 10 ms
-- apart probing 3 partitions per second. Keyed by (topic, partition, seq) alone, ReplacingMergeTree would then collapse
-- two replicas' probes into one row; the instance joins the sorting key (not the primary key, which stays a prefix).
-- ClickHouse allows a column in a new sorting key only when it is added by the same ALTER and has no default
-- expression; rows written before this migration get '' (one replica, no id). 18.16 has no ADD COLUMN IF NOT EXISTS
-- (the modern dialect uses it): Migrate treats "column already exists" on an ADD COLUMN as applied
-- (store.ColumnAlreadyAdded), so a rerun after a crash between the ALTER and its record succeeds.
ALTER TABLE probe_events {{addColumn}} instance {{.Str}} AFTER trace_id, MODIFY ORDER BY (topic, partition, seq, instance);
