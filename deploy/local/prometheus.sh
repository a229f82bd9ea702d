#!/usr/bin/env bash
# Real Prometheus from Debian's package, started only when asked (scrape and rule tests, the demo).
#
#   prometheus.sh install | start [--scrape HOST:PORT ...] [--interval D] [--alertmanager HOST:PORT] | stop | env
#
# start loads every deploy/prometheus/*.rules.yml, scrapes the targets and evaluates the rules every D (default 5s),
# and sends alerts to the Alertmanager when one is given (alertmanager.sh).
# Env: TIDEMARK_PROMETHEUS_PORT (19090), TIDEMARK_STATE_DIR.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROM_PORT="${TIDEMARK_PROMETHEUS_PORT:-19090}"
PDIR="$TIDEMARK_STATE_DIR/prometheus"
RULES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/prometheus"

install() {
  command -v prometheus >/dev/null && command -v promtool >/dev/null && return 0
  apt_install prometheus
}

ready() { (exec 3<>"/dev/tcp/$TIDEMARK_HOST/$PROM_PORT" && printf 'GET /-/ready HTTP/1.0\r\n\r\n' >&3 && grep -q '200' <(head -1 <&3)); }
# serving: ready, and the answer is ours (the port may be taken by another server between the check and our bind).
serving() { ready && listens_on "$PDIR/pid" "$PROM_PORT"; }

start() {
  local targets=() interval=5s alertmanager=""
  while [[ $# -gt 0 ]]; do
    case $1 in
      --scrape) targets+=("$2"); shift 2 ;;
      --interval) interval=$2; shift 2 ;;
      --alertmanager) alertmanager=$2; shift 2 ;;
      *) die "prometheus.sh start: unknown argument $1" ;;
    esac
  done
  if pid_alive "$PDIR/pid"; then log "Prometheus already running on $TIDEMARK_HOST:$PROM_PORT"; return 0; fi
  install
  require_free_port "$PROM_PORT" "Prometheus (TIDEMARK_PROMETHEUS_PORT)"
  rm -rf "$PDIR"; mkdir -p "$PDIR/data"
  {
    echo "global: {scrape_interval: $interval, evaluation_interval: $interval}"
    if [[ -n $alertmanager ]]; then
      echo "alerting: {alertmanagers: [{static_configs: [{targets: [\"$alertmanager\"]}]}]}"
    fi
    if compgen -G "$RULES_DIR/*.rules.yml" >/dev/null; then
      echo "rule_files: [\"$RULES_DIR/*.rules.yml\"]"
    fi
    echo "scrape_configs:"
    echo "  - job_name: tidemark"
    echo "    static_configs: [{targets: [$(IFS=,; echo "${targets[*]:-$TIDEMARK_HOST:9308}")]}]"
  } >"$PDIR/prometheus.yml"
  setsid prometheus --config.file="$PDIR/prometheus.yml" --storage.tsdb.path="$PDIR/data" \
    --web.listen-address="$TIDEMARK_HOST:$PROM_PORT" >"$PDIR/prometheus.log" 2>&1 </dev/null &
  echo $! >"$PDIR/pid"
  if ! wait_until 30 "Prometheus" serving; then tail -n 20 "$PDIR/prometheus.log" >&2; stop; die "Prometheus did not become ready"; fi
  log "Prometheus ready on $TIDEMARK_HOST:$PROM_PORT"
}

stop() { stop_pidfile "$PDIR/pid" prometheus; }

env_lines() { pid_alive "$PDIR/pid" && echo "export TIDEMARK_PROMETHEUS_ADDR=$TIDEMARK_HOST:$PROM_PORT"; return 0; }

case "${1:-}" in
  install) install ;;
  start) shift; start "$@" ;;
  stop) stop ;;
  env) env_lines ;;
  *) die "usage: prometheus.sh install|start [--scrape HOST:PORT] [--interval D] [--alertmanager HOST:PORT]|stop|env" ;;
esac
