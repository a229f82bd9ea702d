#!/usr/bin/env bash
# Real Apache Kafka (KRaft) from Maven Central jars, on loopback.
#
#   kafka.sh install            resolve the broker and tools jars into the cache (once per version)
#   kafka.sh start [--brokers N] [--secure]
#                               start N brokers (default 1); node 1 is broker+controller, the others brokers.
#                               --secure adds, beside PLAINTEXT, three listeners per broker (certificates and users
#                               from secure.sh): SASL_SSL with SCRAM-SHA-256/512 and PLAIN, SASL_SSL with OAUTHBEARER
#                               (tokens validated against the local OIDC issuer's JWKS), and SSL requiring a client
#                               certificate
#   kafka.sh stop               stop the brokers this script started (pid files)
#   kafka.sh env                print export lines for a running cluster
#   kafka.sh stop-node I        stop broker I only (fault tests: leader failover, broker restart)
#   kafka.sh start-node I       start broker I again on its existing data and wait until the cluster answers
#   kafka.sh add-node I         format and start a new broker I (> the brokers started) in the running cluster
#
# Env: TIDEMARK_KAFKA_VERSION (4.4.0), TIDEMARK_KAFKA_PORT (19092; broker i listens on PORT+i-1),
#      TIDEMARK_KAFKA_NODE_PORTS (comma-separated PLAINTEXT ports of brokers 1, 2, ...: overrides PORT+i-1 where
#      given), TIDEMARK_KAFKA_CONTROLLER_PORT (19192), TIDEMARK_KAFKA_SASL_PORT / _OAUTH_PORT / _MTLS_PORT (PORT+200,
#      +300, +400; broker i on each +i-1), TIDEMARK_STATE_DIR, TIDEMARK_CACHE_DIR,
#      TIDEMARK_KAFKA_FAKETIME ("I:OFFSET,...", e.g. "2:+3s": broker I runs under libfaketime with its wall clock
#      shifted by OFFSET, the skewed-broker tests; needs Debian's faketime),
#      TIDEMARK_KAFKA_RACKS ("I:RACK,...": broker.rack of broker I; rack-aware tests),
#      TIDEMARK_KAFKA_READY_TIMEOUT (seconds a start waits for readiness, default 90; a faketime'd broker on a busy
#      machine can take minutes),
#      TIDEMARK_KAFKA_JMX_PORT (unset: no JMX; else broker i serves JMX, unauthenticated, on loopback port
#      JMX_PORT+i-1: the broker's own metrics, e.g. RequestMetrics for bench-lag).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/ports.sh"

KAFKA_VERSION="${TIDEMARK_KAFKA_VERSION:-4.4.0}"
KAFKA_LIB="$TIDEMARK_CACHE_DIR/kafka-$KAFKA_VERSION/lib"
KDIR="$TIDEMARK_STATE_DIR/kafka"
READY_TIMEOUT="${TIDEMARK_KAFKA_READY_TIMEOUT:-90}"
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

# node_port I: the PLAINTEXT port of broker I (TIDEMARK_KAFKA_NODE_PORTS' I-th entry, else KAFKA_PORT+I-1).
node_port() {
  local ports p
  IFS=, read -r -a ports <<<"${TIDEMARK_KAFKA_NODE_PORTS:-}"
  p=${ports[$(($1 - 1))]:-}
  echo "${p:-$((KAFKA_PORT + $1 - 1))}"
}

# node_setting VAR I: the value for broker I in a "I:VALUE,..." list, empty when none.
node_setting() {
  local item
  IFS=, read -r -a items <<<"${!1:-}"
  for item in "${items[@]}"; do [[ ${item%%:*} == "$2" ]] && { echo "${item#*:}"; return 0; }; done
  return 0
}

bootstrap() { # bootstrap N [BASE]: broker i at BASE + i - 1 (a secure listener's port), else its PLAINTEXT node_port
  local n=$1 base=${2:-} out=""
  for i in $(seq 1 "$n"); do
    if [[ -n $base ]]; then out+="${out:+,}$TIDEMARK_HOST:$((base + i - 1))"; else out+="${out:+,}$TIDEMARK_HOST:$(node_port "$i")"; fi
  done
  echo "$out"
}

