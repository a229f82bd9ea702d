-- 0006_cluster (issue 13): one Tidemark process watches several Kafka clusters, so every table says which one a row is
-- about. lag_snapshots has had its cluster column since 0001; the other tables get one, in their sorting key (two
-- clusters may both have topic "orders", partition 0, offset 7: without the cluster, ReplacingMergeTree would keep one
-- of their rows and AggregatingMergeTree would merge their states).
-- Two statements a table: ClickHouse (18.16 and current) forbids adding a column with a default expression to the
-- sorting key in the ALTER that adds it, so the column is added bare with the key extended by it (last: the primary
-- key stays the old one, no part is rewritten), then given its default. Parts written before this migration have no
-- cluster data at all, and ClickHouse reads (and merges) such a part's column from the column's default: so rows
-- stored before read as {{.Cluster}}, the configured cluster's name when the migration ran ("default" without
-- clusters: and lag.cluster), and a merge writes that value. Rows written after carry their own.
-- The rollups' views are redefined with the cluster (dropped and created again, as 0004 did: blocks inserted in
-- between are not in the rollups; Store.RebuildRollup(day) makes a day exact again).
ALTER TABLE latency_events {{addColumn}} cluster {{.Str}}, MODIFY ORDER BY (topic, consumer_group, partition, offset, replay_class, cluster);

ALTER TABLE latency_events MODIFY COLUMN cluster {{.Str}} DEFAULT {{quote .Cluster}};

ALTER TABLE probe_events {{addColumn}} cluster {{.Str}}, MODIFY ORDER BY (topic, partition, seq, instance, cluster);

ALTER TABLE probe_events MODIFY COLUMN cluster {{.Str}} DEFAULT {{quote .Cluster}};

ALTER TABLE clock_offsets {{addColumn}} cluster {{.Str}}, MODIFY ORDER BY (host, kind, at_ms, cluster);

ALTER TABLE clock_offsets MODIFY COLUMN cluster {{.Str}} DEFAULT {{quote .Cluster}};

ALTER TABLE latency_1m {{addColumn}} cluster {{.Str}}, MODIFY ORDER BY (topic, consumer_group, host, stage, minute, cluster);

ALTER TABLE latency_1m MODIFY COLUMN cluster {{.Str}} DEFAULT {{quote .Cluster}};

ALTER TABLE latency_1h {{addColumn}} cluster {{.Str}}, MODIFY ORDER BY (topic, consumer_group, host, stage, hour, cluster);

ALTER TABLE latency_1h MODIFY COLUMN cluster {{.Str}} DEFAULT {{quote .Cluster}};

DROP TABLE IF EXISTS latency_1m_mv;

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
    sumState(toUInt64(replay_class NOT IN ('replay', 'redelivery', 'backfill') AND NOT (replay_class = 'live' AND bitAnd(valid, bit) != 0))) AS flagged,
    sumState(toUInt64(replay_class = 'replay')) AS replay,
    sumState(toUInt64(replay_class = 'backfill')) AS backfill,
    sumState(toUInt64(replay_class = 'redelivery')) AS redelivery,
    cluster
FROM latency_events
ARRAY JOIN
    ['ingest', 'queue', 'process', 'e2e'] AS stage_name,
    [1, 2, 4, 8] AS bit,
    [ingest_ms, queue_ms, process_ms, e2e_ms] AS corrected,
    [ingest_naive_ms, queue_naive_ms, process_naive_ms, e2e_naive_ms] AS naive
GROUP BY minute, topic, consumer_group, host, stage, cluster;

DROP TABLE IF EXISTS latency_1h_mv;

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
    sumState(toUInt64(replay_class NOT IN ('replay', 'redelivery', 'backfill') AND NOT (replay_class = 'live' AND bitAnd(valid, bit) != 0))) AS flagged,
    sumState(toUInt64(replay_class = 'replay')) AS replay,
    sumState(toUInt64(replay_class = 'backfill')) AS backfill,
    sumState(toUInt64(replay_class = 'redelivery')) AS redelivery,
    cluster
FROM latency_events
ARRAY JOIN
    ['ingest', 'queue', 'process', 'e2e'] AS stage_name,
    [1, 2, 4, 8] AS bit,
    [ingest_ms, queue_ms, process_ms, e2e_ms] AS corrected,
    [ingest_naive_ms, queue_naive_ms, process_naive_ms, e2e_naive_ms] AS naive
GROUP BY hour, topic, consumer_group, host, stage, cluster;
