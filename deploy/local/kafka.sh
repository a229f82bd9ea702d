#!/usr/bin/env bash
# Real Apache Kafka (KRaft) from Maven Central jars, on loopback.
#
#   kafka.sh install            resolve the broker and tools jars into the cache (once per version)
#   kafka.sh start [--brokers N] start N brokers (default 1); node 1 is broker+controller, the others brokers
#   kafka.sh stop               stop the brokers this script started (pid files)
#   kafka.sh env                print export lines for a running cluster
#   kafka.sh stop-node I        stop broker I only (fault tests: leader failover, broker restart)
#   kafka.sh start-node I       start broker I again on its existing data and wait until the cluster answers
#
# Env: TIDEMARK_KAFKA_VERSION (4.4.0), TIDEMARK_KAFKA_PORT (19092; broker i listens on PORT+i-1),
#      TIDEMARK_KAFKA_CONTROLLER_PORT (19192), TIDEMARK_STATE_DIR, TIDEMARK_CACHE_DIR.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KAFKA_VERSION="${TIDEMARK_KAFKA_VERSION:-4.4.0}"
KAFKA_PORT="${TIDEMARK_KAFKA_PORT:-19092}"
CONTROLLER_PORT="${TIDEMARK_KAFKA_CONTROLLER_PORT:-19192}"
KAFKA_LIB="$TIDEMARK_CACHE_DIR/kafka-$KAFKA_VERSION/lib"
KDIR="$TIDEMARK_STATE_DIR/kafka"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

need_java() {
  command -v java >/dev/null || die "java not found: Kafka needs Java 17+ (Debian: apt-get install openjdk-17-jre-headless)"
  local v
  v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  [[ -n "$v" && "$v" -ge 17 ]] || die "java ${v:-?} found; Kafka $KAFKA_VERSION needs Java 17 or newer"
}

install() {
  need_java
  if [[ -f "$KAFKA_LIB/.complete" ]]; then return 0; fi
  command -v mvn >/dev/null || die "mvn not found: needed once to fetch Kafka $KAFKA_VERSION jars (Debian: apt-get install maven)"
  local work="$TIDEMARK_CACHE_DIR/kafka-$KAFKA_VERSION"
  mkdir -p "$work"
  cp "$HERE/kafka-pom.xml" "$work/pom.xml"
  rm -rf "$KAFKA_LIB"
  log "fetching Apache Kafka $KAFKA_VERSION jars from Maven Central into $KAFKA_LIB"
  if ! (cd "$work" && mvn -q -B dependency:copy-dependencies -Dkafka.version="$KAFKA_VERSION" \
        -DoutputDirectory=lib -DincludeScope=runtime >"$work/mvn.log" 2>&1); then
    rm -rf "$KAFKA_LIB"
    die "download of Kafka $KAFKA_VERSION jars failed (see $work/mvn.log)"
  fi
  touch "$KAFKA_LIB/.complete"
}

running_count() {
  local n=0
  for f in "$KDIR"/node-*/pid; do [[ -e "$f" ]] && pid_alive "$f" && n=$((n + 1)); done
  echo "$n"
}

bootstrap() {
  local n=$1 out=""
  for i in $(seq 1 "$n"); do out+="${out:+,}$TIDEMARK_HOST:$((KAFKA_PORT + i - 1))"; done
  echo "$out"
}

write_node_config() {
  local id=$1 dir=$2 roles=$3 listeners
  listeners="PLAINTEXT://$TIDEMARK_HOST:$((KAFKA_PORT + id - 1))"
  [[ $roles == *controller* ]] && listeners+=",CONTROLLER://$TIDEMARK_HOST:$CONTROLLER_PORT"
  cat >"$dir/server.properties" <<CFG
process.roles=$roles
node.id=$id
controller.quorum.voters=1@$TIDEMARK_HOST:$CONTROLLER_PORT
controller.listener.names=CONTROLLER
listeners=$listeners
advertised.listeners=PLAINTEXT://$TIDEMARK_HOST:$((KAFKA_PORT + id - 1))
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.segment.bytes=16777216
log.retention.check.interval.ms=5000
delete.topic.enable=true
CFG
  cat >"$dir/log4j2.properties" <<CFG
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $dir/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.server.name = org.apache.kafka.server
logger.server.level = INFO
CFG
}

# ready N: a real client call (Kafka's own BrokerApiVersionsCommand) sees all N brokers.
ready() {
  local n=$1 out
  out=$(java -Xmx128m -cp "$KAFKA_LIB/*" org.apache.kafka.tools.BrokerApiVersionsCommand \
    --bootstrap-server "$(bootstrap "$n")" 2>/dev/null) || return 1
  [[ $(grep -c -- '-> (' <<<"$out") -ge "$n" ]]
}

