#!/usr/bin/env bash
# The demo's terminal report, read back from ClickHouse (database tidemark_demo).
# Usage: report.sh INJECTED_TSV [GROUP [JAVA_GROUP]]   (INJECTED_TSV: host<TAB>injected clock offset in ms, from
# loadgen; GROUP: the instrumented sarama consumers' group; JAVA_GROUP: the Java application's, from its agent's spans)
set -euo pipefail
INJECTED=${1:?usage: report.sh INJECTED_TSV [GROUP]}
GROUP=${2:-}
JAVA_GROUP=${3:-}
RUN=${GROUP##*-} # the demo's run id: the lag exporter also sees groups of earlier demo runs
CH_HOST=${TIDEMARK_CLICKHOUSE_ADDR%:*}
CH_PORT=${TIDEMARK_CLICKHOUSE_ADDR##*:}
ch() { clickhouse-client --host "$CH_HOST" --port "$CH_PORT" --database tidemark_demo --max_execution_time 60 "$@"; }
title() { printf '\n\033[1m%s\033[0m\n' "$*"; }

names=() vals=()
while IFS=$'\t' read -r h ms; do
  [ -n "$h" ] || continue
  names+=("'$h'")
  vals+=("toFloat64($ms)")
done <"$INJECTED"
NAMES=$(IFS=,; echo "${names[*]}")
VALS=$(IFS=,; echo "${vals[*]}")

# Warm-up: the first 30 s after the collector's first probe, while no clock has a drift fit yet (docs/latency.md,
# "What is excluded from live percentiles"); steady state is the rest. Records are placed by their append time.
WARM_END=$(ch --query "SELECT min(send_ts_ms) + 30000 FROM probe_events")
title "Stages of live processings reported by instrumented consumers (ms): naive (raw clocks) vs corrected"
echo "flagged: stages kept out of percentiles; _warm/_steady: their share of the present stages of records appended in"
echo "the first 30 s after the collector started (warm-up) and after it (steady state)."
ch --format PrettyCompactMonoBlock --query "
SELECT stage,
       countIf(has_naive) AS naive_n,
       if(countIf(has_naive) = 0, '-', toString(round(quantileExactIf(0.5)(naive, has_naive)))) AS naive_p50,
       if(countIf(has_naive) = 0, '-', toString(round(quantileExactIf(0.99)(naive, has_naive)))) AS naive_p99,
       countIf(naive < 0 AND has_naive) AS naive_negative,
       countIf(ok) AS corrected_n,
       if(countIf(ok) = 0, '-', toString(round(quantileExactIf(0.5)(corr, ok)))) AS corrected_p50,
       if(countIf(ok) = 0, '-', toString(round(quantileExactIf(0.99)(corr, ok)))) AS corrected_p99,
       countIf(corr < 0 AND ok) AS corrected_negative,
       count() - countIf(ok) AS flagged,
       round(countIf(NOT ok AND warm AND has_naive) / greatest(countIf(warm AND has_naive), 1), 3) AS flagged_warm,
       round(countIf(NOT ok AND NOT warm AND has_naive) / greatest(countIf(NOT warm AND has_naive), 1), 3) AS flagged_steady
FROM (
  SELECT append_ts_ms < $WARM_END AS warm, arrayJoin([
           ('1 ingest (produce>append)', ingest_naive_ms, ingest_ms, bitAnd(valid, 16) != 0, bitAnd(valid, 1) != 0),
           ('2 queue (append>receive)', queue_naive_ms, queue_ms, bitAnd(valid, 32) != 0, bitAnd(valid, 2) != 0),
           ('3 process (receive>done)', process_naive_ms, process_ms, bitAnd(valid, 64) != 0, bitAnd(valid, 4) != 0),
           ('4 end-to-end', e2e_naive_ms, e2e_ms, bitAnd(valid, 128) != 0, bitAnd(valid, 8) != 0)]) AS t,
         tupleElement(t, 1) AS stage, tupleElement(t, 2) AS naive, tupleElement(t, 3) AS corr,
         tupleElement(t, 4) AS has_naive, tupleElement(t, 5) AS ok
  FROM latency_events FINAL
  WHERE source = 'receipt' AND replay_class = 'live' AND consumer_group != '$JAVA_GROUP'
)
GROUP BY stage ORDER BY stage"

title "Stages with their error bars (ms): estimate [lower, upper] of each percentile"
echo "samples: live processings; kept: in the percentiles; each percentile's true value lies between the percentiles of the"
echo "samples' lower and upper ends (docs/latency.md, \"Bands\"); unbounded: kept samples whose upper end is unknown (inf)."
ch --format PrettyCompactMonoBlock --query "
SELECT stage, count() AS samples, countIf(ok) AS kept,
       if(countIf(ok) = 0, '-', concat(toString(round(quantileExactIf(0.5)(corr, ok))), ' [',
          toString(round(quantileExactIf(0.5)(lo, ok))), ', ', toString(round(quantileExactIf(0.5)(hi, ok))), ']')) AS p50,
       if(countIf(ok) = 0, '-', concat(toString(round(quantileExactIf(0.99)(corr, ok))), ' [',
          toString(round(quantileExactIf(0.99)(lo, ok))), ', ', toString(round(quantileExactIf(0.99)(hi, ok))), ']')) AS p99,
       countIf(ok AND NOT isFinite(hi)) AS unbounded
FROM (
  SELECT arrayJoin([
           ('1 ingest (produce>append)', ingest_ms, ingest_lo_ms, ingest_hi_ms, bitAnd(valid, 1) != 0),
           ('2 queue (append>receive)', queue_ms, queue_lo_ms, queue_hi_ms, bitAnd(valid, 2) != 0),
           ('3 process (receive>done)', process_ms, process_lo_ms, process_hi_ms, bitAnd(valid, 4) != 0),
           ('4 end-to-end', e2e_ms, e2e_lo_ms, e2e_hi_ms, bitAnd(valid, 8) != 0)]) AS t,
         tupleElement(t, 1) AS stage, toFloat64(tupleElement(t, 2)) AS corr, tupleElement(t, 3) AS lo,
         tupleElement(t, 4) AS hi, tupleElement(t, 5) AS ok
  FROM latency_events FINAL
  WHERE source = 'receipt' AND replay_class = 'live' AND consumer_group != '$JAVA_GROUP'
)
GROUP BY stage ORDER BY stage"

if [ -n "$JAVA_GROUP" ]; then
  title "A Java application under the OpenTelemetry agent, no Tidemark code (spans path; its clock 1200 ms behind)"
  echo "Stages from the agent's producer span (send, acknowledgement) and per-record process span (receive, processed),"
  echo "the append read by offset (LogAppendTime); estimate [lower, upper] of each percentile, as above."
  ch --format PrettyCompactMonoBlock --query "
SELECT stage, count() AS samples, countIf(ok) AS kept,
       countIf(has_naive) AS naive_n, countIf(naive < 0 AND has_naive) AS naive_negative,
       countIf(corr < 0 AND ok) AS corrected_negative,
       if(countIf(ok) = 0, '-', concat(toString(round(quantileExactIf(0.5)(corr, ok))), ' [',
          toString(round(quantileExactIf(0.5)(lo, ok))), ', ', toString(round(quantileExactIf(0.5)(hi, ok))), ']')) AS p50,
       if(countIf(ok) = 0, '-', concat(toString(round(quantileExactIf(0.99)(corr, ok))), ' [',
          toString(round(quantileExactIf(0.99)(lo, ok))), ', ', toString(round(quantileExactIf(0.99)(hi, ok))), ']')) AS p99
FROM (
  SELECT arrayJoin([
           ('1 ingest (produce>append)', ingest_naive_ms, ingest_ms, ingest_lo_ms, ingest_hi_ms, bitAnd(valid, 16) != 0, bitAnd(valid, 1) != 0),
           ('2 queue (append>receive)', queue_naive_ms, queue_ms, queue_lo_ms, queue_hi_ms, bitAnd(valid, 32) != 0, bitAnd(valid, 2) != 0),
           ('3 process (receive>done)', process_naive_ms, process_ms, process_lo_ms, process_hi_ms, bitAnd(valid, 64) != 0, bitAnd(valid, 4) != 0),
           ('4 end-to-end', e2e_naive_ms, e2e_ms, e2e_lo_ms, e2e_hi_ms, bitAnd(valid, 128) != 0, bitAnd(valid, 8) != 0)]) AS t,
         tupleElement(t, 1) AS stage, tupleElement(t, 2) AS naive, toFloat64(tupleElement(t, 3)) AS corr,
         tupleElement(t, 4) AS lo, tupleElement(t, 5) AS hi, tupleElement(t, 6) AS has_naive, tupleElement(t, 7) AS ok
  FROM latency_events FINAL
  WHERE consumer_group = '$JAVA_GROUP' AND replay_class = 'live'
)
GROUP BY stage ORDER BY stage"
fi

title "Per host: ingest by producer, processing by consumer (ms, p50); the injected processing delays are 4 and 6 ms"
ch --format PrettyCompactMonoBlock --query "
SELECT 'producer' AS role, producer_host AS host, count() AS rows,
       if(countIf(bitAnd(valid, 16) != 0) = 0, '-', toString(round(quantileExactIf(0.5)(ingest_naive_ms, bitAnd(valid, 16) != 0)))) AS naive_p50,
       countIf(bitAnd(valid, 1) != 0) AS corrected_n,
       if(countIf(bitAnd(valid, 1) != 0) = 0, '-', toString(round(quantileExactIf(0.5)(ingest_ms, bitAnd(valid, 1) != 0)))) AS corrected_p50
FROM latency_events FINAL WHERE replay_class = 'live' AND producer_host != '' GROUP BY producer_host
UNION ALL
SELECT 'consumer' AS role, consumer_host AS host, count() AS rows,
       if(countIf(bitAnd(valid, 64) != 0) = 0, '-', toString(round(quantileExactIf(0.5)(process_naive_ms, bitAnd(valid, 64) != 0)))) AS naive_p50,
       countIf(bitAnd(valid, 4) != 0) AS corrected_n,
       if(countIf(bitAnd(valid, 4) != 0) = 0, '-', toString(round(quantileExactIf(0.5)(process_ms, bitAnd(valid, 4) != 0)))) AS corrected_p50
FROM latency_events FINAL WHERE replay_class = 'live' AND source = 'receipt' GROUP BY consumer_host
ORDER BY role DESC, host"

title "Ingest by producer, warm-up vs steady state: why samples are kept out of percentiles (flags of the untrusted)"
ch --format PrettyCompactMonoBlock --query "
SELECT producer_host AS host, if(append_ts_ms < $WARM_END, '1 warm-up', '2 steady') AS phase, count() AS samples,
       round(countIf(bitAnd(valid, 1) = 0) / count(), 3) AS flagged_share,
       countIf(bitAnd(valid, 1) = 0 AND bitAnd(flags, 64) != 0) AS unsettled,
       countIf(bitAnd(valid, 1) = 0 AND bitAnd(flags, 2) != 0) AS skew_suspected,
       countIf(bitAnd(valid, 1) = 0 AND bitAnd(flags, 128) != 0) AS projected,
       countIf(bitAnd(valid, 1) = 0 AND bitAnd(flags, 4) != 0) AS offset_unknown
FROM latency_events FINAL
WHERE replay_class = 'live' AND source = 'receipt' AND producer_host != '' AND bitAnd(valid, 16) != 0
GROUP BY host, phase ORDER BY host, phase"

title "Clock offsets: Tidemark's interval and estimate vs the injected truth (ms; host clock - collector clock)"
echo "A probe bracket or a time sync bounds a clock from both sides; a causal envelope from one side only (the other is"
echo "inf): its estimate adds the probe path's minimum one-way delay toward the open side, an estimate, not a bound."
ch --format PrettyCompactMonoBlock --query "
SELECT host, kind, round(lo, 1) AS lower_ms, round(hi, 1) AS upper_ms, round(est, 1) AS estimate_ms, injected_ms,
       round(est - injected_ms, 1) AS estimate_error_ms,
       if(isNaN(injected_ms), '-', if(injected_ms >= lo AND injected_ms <= hi, 'yes', 'NO')) AS truth_in_interval
FROM (
  SELECT host, argMax(kind, at_ms) AS kind, argMax(lower_ms, at_ms) AS lo, argMax(upper_ms, at_ms) AS hi,
         argMax(estimate_ms, at_ms) AS est,
         if(startsWith(host, 'broker-'), 0., transform(host, [$NAMES], [$VALS], nan)) AS injected_ms
  FROM clock_offsets GROUP BY host
) ORDER BY host"

title "Live vs replayed processings (the group was reset to earliest halfway)"
ch --format PrettyCompactMonoBlock --query "
SELECT consumer_group, source, replay_class, count() AS processings,
       if(countIf(bitAnd(valid, 8) != 0) = 0, '-', toString(round(quantileExactIf(0.5)(e2e_ms, bitAnd(valid, 8) != 0)))) AS e2e_p50_ms
FROM latency_events FINAL GROUP BY consumer_group, source, replay_class ORDER BY consumer_group, source, replay_class"

title "Uninstrumented group (kcat): processing bounded by its commits (ms; upper bounds, never in percentiles)"
ch --format PrettyCompactMonoBlock --query "
SELECT consumer_group, count() AS rows, round(quantileExact(0.5)(e2e_ms)) AS e2e_bound_p50,
       round(quantileExact(0.99)(e2e_ms)) AS e2e_bound_p99, countIf(bitAnd(flags, 16) != 0) AS commit_bounded
FROM latency_events FINAL WHERE source = 'tap' AND consumer_group LIKE 'demo-legacy-%' GROUP BY consumer_group"

title "Probes per broker (loss, duplicates, corrected ingest/delivery, round trip; ms)"
ch --format PrettyCompactMonoBlock --query "
SELECT broker_id, countIf(status = 'ok') AS received, countIf(status = 'lost') AS lost,
       round(100 * countIf(status = 'lost') / count(), 2) AS loss_pct, sum(duplicates) AS duplicates,
       if(countIf(status = 'ok') = 0, '-', toString(round(quantileExactIf(0.5)(ingest_ms, status = 'ok')))) AS ingest_p50, if(countIf(status = 'ok') = 0, '-', toString(round(quantileExactIf(0.5)(delivery_ms, status = 'ok')))) AS delivery_p50,
       round(quantileExact(0.5)(rtt_ms)) AS rtt_p50, round(quantileExact(0.99)(rtt_ms)) AS rtt_p99
FROM probe_events FINAL GROUP BY broker_id ORDER BY broker_id"

title "Lag per group (lag exporter snapshots)"
ch --format PrettyCompactMonoBlock --query "
SELECT consumer_group, argMax(lag_sum, at_ms) AS lag_now, max(lag_sum) AS max_lag, round(max(tl) / 1000, 1) AS max_time_lag_s,
       groupUniqArray(toString(status)) AS statuses_seen, count() AS snapshots
FROM (SELECT consumer_group, at_ms, sum(lag) AS lag_sum, max(time_lag_ms) AS tl, any(status) AS status
      FROM lag_snapshots FINAL WHERE endsWith(consumer_group, '-$RUN') GROUP BY consumer_group, at_ms)
GROUP BY consumer_group ORDER BY consumer_group"
