#!/usr/bin/env bash
# Real Jaeger (v2, the OpenTelemetry-collector based binary) as the trace backend of tests and the demo, started
# only when asked (like Prometheus). Built from the Go module proxy once per version and cached outside the repo.
#
#   jaeger.sh install   go mod download + go build of github.com/jaegertracing/jaeger/cmd/jaeger into the cache
#   jaeger.sh start     start it on loopback with an in-memory store: OTLP in (gRPC and HTTP), query API and UI out
#   jaeger.sh stop      stop it (TERM, bounded wait, then KILL: Jaeger can take longer than 4 s to exit on TERM)
#   jaeger.sh env       print export lines while it runs (TIDEMARK_OTELCOL_BIN: the same binary, run as a plain
#                       OpenTelemetry Collector with a config of one's own)
#
# Env: TIDEMARK_JAEGER_VERSION (1.76.0), TIDEMARK_JAEGER_OTLP_GRPC_PORT (19317), TIDEMARK_JAEGER_OTLP_HTTP_PORT
#      (19318), TIDEMARK_JAEGER_QUERY_PORT (19686: /api/... and the UI), TIDEMARK_JAEGER_QUERY_GRPC_PORT (19685),
#      TIDEMARK_STATE_DIR, TIDEMARK_CACHE_DIR.
# Jaeger with no config listens on fixed ports (4317, 4318, 16686, 8888, ...), so start writes a config file of its
# own into the state dir that names every listener and turns the collector's own metrics endpoint off.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

JAEGER_VERSION="${TIDEMARK_JAEGER_VERSION:-1.76.0}"
OTLP_GRPC_PORT="${TIDEMARK_JAEGER_OTLP_GRPC_PORT:-19317}"
OTLP_HTTP_PORT="${TIDEMARK_JAEGER_OTLP_HTTP_PORT:-19318}"
QUERY_PORT="${TIDEMARK_JAEGER_QUERY_PORT:-19686}"
QUERY_GRPC_PORT="${TIDEMARK_JAEGER_QUERY_GRPC_PORT:-19685}"
JAEGER_BIN="$TIDEMARK_CACHE_DIR/jaeger-$JAEGER_VERSION/jaeger"
JDIR="$TIDEMARK_STATE_DIR/jaeger"

install() {
  [[ -x "$JAEGER_BIN" ]] && return 0
  command -v go >/dev/null || die "go not found: needed once to build Jaeger $JAEGER_VERSION"
  local mod dl src tmp
  mod="github.com/jaegertracing/jaeger@v$JAEGER_VERSION"
  log "building Jaeger $JAEGER_VERSION from the Go module proxy into $JAEGER_BIN (once per machine; ~10 CPU-minutes and 1.3 GB of modules from empty Go caches)"
  # `go install mod@version` is refused (Jaeger's go.mod has replace directives), so: download, build in place.
  # With -json, a failure is reported in the output's "Error" field: keep the output to quote it.
  dl=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "$mod") || die "go mod download $mod failed: $(sed -n 's/^[[:space:]]*"Error": //p' <<<"$dl")"
  src=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$dl")
  [[ -n "$src" && -d "$src" ]] || die "go mod download $mod gave no module directory"
  mkdir -p "$(dirname "$JAEGER_BIN")"
  tmp="$JAEGER_BIN.tmp.$$"
  if ! (cd "$src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -o "$tmp" ./cmd/jaeger) >"$JAEGER_BIN.build.log" 2>&1; then
    rm -f "$tmp"
    die "build of Jaeger $JAEGER_VERSION failed (see $JAEGER_BIN.build.log)"
  fi
  mv -f "$tmp" "$JAEGER_BIN" # atomic: a concurrent install never runs a half-written binary
}

http_ok() { curl -fsS -o /dev/null --max-time 2 "$1"; }

ready() {
  port_in_use "$OTLP_GRPC_PORT" && port_in_use "$OTLP_HTTP_PORT" && http_ok "http://$TIDEMARK_HOST:$QUERY_PORT/api/services"
}

write_config() {
  cat >"$JDIR/config.yaml" <<YAML
# Written by deploy/local/jaeger.sh: every listener on $TIDEMARK_HOST at the ports of this stack.
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    # Show spans as stored: Tidemark's hop spans are already on one (corrected) clock.
    max_clock_skew_adjust: 0s
    http:
      endpoint: $TIDEMARK_HOST:$QUERY_PORT
    grpc:
      endpoint: $TIDEMARK_HOST:$QUERY_GRPC_PORT
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: $TIDEMARK_HOST:$OTLP_GRPC_PORT
      http:
        endpoint: $TIDEMARK_HOST:$OTLP_HTTP_PORT
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
YAML
}

start() {
  if pid_alive "$JDIR/pid"; then log "Jaeger already running (query on $TIDEMARK_HOST:$QUERY_PORT)"; return 0; fi
  install
  require_free_port "$OTLP_GRPC_PORT" "Jaeger OTLP gRPC (TIDEMARK_JAEGER_OTLP_GRPC_PORT)"
  require_free_port "$OTLP_HTTP_PORT" "Jaeger OTLP HTTP (TIDEMARK_JAEGER_OTLP_HTTP_PORT)"
  require_free_port "$QUERY_PORT" "Jaeger query/UI (TIDEMARK_JAEGER_QUERY_PORT)"
  require_free_port "$QUERY_GRPC_PORT" "Jaeger query gRPC (TIDEMARK_JAEGER_QUERY_GRPC_PORT)"
  rm -rf "$JDIR"; mkdir -p "$JDIR"
  write_config
  setsid "$JAEGER_BIN" --config "$JDIR/config.yaml" >"$JDIR/jaeger.log" 2>&1 </dev/null &
  echo $! >"$JDIR/pid"
  if ! wait_until 60 "Jaeger" ready; then tail -n 20 "$JDIR/jaeger.log" >&2; stop; die "Jaeger did not become ready"; fi
  log "Jaeger ready: OTLP gRPC $TIDEMARK_HOST:$OTLP_GRPC_PORT, HTTP $TIDEMARK_HOST:$OTLP_HTTP_PORT, UI http://$TIDEMARK_HOST:$QUERY_PORT"
}

stop() { stop_pidfile "$JDIR/pid" jaeger; }

env_lines() {
  pid_alive "$JDIR/pid" || return 0
  echo "export TIDEMARK_JAEGER_OTLP_GRPC=$TIDEMARK_HOST:$OTLP_GRPC_PORT"
  echo "export TIDEMARK_JAEGER_OTLP_HTTP=$TIDEMARK_HOST:$OTLP_HTTP_PORT"
  echo "export TIDEMARK_JAEGER_QUERY=http://$TIDEMARK_HOST:$QUERY_PORT"
  # Jaeger v2 is an OpenTelemetry Collector distribution with the contrib Kafka exporter: tests and the demo run it
  # with a config of their own as the OpenTelemetry Collector that writes agents' spans into Tidemark's spans topic.
  echo "export TIDEMARK_OTELCOL_BIN=$JAEGER_BIN"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  env) env_lines ;;
  *) die "usage: jaeger.sh install|start|stop|env" ;;
esac
