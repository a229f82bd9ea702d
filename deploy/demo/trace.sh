#!/usr/bin/env bash
# The demo's trace: the slowest live message of GROUP on TOPIC whose trace Jaeger holds end to end, printed as
#   trace: <32-hex trace id> <Jaeger UI URL>
# A trace counts when Jaeger's API (/api/traces/<id>) returns the producer's send span, Tidemark's "ingest" and
# "queue wait" spans and the consumer's process span, from at least two services. The applications' spans are found
# by kind (producer, consumer) and destination, since SDKs name them differently: "send <topic>" (latency/instrument),
# "<topic> publish" (the OpenTelemetry Java agent).
# Candidates are what the plugin's slowest-messages panel lists (live rows whose stage the engine trusts, slowest
# first): by end-to-end latency, then, if none of those qualifies, by queue wait (a producer placed only by the causal
# envelope behind a loaded broker can have every ingest, hence every e2e, too uncertain for a percentile while its
# spans are still right within their stated uncertainty). Exit 1 if none of the 200 slowest of either qualifies.
# Usage: trace.sh GROUP TOPIC   (env: TIDEMARK_CLICKHOUSE_ADDR, TIDEMARK_JAEGER_QUERY)
set -euo pipefail
GROUP=${1:?usage: trace.sh GROUP TOPIC}
TOPIC=${2:?usage: trace.sh GROUP TOPIC}
: "${TIDEMARK_JAEGER_QUERY:?TIDEMARK_JAEGER_QUERY is not set (stack.sh up --jaeger)}"
CH_HOST=${TIDEMARK_CLICKHOUSE_ADDR%:*}
CH_PORT=${TIDEMARK_CLICKHOUSE_ADDR##*:}

# candidates BIT COLUMN: live receipt rows whose stage (valid bit BIT) is trusted, slowest first, one per offset.
candidates() {
  clickhouse-client --host "$CH_HOST" --port "$CH_PORT" --database tidemark_demo --max_execution_time 60 --query "
SELECT trace_id, $2, e2e_ms FROM latency_events FINAL
WHERE consumer_group = '$GROUP' AND topic = '$TOPIC' AND source = 'receipt' AND replay_class = 'live'
  AND bitAnd(valid, $1) != 0 AND length(trace_id) = 32
ORDER BY $2 DESC LIMIT 1 BY offset LIMIT 200" --format TSV
}

# complete TRACE_ID: prints the four spans and their services when Jaeger holds them all, from >= 2 services.
complete() {
  local body
  body=$(curl -fsS --max-time 5 "$TIDEMARK_JAEGER_QUERY/api/traces/$1" 2>/dev/null) || return 0
  TOPIC=$TOPIC python3 -c '
import json, os, sys
topic = os.environ["TOPIC"]
data = json.load(sys.stdin).get("data") or []
if not data:
    sys.exit(0)
tr = data[0]
ops = {s["operationName"]: tr["processes"][s["processID"]]["serviceName"] for s in tr["spans"]}
def kind(s):
    return next((t["value"] for t in s.get("tags", []) if t["key"] == "span.kind"), "")
# The applications spans by kind and destination, the hop spans by name.
names = {}
for s in tr["spans"]:
    k, op = kind(s), s["operationName"]
    if k in ("producer", "consumer") and topic in op.split():
        names.setdefault(k, op)
    elif op in ("ingest " + topic, "queue wait " + topic):
        names.setdefault(op, op)
got = [names.get(w) for w in ("producer", "ingest " + topic, "queue wait " + topic, "consumer")]
if all(got) and len({ops[w] for w in got}) >= 2:
    print(", ".join("%s (%s)" % (w, ops[w]) for w in got))
' <<<"$body"
}

for by in "8 e2e_ms end-to-end" "2 queue_ms queue-wait"; do
  read -r bit col label <<<"$by"
  while IFS=$'\t' read -r tid ms e2e; do
    [ -n "$tid" ] || continue
    verdict=$(complete "$tid")
    if [ -n "$verdict" ]; then
      echo "trace: $tid $TIDEMARK_JAEGER_QUERY/trace/$tid"
      echo "  among the slowest live messages by $label latency: $label ${ms} ms (e2e ${e2e} ms); spans: $verdict"
      echo "  API: curl -s $TIDEMARK_JAEGER_QUERY/api/traces/$tid"
      exit 0
    fi
  done < <(candidates "$bit" "$col")
done
echo "error: none of the slowest live messages of $GROUP has a complete trace in Jaeger ($TIDEMARK_JAEGER_QUERY)" >&2
exit 1
