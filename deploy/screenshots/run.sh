#!/usr/bin/env bash
# make screenshots: pictures of the shipped dashboards (dashboards/*.json) drawn from real data.
#
# 1. uses the running local stack (make screenshots starts it with deploy/local/stack.sh with);
# 2. runs `tidemark run` (probe, receipts, lag exporter) into a fresh database and cmd/loadgen (producers with skewed
#    clocks, a consumer group of two hosts) for SHOTS_SECONDS; when the load lasts longer than SHOTS_RESET_AT (55 s)
#    the group is reset to earliest then, as in the demo: the lag it causes drains before the load ends;
#    a real Prometheus (deploy/local/prometheus.sh: Debian's package, the shipped rules) scrapes that `tidemark run`
#    every 5 s for the whole load, in a state directory of its own under the work directory;
# 3. cmd/dashboard-frames starts the plugin's backend binary (gpx_tidemark) as Grafana does (go-plugin, gRPC),
#    resolves the dashboards' variables through its resource handler and asks QueryData for every Tidemark panel,
#    and evaluates every Prometheus panel's expressions with that Prometheus's HTTP API (query_range over the run);
# 4. plugin/scripts/dashboards.mjs draws the frames with Grafana's own @grafana/ui and @grafana/data components in
#    headless Chromium (Debian's package, installed here when missing), writes one PNG per dashboard and a
#    manifest.json of what each panel drew, and fails when a panel drew nothing (unless the manifest says why).
#
# Usage: run.sh [OUTDIR]   (default docs/screenshots). Env: SHOTS_SECONDS (default 40), SHOTS_RESET_AT (55s;
# 0 never), TIDEMARK_PROMETHEUS_PORT (19090; must be free), the stack's env;
# SHOTS_KEEP=1 keeps the work directory (frames.json, logs) and the database.
# No Grafana server is involved. The database is dropped at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${1:-$ROOT/docs/screenshots}
SHOTS_SECONDS=${SHOTS_SECONDS:-40}
source deploy/local/lib.sh

: "${TIDEMARK_KAFKA_BROKERS:?the local stack is not running: use make screenshots, or eval \"\$(bash deploy/local/stack.sh up)\"}"
: "${TIDEMARK_CLICKHOUSE_ADDR:?the local stack is not running (no TIDEMARK_CLICKHOUSE_ADDR)}"
apt_install chromium
CH_HOST=${TIDEMARK_CLICKHOUSE_ADDR%:*}
CH_PORT=${TIDEMARK_CLICKHOUSE_ADDR##*:}

WORK=$(mktemp -d /tmp/tidemark-shots.XXXXXX)
RUN=$(date +%s)$$
DB=tidemark_shots_$RUN
TOPIC=shots-orders-$RUN
RECEIPTS=shots-receipts-$RUN
GROUP=shots-app-$RUN
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ch() { clickhouse-client --host "$CH_HOST" --port "$CH_PORT" "$@"; }

PIDS=()
SCRAPE=5s
# our own Prometheus: its state (config, TSDB, pid) under $WORK, so a demo's Prometheus is neither reused nor stopped
prom() { TIDEMARK_STATE_DIR="$WORK/state" bash deploy/local/prometheus.sh "$@"; }
cleanup() {
  prom stop >/dev/null 2>&1 || true
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ -n ${SHOTS_KEEP:-} ]]; then
    log "kept $WORK and the database $DB"
  else
    ch --query "DROP DATABASE IF EXISTS $DB" 2>/dev/null || true
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

go build -o "$WORK/tidemark" ./cmd/tidemark
go build -o "$WORK/loadgen" ./cmd/loadgen
go build -o "$WORK/dashboard-frames" ./cmd/dashboard-frames
CGO_ENABLED=0 go build -o "$WORK/gpx_tidemark" ./plugin/pkg
(cd plugin && source ./npm-deps.sh && npm_deps)

IFS=, read -r -a BROKER_LIST <<<"$TIDEMARK_KAFKA_BROKERS"
cat >"$WORK/tidemark.yaml" <<YAML
kafka:
  brokers: [$(IFS=,; echo "${BROKER_LIST[*]}")]
clickhouse:
  addr: [$TIDEMARK_CLICKHOUSE_ADDR]
  database: $DB
  writer:
    flush_interval: 500ms
collector:
  dead_letter_topic: shots-dlq-$RUN
  replay_state_topic: shots-replay-state-$RUN
  clock_offset_interval: 5s
  receipts: {enabled: true, topic: $RECEIPTS, group: tidemark-receipts-$RUN}
  probe: {enabled: true, topic: tidemark-probe-$RUN, group: tidemark-probe-$RUN, interval: 500ms}
lag:
  poll_interval: 2s
  group_allow: ["shots-app-$RUN"]
http:
  listen: 127.0.0.1:$PORT
YAML

prom start --scrape "127.0.0.1:$PORT" --interval "$SCRAPE"
PROM_URL=http://127.0.0.1:${TIDEMARK_PROMETHEUS_PORT:-19090}
FROM=$(date -u +%Y-%m-%dT%H:%M:%SZ)
"$WORK/tidemark" run --config "$WORK/tidemark.yaml" >"$WORK/tidemark.log" 2>&1 &
TM_PID=$!
PIDS+=("$TM_PID")
if ! wait_until 60 "tidemark run" curl -fs "http://127.0.0.1:$PORT/readyz"; then tail -20 "$WORK/tidemark.log" >&2; exit 1; fi

log "load for ${SHOTS_SECONDS}s into $DB"
"$WORK/loadgen" --brokers "$TIDEMARK_KAFKA_BROKERS" --topic "$TOPIC" --receipts-topic "$RECEIPTS" --group "$GROUP" \
  --duration "${SHOTS_SECONDS}s" --reset-at "${SHOTS_RESET_AT:-55s}" --rate 100 \
  --producer p-ahead:+2500ms --producer p-behind:-800ms --producer p-exact:0 \
  --consumer c-behind:-300ms:4ms --consumer c-ahead:+150ms:6ms:sync \
  --timesync "http://127.0.0.1:$PORT/v1/timesync" --injected "$WORK/injected.tsv" 2>"$WORK/loadgen.log" ||
  { tail -20 "$WORK/loadgen.log" >&2; exit 1; }
sleep 6 # one more lag poll, writer flush and scrape after the last record
kill -TERM "$TM_PID"
wait "$TM_PID" || { tail -20 "$WORK/tidemark.log" >&2; exit 1; }
PIDS=()
TO=$(date -u +%Y-%m-%dT%H:%M:%SZ)

"$WORK/dashboard-frames" -plugin "$WORK/gpx_tidemark" -clickhouse "$TIDEMARK_CLICKHOUSE_ADDR" -database "$DB" \
  -group "$GROUP" -from "$FROM" -to "$TO" -prometheus "$PROM_URL" -scrape-interval "$SCRAPE" \
  -out "$WORK/frames.json" dashboards/*.json
prom stop
mkdir -p "$OUT"
node plugin/scripts/dashboards.mjs "$WORK/frames.json" "$OUT"
