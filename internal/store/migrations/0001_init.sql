-- 0001_init: Tidemark's first schema. A text/template rendered per dialect by internal/store/schema.go: .Str is String
-- on legacy (18.16) and LowCardinality(String) on modern (>= 23); codec adds a CODEC on modern only; ttl adds, on modern
-- only, a TTL that drops whole expired parts (legacy relies on Store.DropExpired dropping daily partitions).
-- Every statement is idempotent (IF NOT EXISTS), so a migration interrupted half-way is simply run again.
-- Dialects differ in storage only: column names, types as seen by a query, keys and engines are the same on both.

-- Raw latency rows: one per processing of (consumer_group, topic, partition, offset).
CREATE TABLE IF NOT EXISTS latency_events
(
    record_time      DateTime('UTC'){{codec "Delta, ZSTD"}},
    observed_time    DateTime('UTC'){{codec "Delta, ZSTD"}},
    consumer_group   {{.Str}},
    topic            {{.Str}},
    partition        Int32,
    offset           Int64{{codec "Delta, ZSTD"}},
    replay_class     Enum8('unknown' = 0, 'live' = 1, 'replay' = 2, 'backfill' = 3),
    source           Enum8('unknown' = 0, 'probe' = 1, 'receipt' = 2, 'tap' = 3),
    event_ts_ms      Int64{{codec "Delta, ZSTD"}},
    append_ts_ms     Int64{{codec "Delta, ZSTD"}},
    receive_ts_ms    Int64{{codec "Delta, ZSTD"}},
    processed_ts_ms  Int64{{codec "Delta, ZSTD"}},
    ingest_naive_ms  Int64,
    queue_naive_ms   Int64,
    process_naive_ms Int64,
    e2e_naive_ms     Int64,
    ingest_ms        Int64,
    queue_ms         Int64,
    process_ms       Int64,
    e2e_ms           Int64,
    uncertainty_ms   Float64,
    valid            UInt8,
    flags            UInt32,
    producer_host    {{.Str}},
    broker_host      {{.Str}},
    consumer_host    {{.Str}},
    trace_id         String,
    span_id          String,
    ver              UInt64
)
ENGINE = ReplacingMergeTree(ver)
PARTITION BY toYYYYMMDD(record_time)
ORDER BY (topic, consumer_group, partition, offset, replay_class){{ttl "record_time" .RetentionDays}};

-- Raw probe rows: one per probe record Tidemark produced to its probe topic.
CREATE TABLE IF NOT EXISTS probe_events
(
    record_time      DateTime('UTC'){{codec "Delta, ZSTD"}},
    topic            {{.Str}},
    partition        Int32,
    seq              UInt64{{codec "Delta, ZSTD"}},
    broker_id        Int32,
    send_ts_ms       Int64{{codec "Delta, ZSTD"}},
    append_ts_ms     Int64{{codec "Delta, ZSTD"}},
    ack_ts_ms        Int64{{codec "Delta, ZSTD"}},
    receive_ts_ms    Int64{{codec "Delta, ZSTD"}},
    ingest_ms        Int64,
    delivery_ms      Int64,
    rtt_ms           Int64,
    e2e_ms           Int64,
    broker_offset_ms Float64,
    uncertainty_ms   Float64,
    status           Enum8('unknown' = 0, 'ok' = 1, 'lost' = 2),
    duplicates       UInt32,
    flags            UInt32,
    trace_id         String,
    ver              UInt64
)
ENGINE = ReplacingMergeTree(ver)
PARTITION BY toYYYYMMDD(record_time)
ORDER BY (topic, partition, seq){{ttl "record_time" .RetentionDays}};

-- Lag snapshots: one row per (cluster, consumer_group, topic, partition) per lag-exporter poll.
CREATE TABLE IF NOT EXISTS lag_snapshots
(
    at               DateTime('UTC'){{codec "Delta, ZSTD"}},
    at_ms            Int64{{codec "Delta, ZSTD"}},
    cluster          {{.Str}},
    consumer_group   {{.Str}},
    topic            {{.Str}},
    partition        Int32,
    committed        Int64,
    log_start        Int64,
    end_offset       Int64,
    lag              Int64,
    expired          Int64,
    time_lag_ms      Int64,
    status           Enum8('unknown' = 0, 'OK' = 1, 'WARN' = 2, 'STALL' = 3, 'STOP' = 4, 'ERR' = 5, 'REWIND' = 6),
    partition_status Enum8('unknown' = 0, 'OK' = 1, 'WARN' = 2, 'STALL' = 3, 'STOP' = 4, 'ERR' = 5, 'REWIND' = 6),
    flags            UInt32,
    ver              UInt64
)
ENGINE = ReplacingMergeTree(ver)
PARTITION BY toYYYYMMDD(at)
ORDER BY (cluster, consumer_group, topic, partition, at_ms){{ttl "at" .RetentionDays}};

