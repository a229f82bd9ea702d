-- 0008_stage_bounds: every corrected stage keeps the interval that holds its true value, so percentiles and SLO
-- compliance are reported with their error bars (docs/latency.md, "Bands: percentiles and SLOs with error bars").
-- Raw rows get each stage's lower and upper end in ms on the reference clock (latency.Result.StageBounds, widened to
-- hold the stored estimate). An end the correction cannot bound is +inf (an unknown clock offset); rows stored before
-- this migration read as [0, +inf): their bound was not kept, so they count as unbounded, never as exact.
-- The rollups get t-digest states of the lower and of the upper ends beside the estimate's (same samples: live,
-- stage valid) and a count of the samples whose upper end is unbounded. A t-digest cannot hold +inf (its quantiles
-- turn NaN), so an unbounded upper end enters the upper state as 1e30 ms; a read reports any upper quantile at or
-- above 1e15 ms (31,700 years) as +inf. The views are redefined (dropped and created again, as 0004 and 0006 did:
-- blocks inserted in between are not in the rollups; Store.RebuildRollup(day) makes a day exact again); rollup rows
-- written before have empty lower/upper states and count no unbounded samples.
ALTER TABLE latency_events {{addColumn}} ingest_lo_ms Float64 DEFAULT 0;

ALTER TABLE latency_events {{addColumn}} ingest_hi_ms Float64 DEFAULT inf;

ALTER TABLE latency_events {{addColumn}} queue_lo_ms Float64 DEFAULT 0;

ALTER TABLE latency_events {{addColumn}} queue_hi_ms Float64 DEFAULT inf;

ALTER TABLE latency_events {{addColumn}} process_lo_ms Float64 DEFAULT 0;

ALTER TABLE latency_events {{addColumn}} process_hi_ms Float64 DEFAULT inf;

ALTER TABLE latency_events {{addColumn}} e2e_lo_ms Float64 DEFAULT 0;

ALTER TABLE latency_events {{addColumn}} e2e_hi_ms Float64 DEFAULT inf;

ALTER TABLE latency_1m {{addColumn}} lower_ms AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99, 0.999), Float64);

ALTER TABLE latency_1m {{addColumn}} upper_ms AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99, 0.999), Float64);

ALTER TABLE latency_1m {{addColumn}} unbounded AggregateFunction(sum, UInt64);

ALTER TABLE latency_1h {{addColumn}} lower_ms AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99, 0.999), Float64);

ALTER TABLE latency_1h {{addColumn}} upper_ms AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99, 0.999), Float64);

ALTER TABLE latency_1h {{addColumn}} unbounded AggregateFunction(sum, UInt64);

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
    cluster,
    quantilesTDigestStateIf(0.5, 0.9, 0.99, 0.999)(lo, replay_class = 'live' AND bitAnd(valid, bit) != 0) AS lower_ms,
    quantilesTDigestStateIf(0.5, 0.9, 0.99, 0.999)(if(isFinite(hi), hi, 1e30), replay_class = 'live' AND bitAnd(valid, bit) != 0) AS upper_ms,
    sumState(toUInt64(replay_class = 'live' AND bitAnd(valid, bit) != 0 AND NOT isFinite(hi))) AS unbounded
FROM latency_events
ARRAY JOIN
    ['ingest', 'queue', 'process', 'e2e'] AS stage_name,
    [1, 2, 4, 8] AS bit,
    [ingest_ms, queue_ms, process_ms, e2e_ms] AS corrected,
    [ingest_naive_ms, queue_naive_ms, process_naive_ms, e2e_naive_ms] AS naive,
    [ingest_lo_ms, queue_lo_ms, process_lo_ms, e2e_lo_ms] AS lo,
    [ingest_hi_ms, queue_hi_ms, process_hi_ms, e2e_hi_ms] AS hi
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
    cluster,
    quantilesTDigestStateIf(0.5, 0.9, 0.99, 0.999)(lo, replay_class = 'live' AND bitAnd(valid, bit) != 0) AS lower_ms,
    quantilesTDigestStateIf(0.5, 0.9, 0.99, 0.999)(if(isFinite(hi), hi, 1e30), replay_class = 'live' AND bitAnd(valid, bit) != 0) AS upper_ms,
    sumState(toUInt64(replay_class = 'live' AND bitAnd(valid, bit) != 0 AND NOT isFinite(hi))) AS unbounded
FROM latency_events
ARRAY JOIN
    ['ingest', 'queue', 'process', 'e2e'] AS stage_name,
    [1, 2, 4, 8] AS bit,
    [ingest_ms, queue_ms, process_ms, e2e_ms] AS corrected,
    [ingest_naive_ms, queue_naive_ms, process_naive_ms, e2e_naive_ms] AS naive,
    [ingest_lo_ms, queue_lo_ms, process_lo_ms, e2e_lo_ms] AS lo,
    [ingest_hi_ms, queue_hi_ms, process_hi_ms, e2e_hi_ms] AS hi
GROUP BY hour, topic, consumer_group, host, stage, cluster;