write_node_config() {
  local id=$1 dir=$2 roles=$3 secure=$4 listeners advertised protocols rack
  listeners="PLAINTEXT://$TIDEMARK_HOST:$(node_port "$id")"
  advertised=$listeners
  protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  if [[ $secure -eq 1 ]]; then
    local more="SASL_SSL://$TIDEMARK_HOST:$((SASL_PORT + id - 1)),OAUTH://$TIDEMARK_HOST:$((OAUTH_PORT + id - 1)),MTLS://$TIDEMARK_HOST:$((MTLS_PORT + id - 1))"
    listeners+=",$more"
    advertised+=",$more"
    protocols+=",SASL_SSL:SASL_SSL,OAUTH:SASL_SSL,MTLS:SSL"
  fi
  [[ $roles == *controller* ]] && listeners+=",CONTROLLER://$TIDEMARK_HOST:$CONTROLLER_PORT"
  rack=$(node_setting TIDEMARK_KAFKA_RACKS "$id")
  cat >"$dir/server.properties" <<CFG
process.roles=$roles
node.id=$id
controller.quorum.voters=1@$TIDEMARK_HOST:$CONTROLLER_PORT
controller.listener.names=CONTROLLER
listeners=$listeners
advertised.listeners=$advertised${rack:+
broker.rack=$rack}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
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
  if [[ $secure -eq 1 ]]; then secure_config >>"$dir/server.properties"; fi
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

# secure_config: the secure listeners' settings (PEM key store and trust store from secure.sh certs). The OAUTHBEARER
# listener gives each session the token's remaining lifetime (at most an hour, KIP-368) and closes a connection that
# is used past it without re-authenticating (as a production OAuth cluster should).
secure_config() {
  local tls="$TIDEMARK_STATE_DIR/tls"
  cat <<CFG
ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
ssl.endpoint.identification.algorithm=
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_tidemark="$(bash "$HERE/secure.sh" scram-password)";
listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.oauth.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.oauth.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=http://$TIDEMARK_HOST:$OIDC_PORT/jwks
sasl.oauthbearer.expected.audience=kafka
sasl.oauthbearer.expected.issuer=http://$TIDEMARK_HOST:$OIDC_PORT
listener.name.oauth.oauthbearer.connections.max.reauth.ms=3600000
listener.name.mtls.ssl.client.auth=required
CFG
}

# ready N: a real client call (Kafka's own BrokerApiVersionsCommand) sees all N brokers.
ready() {
  local n=$1 out
  out=$(java -Xmx128m -cp "$KAFKA_LIB/*" org.apache.kafka.tools.BrokerApiVersionsCommand \
    --bootstrap-server "$(bootstrap "$n")" 2>/dev/null) || return 1
  [[ $(grep -c -- '-> (' <<<"$out") -ge "$n" ]]
}

# wait_brokers N: waits up to READY_TIMEOUT until brokers 1..N answer (ready) and each port is held by our own node
# (listens_on: tests pick free ports, and another test's broker could take one and answer for ours). It gives up at
# once when a node exits, saying whether one of its ports is in use by another process.
wait_brokers() {
  local n=$1 i p deadline=$((SECONDS + READY_TIMEOUT))
  while ((SECONDS < deadline)); do
    local all=1
    for i in $(seq 1 "$n"); do
      if ! pid_running "$KDIR/node-$i/pid"; then
        for p in "$(node_port "$i")" $([[ $i -eq 1 ]] && echo "$CONTROLLER_PORT"); do
          if port_in_use "$p"; then
            log "Kafka node $i exited while starting: port $p is already in use (another process took it first)"
            return 1
          fi
        done
        log "Kafka node $i exited while starting"
        return 1
      fi
      listens_on "$KDIR/node-$i/pid" "$(node_port "$i")" || all=0
    done
    if ((all)) && ready "$n" >/dev/null 2>&1; then return 0; fi
    sleep 0.3
  done
  log "timed out after ${READY_TIMEOUT}s waiting for Kafka brokers"
  return 1
}

start() {
  local n=1 secure=0
  while [[ $# -gt 0 ]]; do
    case $1 in
      --brokers) n=$2; shift 2 ;;
      --secure) secure=1; shift ;;
      *) die "kafka.sh start: unknown argument $1" ;;
    esac
  done
  [[ $n =~ ^[1-9]$ ]] || die "--brokers takes 1 to 9, got $n"
  local running
  running=$(running_count)
  if [[ $running -gt 0 ]]; then
    [[ $running -eq $n ]] || die "Kafka is already running with $running broker(s), asked for $n: run 'make down' first"
    if [[ $secure -eq 1 && ! -f "$KDIR/secure" ]]; then die "Kafka is already running without the secure listeners, asked for --secure: run 'make down' first"; fi
    ready "$n" || die "Kafka has $running broker process(es) but they do not answer; run 'make down' and retry"
    log "Kafka already running with $n broker(s)"
    return 0
  fi
  install
  require_free_port "$CONTROLLER_PORT" "Kafka controller (TIDEMARK_KAFKA_CONTROLLER_PORT)"
  for i in $(seq 1 "$n"); do require_free_port "$(node_port "$i")" "Kafka broker $i (TIDEMARK_KAFKA_PORT)"; done
  local format_args=()
  if [[ $secure -eq 1 ]]; then
    for i in $(seq 1 "$n"); do
      require_free_port $((SASL_PORT + i - 1)) "Kafka SASL_SSL listener $i (TIDEMARK_KAFKA_SASL_PORT)"
      require_free_port $((OAUTH_PORT + i - 1)) "Kafka OAUTHBEARER listener $i (TIDEMARK_KAFKA_OAUTH_PORT)"
      require_free_port $((MTLS_PORT + i - 1)) "Kafka mTLS listener $i (TIDEMARK_KAFKA_MTLS_PORT)"
    done
    [[ -f "$TIDEMARK_STATE_DIR/tls/.complete" ]] || die "no certificates: run 'deploy/local/secure.sh certs' (stack.sh up --secure does)"
    mapfile -t format_args < <(bash "$HERE/secure.sh" scram-args)
  fi

  # A fresh cluster every start: tests and the demo want a clean, known state.
  rm -rf "$KDIR"
  mkdir -p "$KDIR"
  local cluster_id
  cluster_id=$(java -cp "$KAFKA_LIB/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
  [[ -n "$cluster_id" ]] || die "kafka storage tool could not make a cluster id (is $KAFKA_LIB complete?)"
  echo "$n" >"$KDIR/brokers"
  echo "$cluster_id" >"$KDIR/cluster-id"
  [[ $secure -eq 1 ]] && touch "$KDIR/secure"
  for i in $(seq 1 "$n"); do
    local dir="$KDIR/node-$i" roles=broker
    [[ $i -eq 1 ]] && roles=broker,controller
    mkdir -p "$dir/data"
    write_node_config "$i" "$dir" "$roles" "$secure"
    # SCRAM credentials are written into the cluster metadata at format time (KIP-900): no running cluster needed.
    java -cp "$KAFKA_LIB/*" kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties" "${format_args[@]}" \
      >"$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; die "formatting storage of Kafka node $i failed"; }
  done
  for i in $(seq 1 "$n"); do launch_node "$i"; done
  log "waiting for $n Kafka broker(s) on $(bootstrap "$n")"
  if ! wait_brokers "$n"; then
    for i in $(seq 1 "$n"); do tail -n 5 "$KDIR/node-$i/server.log" "$KDIR/node-$i/stdout.log" >&2 2>/dev/null || true; done
    stop
    die "Kafka did not become ready; logs are in $KDIR"
  fi
  log "Kafka $KAFKA_VERSION ready: $(bootstrap "$n")"
}