-- Clock-offset estimates: one row per (host, kind) per estimate.
CREATE TABLE IF NOT EXISTS clock_offsets
(
    at               DateTime('UTC'){{codec "Delta, ZSTD"}},
    at_ms            Int64{{codec "Delta, ZSTD"}},
    host             {{.Str}},
    kind             Enum8('unknown' = 0, 'bracketed' = 1, 'synced' = 2, 'envelope' = 3),
    offset_ms        Float64,
    uncertainty_ms   Float64,
    samples          UInt32,
    ver              UInt64
)
ENGINE = ReplacingMergeTree(ver)
PARTITION BY toYYYYMMDD(at)
ORDER BY (host, kind, at_ms){{ttl "at" .RetentionDays}};

-- Per-minute stage rollups: quantile and count states, merged on read with -Merge.
CREATE TABLE IF NOT EXISTS latency_1m
(
    minute           DateTime('UTC'){{codec "Delta, ZSTD"}},
    topic            {{.Str}},
    consumer_group   {{.Str}},
    host             {{.Str}},
    stage            Enum8('ingest' = 1, 'queue' = 2, 'process' = 3, 'e2e' = 4),
    latency_ms       AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99, 0.999), Float64),
    naive_ms         AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99, 0.999), Float64),
    max_ms           AggregateFunction(max, Int64),
    live             AggregateFunction(sum, UInt64),
    flagged          AggregateFunction(sum, UInt64),
    replay           AggregateFunction(sum, UInt64),
    backfill         AggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMMDD(minute)
ORDER BY (topic, consumer_group, host, stage, minute){{ttl "minute" .RollupRetentionDays}};

-- The rollup's feed: every block inserted into latency_events is aggregated into latency_1m, one row per stage.
-- A stage's host is the host whose clock and behaviour it mostly measures: the producer for ingest, the consumer else.
CREATE MATERIALIZED VIEW IF NOT EXISTS latency_1m_mv TO latency_1m AS
SELECT
    toStartOfMinute(observed_time) AS minute,
    topic,
    consumer_group,
    if(stage_name = 'ingest', producer_host, consumer_host) AS host,
    CAST(stage_name AS Enum8('ingest' = 1, 'queue' = 2, 'process' = 3, 'e2e' = 4)) AS stage,
    quantilesTDigestStateIf(0.5, 0.9, 0.99, 0.999)(toFloat64(corrected), replay_class = 'live' AND bitAnd(valid, bit) != 0) AS latency_ms,
    quantilesTDigestStateIf(0.5, 0.9, 0.99, 0.999)(toFloat64(naive), replay_class = 'live' AND bitAnd(valid, bit * 16) != 0) AS naive_ms,
    maxStateIf(corrected, replay_class = 'live' AND bitAnd(valid, bit) != 0) AS max_ms,
    sumState(toUInt64(replay_class = 'live' AND bitAnd(valid, bit) != 0)) AS live,
    sumState(toUInt64(replay_class NOT IN ('replay', 'backfill') AND NOT (replay_class = 'live' AND bitAnd(valid, bit) != 0))) AS flagged,
    sumState(toUInt64(replay_class = 'replay')) AS replay,
    sumState(toUInt64(replay_class = 'backfill')) AS backfill
FROM latency_events
ARRAY JOIN
    ['ingest', 'queue', 'process', 'e2e'] AS stage_name,
    [1, 2, 4, 8] AS bit,
    [ingest_ms, queue_ms, process_ms, e2e_ms] AS corrected,
    [ingest_naive_ms, queue_naive_ms, process_naive_ms, e2e_naive_ms] AS naive
GROUP BY minute, topic, consumer_group, host, stage;
