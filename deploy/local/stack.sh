#!/usr/bin/env bash
# The local stack Tidemark's tests and demo use: real Kafka (KRaft), real ClickHouse, optionally Prometheus and Jaeger.
#
#   stack.sh install                        install / download everything the stack and the tests need (idempotent)
#   stack.sh up [--brokers N] [--prometheus] [--jaeger] [--chcluster] [--second-cluster]
#                                           start what is not running; prints `export ...` lines on stdout
#                                           (use: eval "$(bash deploy/local/stack.sh up)"). Kafka always has, beside
#                                           PLAINTEXT, its SASL_SSL (SCRAM, PLAIN), OAUTHBEARER and mTLS listeners,
#                                           with a local OIDC issuer and ClickHouse's secure port
#                                           (deploy/local/secure.sh), so one running stack serves the demo, the
#                                           tests and the benchmarks alike; --secure is accepted and changes nothing;
#                                           --chcluster adds a replicated ClickHouse cluster (ZooKeeper + 1 shard x 2
#                                           replicas, deploy/local/chcluster.sh) beside the single server;
#                                           --second-cluster adds a second, single-broker Kafka cluster (its own
#                                           KRaft controller and state dir) for multi-cluster runs (clusters:);
#                                           exported as TIDEMARK_KAFKA2_BROKERS
#   stack.sh down                           stop every server these scripts started (by pid file)
#   stack.sh env                            print the export lines for what is running
#   stack.sh with [--brokers N] [--jaeger] -- CMD...
#                                           start what is missing, run CMD with the env set, then stop only what
#                                           this call started (make test uses this)
# A server that fails to start stops `up` and `with` with a non-zero exit (`with` then stops what it had started).
#
# Defaults: 3 brokers (Kafka ports 19092-19094, controller 19192), ClickHouse native 19000 / HTTP 18123,
# Prometheus 19090, Jaeger OTLP 19317/19318 and UI 19686 (deploy/local/jaeger.sh); SASL_SSL 19292..,
# OAUTHBEARER 19392.., mTLS 19492.., OIDC issuer 19892, ClickHouse secure 19440 (deploy/local/ports.sh);
# second cluster (--second-cluster) broker 19592 / controller 19692 (TIDEMARK_KAFKA2_PORT,
# TIDEMARK_KAFKA2_CONTROLLER_PORT), state in $TIDEMARK_STATE_DIR/cluster2;
# state in ${XDG_STATE_HOME:-~/.local/state}/tidemark/local, jars in ~/.cache/tidemark.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

BROKERS="${TIDEMARK_BROKERS:-3}"
WITH_PROM=0
WITH_JAEGER=0
WITH_CHCLUSTER=0
SECOND=0

parse() {
  while [[ $# -gt 0 ]]; do
    case $1 in
      --brokers) BROKERS=$2; shift 2 ;;
      --prometheus) WITH_PROM=1; shift ;;
      --jaeger) WITH_JAEGER=1; shift ;;
      --secure) shift ;; # the stack always has the secure listeners
      --chcluster) WITH_CHCLUSTER=1; shift ;;
      --second-cluster) SECOND=1; shift ;;
      --) shift; REST=("$@"); return ;;
      *) die "stack.sh: unknown argument $1" ;;
    esac
  done
  REST=()
}

install_all() {
  # kcat and faketime are the demo's external skewed producer; everything else is the servers.
  # zookeeper: the replicated ClickHouse cluster the clickhouse.cluster tests start (chcluster.sh).
  apt_install clickhouse-server clickhouse-client prometheus prometheus-alertmanager kcat faketime openssl zookeeper
  bash "$HERE/kafka.sh" install
  bash "$HERE/streams.sh" install
  bash "$HERE/otel-app.sh" install
  bash "$HERE/otel-py.sh" install
  if [[ $WITH_JAEGER -eq 1 ]]; then bash "$HERE/jaeger.sh" install; fi
}

# second runs kafka.sh for the second cluster: its own state dir and ports, plaintext only (the secure listeners'
# ports would be the first cluster's).
second() {
  env -u TIDEMARK_KAFKA_NODE_PORTS TIDEMARK_STATE_DIR="$TIDEMARK_STATE_DIR/cluster2" \
    TIDEMARK_KAFKA_PORT="${TIDEMARK_KAFKA2_PORT:-19592}" \
    TIDEMARK_KAFKA_CONTROLLER_PORT="${TIDEMARK_KAFKA2_CONTROLLER_PORT:-19692}" bash "$HERE/kafka.sh" "$@"
}