# launch_node I: start the JVM of node I in its own session (so a stop never hits our caller) and record its pid.
# A node named in TIDEMARK_KAFKA_FAKETIME runs under libfaketime: its wall clock (LogAppendTime) is shifted, its
# monotonic clock is not (the JVM's timers must keep working).
launch_node() {
  local dir="$KDIR/node-$1" shift_by wrap=()
  shift_by=$(node_setting TIDEMARK_KAFKA_FAKETIME "$1")
  if [[ -n $shift_by ]]; then
    # libfaketime preloaded into the JVM itself (not the faketime wrapper, which forks: the pid file must name the
    # JVM so that stop-node stops it). Monotonic clocks stay real (FAKETIME_DONT_FAKE_MONOTONIC), and
    # FAKETIME_FORCE_MONOTONIC_FIX=0: with 0.9.10's default every timed wait of the JVM (LockSupport.parkNanos,
    # Object.wait) returned at once, so the broker's threads spun and a skewed 3-broker cluster took 8 minutes to
    # start on a loaded machine, with 14 s probe round trips. Measured here with it off: 200 parks of 1 ms take
    # 260 ms as without libfaketime (0.4 ms with the default), System.currentTimeMillis costs what it costs without
    # it, and a 3-broker cluster with one skewed broker starts as fast as a plain one (73 s at load average 50).
    local lib
    lib=$(dpkg -L libfaketime 2>/dev/null | grep -m1 '/libfaketime\.so') ||
      die "TIDEMARK_KAFKA_FAKETIME needs libfaketime (Debian: apt-get install faketime)"
    wrap=(env LD_PRELOAD="$lib" FAKETIME="$shift_by" FAKETIME_DONT_FAKE_MONOTONIC=1 FAKETIME_FORCE_MONOTONIC_FIX=0)
    echo "$shift_by" >"$dir/faketime"
  else
    rm -f "$dir/faketime"
  fi
  local jmx=()
  if [[ -n ${TIDEMARK_KAFKA_JMX_PORT:-} ]]; then
    local jp=$((TIDEMARK_KAFKA_JMX_PORT + $1 - 1))
    jmx=(-Dcom.sun.management.jmxremote -Dcom.sun.management.jmxremote.port="$jp" -Dcom.sun.management.jmxremote.rmi.port="$jp"
      -Dcom.sun.management.jmxremote.host="$TIDEMARK_HOST" -Djava.rmi.server.hostname="$TIDEMARK_HOST"
      -Dcom.sun.management.jmxremote.authenticate=false -Dcom.sun.management.jmxremote.ssl=false)
  fi
  # The allowed-URLs property (Kafka >= 3.9.1) limits which JWKS endpoints the OAUTHBEARER validator may fetch.
  setsid "${wrap[@]}" java -Xms256m -Xmx768m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true "${jmx[@]}" \
      -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls="http://$TIDEMARK_HOST:$OIDC_PORT/jwks" \
      -Dlog4j2.configurationFile="file:$dir/log4j2.properties" -cp "$KAFKA_LIB/*" \
      kafka.Kafka "$dir/server.properties" >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
}

