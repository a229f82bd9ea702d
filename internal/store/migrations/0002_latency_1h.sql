-- 0002_latency_1h: an hourly tier of the stage rollups, for panels whose buckets are an hour or more (a 7-day panel).
-- Why: a per-minute t-digest state holds about as many centroids as the minute has samples at ~100 samples per minute
-- and series, so merging 60 minute states per hour costs what scanning the raw rows does; one hourly state per hour
-- and series is ~60x fewer states (docs/plugin.md has the measurements).
-- Fed by its own materialized view on latency_events, NOT chained on latency_1m: on ClickHouse 18.16 a view whose
-- source is another view's TO table does not fire (tried). Columns, meanings and duplicate semantics are latency_1m's.
-- Rows inserted before this migration are not in latency_1h: Store.RebuildRollup(day) fills a past day.

-- Per-hour stage rollups: the same states as latency_1m, keyed by the hour.
CREATE TABLE IF NOT EXISTS latency_1h
(
    hour             DateTime('UTC'){{codec "Delta, ZSTD"}},
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
PARTITION BY toYYYYMMDD(hour)
ORDER BY (topic, consumer_group, host, stage, hour){{ttl "hour" .RollupRetentionDays}};

-- The hourly feed: latency_1m_mv's SELECT with toStartOfHour, over every block inserted into latency_events.
CREATE MATERIALIZED VIEW IF NOT EXISTS latency_1h_mv TO latency_1h AS
SELECT
    toStartOfHour(observed_time) AS hour,
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
GROUP BY hour, topic, consumer_group, host, stage;
