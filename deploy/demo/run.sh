#!/usr/bin/env bash
# make demo: Tidemark measuring real Kafka traffic between hosts whose clocks disagree, through a replay.
#
# 1. starts (or reuses) the local stack: 3 Kafka brokers, ClickHouse and Jaeger (deploy/local/stack.sh);
# 2. runs `tidemark run` (probe, receipts and tap paths, lag exporter) into the database tidemark_demo, exporting its
#    hop spans (ingest, queue wait) to Jaeger over OTLP;
# 3. runs cmd/loadgen: producer hosts with clocks +2500 ms, -800 ms and exact, a consumer group of two hosts
#    (-300 ms with 4 ms processing, +150 ms with 6 ms processing and time sync), reset to earliest halfway;
#    plus one external producer, kcat under faketime (+1500 ms), into a CreateTime topic the tap reads, and one
#    uninstrumented consumer group (kcat -G) whose processing is bounded by its commits; every loadgen host exports
#    its own send/process spans to Jaeger, as a traced application would;
#    plus a plain Java application (kafka-clients, no Tidemark code; deploy/local/otel-app) under the OpenTelemetry
#    Java agent with its clock 1200 ms behind (libfaketime), into a LogAppendTime topic, exporting its spans over
#    OTLP/HTTP to an OpenTelemetry Collector (Jaeger's binary with a config of its own) whose Kafka exporter writes
#    them into Tidemark's spans topic and which forwards them to Jaeger;
# 4. prints a report read back from ClickHouse (deploy/demo/report.sh) and two traces, one slow live message of the
#    sarama group and one message of the Java application: `trace: <trace id> <Jaeger UI URL>`, each checked in
#    Jaeger's API to hold the application's send and process spans and Tidemark's ingest and queue-wait spans.
# Environment: DEMO_SECONDS (default 110) is how long the load runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DEMO_SECONDS=${DEMO_SECONDS:-110}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "starting the local stack (3 brokers, ClickHouse, Jaeger)"
# Assigned first, then evaluated: `eval "$(...)"` would carry on after a failed start (eval's status is that of the
# evaluated text, not of the command that printed it).
STACK_ENV=$(bash deploy/local/stack.sh up --brokers 3 --jaeger)
eval "$STACK_ENV"
: "${TIDEMARK_KAFKA_BROKERS:?stack.sh did not export TIDEMARK_KAFKA_BROKERS}"
: "${TIDEMARK_CLICKHOUSE_ADDR:?stack.sh did not export TIDEMARK_CLICKHOUSE_ADDR}"
: "${TIDEMARK_JAEGER_QUERY:?stack.sh did not export TIDEMARK_JAEGER_QUERY}"
export TIDEMARK_KAFKA_BROKERS TIDEMARK_CLICKHOUSE_ADDR
CH_HOST=${TIDEMARK_CLICKHOUSE_ADDR%:*}
CH_PORT=${TIDEMARK_CLICKHOUSE_ADDR##*:}
ch() { clickhouse-client --host "$CH_HOST" --port "$CH_PORT" --database tidemark_demo "$@"; }

WORK=$(mktemp -d /tmp/tidemark-demo.XXXXXX)
RUN=$(date +%s)
TOPIC=demo-orders-$RUN
EXT=demo-ext-$RUN
RECEIPTS=demo-receipts-$RUN
GROUP=demo-app-$RUN
JAVA_TOPIC=demo-java-$RUN
JAVA_GROUP=demo-java-app-$RUN
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT=$(freeport)
OTELCOL_PORT=$(freeport)
: "${TIDEMARK_OTELCOL_BIN:?stack.sh did not export TIDEMARK_OTELCOL_BIN (the OpenTelemetry Collector: the Jaeger binary)}"
: "${TIDEMARK_OTEL_APP_CP:?stack.sh did not export TIDEMARK_OTEL_APP_CP}"
: "${TIDEMARK_OTEL_JAVAAGENT:?stack.sh did not export TIDEMARK_OTEL_JAVAAGENT}"
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
[ -f "$FAKETIME_LIB" ] || { echo "libfaketime missing ($FAKETIME_LIB): stack.sh installs Debian's faketime" >&2; exit 1; }

say "building tidemark and loadgen"
go build -o "$WORK/tidemark" ./cmd/tidemark
go build -o "$WORK/loadgen" ./cmd/loadgen

clickhouse-client --host "$CH_HOST" --port "$CH_PORT" --query "DROP DATABASE IF EXISTS tidemark_demo"
IFS=, read -r -a BROKER_LIST <<<"$TIDEMARK_KAFKA_BROKERS"
cat >"$WORK/tidemark.yaml" <<YAML
kafka:
  brokers: [$(IFS=,; echo "${BROKER_LIST[*]}")]
clickhouse:
  addr: [$TIDEMARK_CLICKHOUSE_ADDR]
  database: tidemark_demo
  writer:
    flush_interval: 500ms
collector:
  dead_letter_topic: demo-dlq-$RUN
  replay_state_topic: demo-replay-state-$RUN
  clock_offset_interval: 5s
  receipts: {enabled: true, topic: $RECEIPTS, group: tidemark-receipts-$RUN}
  probe: {enabled: true, topic: tidemark-probe-$RUN, group: tidemark-probe-$RUN, interval: 500ms}
  tap: {enabled: true, topics: [$EXT], group: tidemark-tap-$RUN, from_beginning: true}
  # the Java agent's spans, written into this topic by the OpenTelemetry Collector's Kafka exporter (below)
  spans: {enabled: true, topic: demo-spans-$RUN, group: tidemark-spans-$RUN, partitions: 3}
  # hop spans for 10 % of traces, and for every live message slower than the 500 ms SLO
  traces: {sample_ratio: 0.1}
tracing:
  enabled: true
  protocol: grpc
  endpoint: $TIDEMARK_JAEGER_OTLP_GRPC
  service_name: tidemark
lag:
  poll_interval: 5s
  group_allow: ["demo-.*"]
http:
  listen: 127.0.0.1:$PORT
YAML

PIDS=()
# stop_all: TERM every process this script started that is still running, then reap them. The kcat consumer never
# ends by itself, so a bare `wait` would block forever.
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
cleanup() { stop_all; }
trap cleanup EXIT

say "starting tidemark run (logs: $WORK/tidemark.log, metrics: http://127.0.0.1:$PORT/metrics)"
"$WORK/tidemark" run --config "$WORK/tidemark.yaml" >"$WORK/tidemark.log" 2>&1 &
TM_PID=$!
PIDS+=("$TM_PID")
for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
  kill -0 "$TM_PID" 2>/dev/null || { tail -20 "$WORK/tidemark.log"; exit 1; }
  sleep 0.2
done

# The OpenTelemetry Collector in front of the spans topic, as a user would run it: the agent exports OTLP/HTTP to it,
# its Kafka exporter writes the spans into Tidemark's spans topic (otlp_proto, keyed by trace id), and it forwards them
# to Jaeger too, where Tidemark's hop spans join them in one trace.
cat >"$WORK/otelcol.yaml" <<YAML
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [kafka, otlp/jaeger]
  telemetry:
    metrics: {level: none}
    logs: {level: warn}
receivers:
  otlp:
    protocols:
      http: {endpoint: "127.0.0.1:$OTELCOL_PORT"}
processors:
  batch: {timeout: 200ms}
exporters:
  kafka:
    brokers: [$(IFS=,; echo "${BROKER_LIST[*]}")]
    partition_traces_by_id: true
    traces: {topic: demo-spans-$RUN, encoding: otlp_proto}
  otlp/jaeger:
    endpoint: $TIDEMARK_JAEGER_OTLP_GRPC
    tls: {insecure: true}
YAML
"$TIDEMARK_OTELCOL_BIN" --config "$WORK/otelcol.yaml" >"$WORK/otelcol.log" 2>&1 &
PIDS+=("$!")

say "running the load for ${DEMO_SECONDS}s (reset to earliest at $((DEMO_SECONDS / 2))s)"
"$WORK/loadgen" --brokers "$TIDEMARK_KAFKA_BROKERS" --topic "$TOPIC" --receipts-topic "$RECEIPTS" --group "$GROUP" \
  --extra-topics "$EXT" --duration "${DEMO_SECONDS}s" --reset-at "$((DEMO_SECONDS / 2))s" --rate 100 \
  --producer p-ahead:+2500ms --producer p-behind:-800ms --producer p-exact:0 \
  --consumer c-behind:-300ms:4ms --consumer c-ahead:+150ms:6ms:sync \
  --timesync "http://127.0.0.1:$PORT/v1/timesync" --injected "$WORK/injected.tsv" \
  --otlp "$TIDEMARK_JAEGER_OTLP_HTTP" 2>"$WORK/loadgen.log" &
LG_PID=$!
PIDS+=("$LG_PID")
printf "producer@%s\t1500\n" "$EXT" >"$WORK/injected.kcat.tsv"

# The external producer: kcat with a clock 1.5 s ahead (libfaketime), 20 records/s into the CreateTime topic.
sleep 3
(
  i=0
  end=$((SECONDS + DEMO_SECONDS - 5))
  while [ $SECONDS -lt $end ]; do
    i=$((i + 1))
    echo "ext-$i:{\"n\":$i}"
    sleep 0.05
  done
) | FAKETIME_DONT_FAKE_MONOTONIC=1 faketime -f '+1.5s' kcat -P -b "$TIDEMARK_KAFKA_BROKERS" -t "$EXT" -K: 2>"$WORK/kcat.log" &
PIDS+=("$!")

# The Java application under the OpenTelemetry agent, its wall clock 1.2 s behind (libfaketime; the JVM's monotonic
# clock stays real), into a LogAppendTime topic: the agent records no append time, Tidemark reads it by offset.
# It starts once the probes have had time to bracket the brokers, which its producer spans are bracketed against.
java -cp "$TIDEMARK_KAFKA_LIB/*" org.apache.kafka.tools.TopicCommand --bootstrap-server "$TIDEMARK_KAFKA_BROKERS" \
  --create --if-not-exists --topic "$JAVA_TOPIC" --partitions 3 --replication-factor 3 \
  --config message.timestamp.type=LogAppendTime >"$WORK/java-app.log" 2>&1
printf "java-otel-app\t-1200\n" >>"$WORK/injected.kcat.tsv"
(
  sleep 20
  LD_PRELOAD="$FAKETIME_LIB" FAKETIME=-1.2s FAKETIME_DONT_FAKE_MONOTONIC=1 FAKETIME_FORCE_MONOTONIC_FIX=0 \
    timeout 300 java -javaagent:"$TIDEMARK_OTEL_JAVAAGENT" -Dotel.service.name=java-otel-app \
    -Dotel.resource.attributes=host.name=java-otel-app -Dotel.traces.exporter=otlp -Dotel.metrics.exporter=none \
    -Dotel.logs.exporter=none -Dotel.exporter.otlp.protocol=http/protobuf \
    -Dotel.exporter.otlp.traces.endpoint="http://127.0.0.1:$OTELCOL_PORT/v1/traces" -Dotel.bsp.schedule.delay=200 \
    -Dotel.javaagent.logging=none -cp "$TIDEMARK_OTEL_APP_CP" dev.tidemark.otelapp.SpansApp \
    "$TIDEMARK_KAFKA_BROKERS" "$JAVA_TOPIC" "$JAVA_GROUP" 600 3
) >>"$WORK/java-app.log" 2>&1 &
JAVA_PID=$!
PIDS+=("$JAVA_PID")

# An uninstrumented consumer of the kcat topic: kcat's balanced consumer (it commits, sends no receipts), whose
# processing Tidemark can only bound by its commits.
kcat -b "$TIDEMARK_KAFKA_BROKERS" -G "demo-legacy-$RUN" -o beginning -q "$EXT" >/dev/null 2>>"$WORK/kcat.log" &
PIDS+=("$!")

START=$SECONDS
while kill -0 "$LG_PID" 2>/dev/null; do
  sleep 10
  rows=$(ch --query "SELECT count() FROM latency_events" 2>/dev/null || echo "?")
  probes=$(ch --query "SELECT count() FROM probe_events" 2>/dev/null || echo "?")
  printf 'tidemark %4ds  latency rows %8s  probe rows %6s\n' $((SECONDS - START)) "$rows" "$probes"
done
wait "$LG_PID" || { tail -20 "$WORK/loadgen.log"; exit 1; }
wait "$JAVA_PID" || { echo "the Java application failed:" >&2; tail -20 "$WORK/java-app.log" >&2; exit 1; }
sleep 5
say "stopping tidemark (consumers drain, the writer flushes)"
kill -TERM "$TM_PID"
wait "$TM_PID" || { tail -20 "$WORK/tidemark.log"; exit 1; }
stop_all # the kcat producer and the uninstrumented kcat consumer

cat "$WORK/injected.kcat.tsv" >>"$WORK/injected.tsv"
bash "$ROOT/deploy/demo/report.sh" "$WORK/injected.tsv" "$GROUP" "$JAVA_GROUP"

say "one slow live message, traced end to end (Jaeger: $TIDEMARK_JAEGER_QUERY)"
bash "$ROOT/deploy/demo/trace.sh" "$GROUP" "$TOPIC"
say "one message of the Java application (OpenTelemetry agent, no Tidemark code): the agent's spans and Tidemark's"
bash "$ROOT/deploy/demo/trace.sh" "$JAVA_GROUP" "$JAVA_TOPIC"
echo
echo "Files: $WORK (tidemark.yaml, tidemark.log, loadgen.log, java-app.log, otelcol.yaml, otelcol.log). Data: ClickHouse database tidemark_demo; traces in Jaeger"
echo "($TIDEMARK_JAEGER_QUERY, in memory until 'make down')."
echo "The local stack is still running so you can query the data (clickhouse-client --port $CH_PORT -d tidemark_demo);"
echo "'make down' stops it."