# add_node I: a new broker joins the running cluster: formatted with the cluster's id, started, and counted. In a
# --secure cluster it gets the secure listeners too (the SCRAM users are already in the cluster's metadata).
add_node() {
  local id=$1 n dir="$KDIR/node-$1" secure=0
  [[ $id =~ ^[1-9]$ ]] || die "add-node takes a node number 1 to 9, got $id"
  [[ -f "$KDIR/cluster-id" ]] || die "no running cluster in $KDIR to add node $id to"
  [[ ! -e "$dir" ]] || die "Kafka node $id already exists in $KDIR"
  n=$(cat "$KDIR/brokers")
  [[ $id -eq $((n + 1)) ]] || die "add-node $id: the cluster has $n brokers, the next is $((n + 1))"
  require_free_port "$(node_port "$id")" "Kafka broker $id (TIDEMARK_KAFKA_PORT / TIDEMARK_KAFKA_NODE_PORTS)"
  if [[ -f "$KDIR/secure" ]]; then
    secure=1
    require_free_port $((SASL_PORT + id - 1)) "Kafka SASL_SSL listener $id (TIDEMARK_KAFKA_SASL_PORT)"
    require_free_port $((OAUTH_PORT + id - 1)) "Kafka OAUTHBEARER listener $id (TIDEMARK_KAFKA_OAUTH_PORT)"
    require_free_port $((MTLS_PORT + id - 1)) "Kafka mTLS listener $id (TIDEMARK_KAFKA_MTLS_PORT)"
  fi
  mkdir -p "$dir/data"
  write_node_config "$id" "$dir" broker "$secure"
  java -cp "$KAFKA_LIB/*" kafka.tools.StorageTool format -t "$(cat "$KDIR/cluster-id")" -c "$dir/server.properties" \
    >"$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; die "formatting storage of Kafka node $id failed"; }
  launch_node "$id"
  echo "$id" >"$KDIR/brokers"
  wait_until "$READY_TIMEOUT" "Kafka node $id" ready "$id" || die "Kafka node $id did not join; see $dir/server.log"
  log "Kafka node $id joined: $(bootstrap "$id")"
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
  wait_until "$READY_TIMEOUT" "Kafka node $1" ready "$n" || die "Kafka node $1 did not rejoin; see $KDIR/node-$1/server.log"
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
  if [[ -f "$KDIR/secure" ]]; then
    echo "export TIDEMARK_KAFKA_SASL_BROKERS=$(bootstrap "$(cat "$KDIR/brokers")" "$SASL_PORT")"
    echo "export TIDEMARK_KAFKA_OAUTH_BROKERS=$(bootstrap "$(cat "$KDIR/brokers")" "$OAUTH_PORT")"
    echo "export TIDEMARK_KAFKA_MTLS_BROKERS=$(bootstrap "$(cat "$KDIR/brokers")" "$MTLS_PORT")"
  fi
  echo "export TIDEMARK_KAFKA_LIB=$KAFKA_LIB"
}

case "${1:-}" in
  install) install ;;
  start) shift; start "$@" ;;
  stop) stop ;;
  env) env_lines ;;
  stop-node) stop_node "${2:?node number}" ;;
  start-node) start_node "${2:?node number}" ;;
  add-node) add_node "${2:?node number}" ;;
  *) die "usage: kafka.sh install|start [--brokers N] [--secure]|stop|env|stop-node I|start-node I|add-node I" ;;
esac