env_all() {
  bash "$HERE/kafka.sh" env
  second env | sed -n 's/^export TIDEMARK_KAFKA_BROKERS=/export TIDEMARK_KAFKA2_BROKERS=/p'
  bash "$HERE/streams.sh" env
  bash "$HERE/otel-app.sh" env
  bash "$HERE/otel-py.sh" env
  bash "$HERE/clickhouse.sh" env
  bash "$HERE/prometheus.sh" env
  bash "$HERE/jaeger.sh" env
  bash "$HERE/secure.sh" env
  bash "$HERE/chcluster.sh" env
}

# start_all starts what is not running; its output goes to stderr. Under set -e (it is never called in a command
# substitution or a condition, where bash ignores set -e) the first server that fails to start ends the script.
start_all() {
  install_all
  # Certificates first (the listeners load them), then the issuer (brokers fetch its JWKS when they start).
  bash "$HERE/secure.sh" certs
  bash "$HERE/secure.sh" start
  bash "$HERE/kafka.sh" start --brokers "$BROKERS" --secure
  bash "$HERE/clickhouse.sh" start --secure
  bash "$HERE/secure.sh" configs
  if [[ $SECOND -eq 1 ]]; then second start --brokers 1; fi
  if [[ $WITH_PROM -eq 1 ]]; then bash "$HERE/prometheus.sh" start; fi
  if [[ $WITH_JAEGER -eq 1 ]]; then bash "$HERE/jaeger.sh" start; fi
  if [[ $WITH_CHCLUSTER -eq 1 ]]; then bash "$HERE/chcluster.sh" start; fi
}

up() {
  start_all >&2
  env_all
}

down() {
  bash "$HERE/chcluster.sh" stop
  bash "$HERE/jaeger.sh" stop
  bash "$HERE/prometheus.sh" stop
  bash "$HERE/clickhouse.sh" stop
  bash "$HERE/kafka.sh" stop
  second stop
  bash "$HERE/secure.sh" stop
}

with() {
  [[ ${#REST[@]} -gt 0 ]] || die "stack.sh with: give a command after --"
  # globals, not locals: the EXIT trap runs after this function has returned.
  had_kafka=$(bash "$HERE/kafka.sh" env | wc -l)
  had_kafka2=$(second env | wc -l)
  had_ch=$(bash "$HERE/clickhouse.sh" env | wc -l)
  had_prom=$(bash "$HERE/prometheus.sh" env | wc -l)
  had_jaeger=$(bash "$HERE/jaeger.sh" env | wc -l)
  had_oidc=$(bash "$HERE/secure.sh" env | wc -l)
  had_chcluster=$(bash "$HERE/chcluster.sh" env | wc -l)
  # Every stop runs even when one fails; the command's exit status is kept.
  cleanup() {
    local rc=$?
    set +e
    [[ $had_chcluster -gt 0 ]] || bash "$HERE/chcluster.sh" stop
    [[ $had_jaeger -gt 0 ]] || bash "$HERE/jaeger.sh" stop
    [[ $had_prom -gt 0 ]] || bash "$HERE/prometheus.sh" stop
    [[ $had_ch -gt 0 ]] || bash "$HERE/clickhouse.sh" stop
    [[ $had_kafka -gt 0 ]] || bash "$HERE/kafka.sh" stop
    [[ $had_kafka2 -gt 0 ]] || second stop
    [[ $had_oidc -gt 0 ]] || bash "$HERE/secure.sh" stop
    exit "$rc"
  }
  trap cleanup EXIT
  start_all >&2
  eval "$(env_all)"
  "${REST[@]}"
}

cmd=${1:-}
shift || true
parse "$@"
case "$cmd" in
  install) WITH_JAEGER=1; install_all ;; # everything make test needs, Jaeger included
  up) up ;;
  down) down ;;
  env) env_all ;;
  with) with ;;
  *) die "usage: stack.sh install|up [--brokers N] [--prometheus] [--jaeger] [--chcluster] [--second-cluster]|down|env|with [--brokers N] [--jaeger] -- CMD..." ;;
esac
