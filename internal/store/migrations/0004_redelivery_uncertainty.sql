-- 0004_redelivery_uncertainty (issue 16).
-- Redelivery is its own replay class: the uncommitted tail an at-least-once consumer processes again after a
-- rebalance is neither live latency nor a replay (a rewind of committed offsets). Stored as replay before, it was
-- counted as one; 'redelivery' = 4 is added to the enum (adding a value to an Enum8 key column is metadata only, on
-- 18.16 and current releases) and the rollups get their own count of it: the views are redefined (dropped and
-- created again: blocks inserted in between are not in the rollups; Store.RebuildRollup(day) makes a day exact
-- again), and 'flagged' no longer counts redeliveries. Rows stored before keep their class.
ALTER TABLE latency_events MODIFY COLUMN replay_class Enum8('unknown' = 0, 'live' = 1, 'replay' = 2, 'backfill' = 3, 'redelivery' = 4);

ALTER TABLE latency_1m {{addColumn}} redelivery AggregateFunction(sum, UInt64);

ALTER TABLE latency_1h {{addColumn}} redelivery AggregateFunction(sum, UInt64);

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
    sumState(toUInt64(replay_class = 'redelivery')) AS redelivery
FROM latency_events
ARRAY JOIN
    ['ingest', 'queue', 'process', 'e2e'] AS stage_name,
    [1, 2, 4, 8] AS bit,
    [ingest_ms, queue_ms, process_ms, e2e_ms] AS corrected,
    [ingest_naive_ms, queue_naive_ms, process_naive_ms, e2e_naive_ms] AS naive
GROUP BY minute, topic, consumer_group, host, stage;

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
    sumState(toUInt64(replay_class = 'redelivery')) AS redelivery
FROM latency_events
ARRAY JOIN
    ['ingest', 'queue', 'process', 'e2e'] AS stage_name,
    [1, 2, 4, 8] AS bit,
    [ingest_ms, queue_ms, process_ms, e2e_ms] AS corrected,
    [ingest_naive_ms, queue_naive_ms, process_naive_ms, e2e_naive_ms] AS naive
GROUP BY hour, topic, consumer_group, host, stage;

-- A clock-offset estimate is an interval, [lower_ms, upper_ms], and a causal envelope bounds one side only: its open
-- side is +inf or -inf, so no surface can read the envelope's own small uncertainty as a precision around the truth.
-- estimate_ms is the point estimate a reader should plot: the midpoint of a two-sided interval, or, for a one-sided
-- envelope where the probe path measured this network's minimum one-way delay (min_delay_ms, half the narrowest probe
-- round trip), the bound moved by it toward the open side (documented as an estimate, never a bound). Rows written
-- before carry their ± interval and no estimate of their own.
ALTER TABLE clock_offsets {{addColumn}} lower_ms Float64 DEFAULT offset_ms - uncertainty_ms;

ALTER TABLE clock_offsets {{addColumn}} upper_ms Float64 DEFAULT offset_ms + uncertainty_ms;

ALTER TABLE clock_offsets {{addColumn}} estimate_ms Float64 DEFAULT offset_ms;

ALTER TABLE clock_offsets {{addColumn}} min_delay_ms Float64 DEFAULT 0;