start() {
  local n=1
  while [[ $# -gt 0 ]]; do
    case $1 in
      --brokers) n=$2; shift 2 ;;
      *) die "kafka.sh start: unknown argument $1" ;;
    esac
  done
  [[ $n =~ ^[1-9]$ ]] || die "--brokers takes 1 to 9, got $n"
  local running
  running=$(running_count)
  if [[ $running -gt 0 ]]; then
    [[ $running -eq $n ]] || die "Kafka is already running with $running broker(s), asked for $n: run 'make down' first"
    ready "$n" || die "Kafka has $running broker process(es) but they do not answer; run 'make down' and retry"
    log "Kafka already running with $n broker(s)"
    return 0
  fi
  install
  require_free_port "$CONTROLLER_PORT" "Kafka controller (TIDEMARK_KAFKA_CONTROLLER_PORT)"
  for i in $(seq 1 "$n"); do require_free_port $((KAFKA_PORT + i - 1)) "Kafka broker $i (TIDEMARK_KAFKA_PORT)"; done

  # A fresh cluster every start: tests and the demo want a clean, known state.
  rm -rf "$KDIR"
  mkdir -p "$KDIR"
  local cluster_id
  cluster_id=$(java -cp "$KAFKA_LIB/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
  [[ -n "$cluster_id" ]] || die "kafka storage tool could not make a cluster id (is $KAFKA_LIB complete?)"
  echo "$n" >"$KDIR/brokers"
  for i in $(seq 1 "$n"); do
    local dir="$KDIR/node-$i" roles=broker
    [[ $i -eq 1 ]] && roles=broker,controller
    mkdir -p "$dir/data"
    write_node_config "$i" "$dir" "$roles"
    java -cp "$KAFKA_LIB/*" kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties" \
      >"$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; die "formatting storage of Kafka node $i failed"; }
  done
  for i in $(seq 1 "$n"); do launch_node "$i"; done
  log "waiting for $n Kafka broker(s) on $(bootstrap "$n")"
  if ! wait_until 90 "Kafka brokers" ready "$n"; then
    for i in $(seq 1 "$n"); do tail -n 5 "$KDIR/node-$i/server.log" "$KDIR/node-$i/stdout.log" >&2 2>/dev/null || true; done
    stop
    die "Kafka did not become ready; logs are in $KDIR"
  fi
  log "Kafka $KAFKA_VERSION ready: $(bootstrap "$n")"
}

# launch_node I: start the JVM of node I in its own session (so a stop never hits our caller) and record its pid.
launch_node() {
  local dir="$KDIR/node-$1"
  setsid java -Xms256m -Xmx768m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="file:$dir/log4j2.properties" -cp "$KAFKA_LIB/*" \
      kafka.Kafka "$dir/server.properties" >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
}

stop_node() {
  [[ -f "$KDIR/node-$1/server.properties" ]] || die "no Kafka node $1 in $KDIR"
  stop_pidfile "$KDIR/node-$1/pid" "kafka node-$1"
}

start_node() {
  [[ -f "$KDIR/node-$1/server.properties" ]] || die "no Kafka node $1 in $KDIR"
  if pid_alive "$KDIR/node-$1/pid"; then log "Kafka node $1 already running"; return 0; fi
  launch_node "$1"
  local n
  n=$(cat "$KDIR/brokers")
  wait_until 90 "Kafka node $1" ready "$n" || die "Kafka node $1 did not rejoin; see $KDIR/node-$1/server.log"
  log "Kafka node $1 is back"
}

stop() {
  for f in "$KDIR"/node-*/pid; do [[ -e "$f" ]] && stop_pidfile "$f" "kafka $(basename "$(dirname "$f")")"; done
  return 0
}

env_lines() {
  local n
  n=$(running_count)
  [[ $n -gt 0 ]] || return 0
  echo "export TIDEMARK_KAFKA_BROKERS=$(bootstrap "$(cat "$KDIR/brokers")")"
  echo "export TIDEMARK_KAFKA_LIB=$KAFKA_LIB"
}

case "${1:-}" in
  install) install ;;
  start) shift; start "$@" ;;
  stop) stop ;;
  env) env_lines ;;
  stop-node) stop_node "${2:?node number}" ;;
  start-node) start_node "${2:?node number}" ;;
  *) die "usage: kafka.sh install|start [--brokers N]|stop|env|stop-node I|start-node I" ;;
esac
