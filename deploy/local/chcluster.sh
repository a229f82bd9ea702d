#!/usr/bin/env bash
# A replicated ClickHouse cluster on loopback: Debian's ZooKeeper (3.8) and SHARDS x REPLICAS ClickHouse 18.16
# servers, each with its own config (remote_servers, macros, zookeeper, distributed DDL), for `clickhouse.cluster`
# (docs/schema.md, "ClickHouse cluster"). Not part of `stack.sh up`: the tests that need it start their own
# (internal/testenv.StartClickHouseCluster), `stack.sh up --chcluster` starts one by hand.
#
#   chcluster.sh install   apt-get install zookeeper clickhouse-server clickhouse-client when missing
#   chcluster.sh start [--shards S] [--replicas R]
#                          start ZooKeeper and S x R servers (default 1 x 2); idempotent: a running cluster of ours
#                          is reused. Node i (1-based) is replica ((i-1) % R) + 1 of shard ((i-1) / R) + 1.
#   chcluster.sh stop      stop every server of the cluster, then ZooKeeper (pid files)
#   chcluster.sh stop-node I / start-node I
#                          stop ClickHouse node I only (replica-down tests) / start it again on its data
#   chcluster.sh env       print export lines for a running cluster
#
# Env: TIDEMARK_ZOOKEEPER_PORT (19181), TIDEMARK_CHCLUSTER_PORT (19010: node i's native port is PORT+i-1),
#      TIDEMARK_CHCLUSTER_INTERSERVER_PORT (19030: node i's replication port, +i-1),
#      TIDEMARK_CHCLUSTER_NODE_PORTS / TIDEMARK_CHCLUSTER_INTERSERVER_PORTS (comma-separated per-node ports, overriding
#      the bases where given), TIDEMARK_CHCLUSTER_NAME (tidemark_ch: the name in remote_servers, what
#      `clickhouse.cluster` names), TIDEMARK_STATE_DIR.
# Users: `default` (no password), from 127.0.0.1 only. No HTTP port: Tidemark speaks the native protocol only.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ZK_PORT="${TIDEMARK_ZOOKEEPER_PORT:-19181}"
NODE_BASE="${TIDEMARK_CHCLUSTER_PORT:-19010}"
INTER_BASE="${TIDEMARK_CHCLUSTER_INTERSERVER_PORT:-19030}"
CLUSTER="${TIDEMARK_CHCLUSTER_NAME:-tidemark_ch}"
XDIR="$TIDEMARK_STATE_DIR/chcluster"
ZK_JAR=/usr/share/java/zookeeper.jar

install() {
  if [[ -f $ZK_JAR ]] && command -v clickhouse-server >/dev/null && command -v clickhouse-client >/dev/null; then return 0; fi
  apt_install zookeeper clickhouse-server clickhouse-client
}

# list_port VAR BASE I: entry I of the comma-separated list in VAR, else BASE+I-1.
list_port() {
  local ports p
  IFS=, read -r -a ports <<<"${!1:-}"
  p=${ports[$(($3 - 1))]:-}
  echo "${p:-$(($2 + $3 - 1))}"
}
node_port() { list_port TIDEMARK_CHCLUSTER_NODE_PORTS "$NODE_BASE" "$1"; }
inter_port() { list_port TIDEMARK_CHCLUSTER_INTERSERVER_PORTS "$INTER_BASE" "$1"; }

# The topology of a started cluster is kept in its state dir, so stop/env/start-node need no flags.
topology() { cat "$XDIR/topology" 2>/dev/null || echo "1 2"; }
nodes() { local s r; read -r s r < <(topology); echo $((s * r)); }

# zk_ready: ZooKeeper serves sessions. Not ruok, which answers imok as soon as the process runs, before the server
# accepts sessions: a ClickHouse 18.16 started then had its ZooKeeper handshake closed, and its next ON CLUSTER
# DDL segfaulted in zkutil::ZooKeeper::createImpl (a null session). srvr names the mode only while serving.
zk_ready() {
  local r
  r=$( (exec 3<>"/dev/tcp/$TIDEMARK_HOST/$ZK_PORT" && echo srvr >&3 && timeout 2 cat <&3) 2>/dev/null) || return 1
  [[ $r == *"Mode: standalone"* ]]
}

start_zk() {
  local zdir="$XDIR/zookeeper"
  if pid_alive "$zdir/pid"; then zk_ready || die "ZooKeeper $(cat "$zdir/pid") does not answer on $ZK_PORT; run 'chcluster.sh stop'"; return 0; fi
  require_free_port "$ZK_PORT" "ZooKeeper (TIDEMARK_ZOOKEEPER_PORT)"
  rm -rf "$zdir"; mkdir -p "$zdir/data"
  # Sessions of 20 s (ClickHouse's session_timeout_ms, within ZooKeeper's 2..20 ticks): on this loaded 2-core machine
  # a shorter session expired under load, making a replica read-only and re-electing leaders mid-DDL.
  cat >"$zdir/zoo.cfg" <<CFG
tickTime=1000
initLimit=10
syncLimit=5
dataDir=$zdir/data
clientPort=$ZK_PORT
clientPortAddress=$TIDEMARK_HOST
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
CFG
  cat >"$zdir/log4j.properties" <<CFG
log4j.rootLogger=WARN, F
log4j.appender.F=org.apache.log4j.FileAppender
log4j.appender.F.File=$zdir/zookeeper.log
log4j.appender.F.layout=org.apache.log4j.PatternLayout
log4j.appender.F.layout.ConversionPattern=%d %p %c: %m%n
CFG
  setsid java -Xmx128m -XX:+UseSerialGC -Dlog4j.configuration="file:$zdir/log4j.properties" \
    -cp "$ZK_JAR" org.apache.zookeeper.server.quorum.QuorumPeerMain "$zdir/zoo.cfg" >"$zdir/stdout.log" 2>&1 </dev/null &
  echo $! >"$zdir/pid"
  if ! wait_serving 60 "ZooKeeper" "$zdir/pid" "$ZK_PORT" zk_ready; then tail -n 20 "$zdir/stdout.log" "$zdir/zookeeper.log" >&2 2>/dev/null || true; stop; die "ZooKeeper did not become ready on $ZK_PORT"; fi
  log "ZooKeeper ready on $TIDEMARK_HOST:$ZK_PORT"
}

# remote_servers: every shard with internal_replication, so a Distributed insert writes one replica per shard and the
# ReplicatedMergeTree copies it to the others (writing every replica itself would double rows when one is down).
remote_servers() {
  local s r shards replicas i=1
  read -r shards replicas < <(topology)
  echo "  <remote_servers><$CLUSTER>"
  for ((s = 1; s <= shards; s++)); do
    echo "    <shard><internal_replication>true</internal_replication>"
    for ((r = 1; r <= replicas; r++)); do
      echo "      <replica><host>$TIDEMARK_HOST</host><port>$(node_port $i)</port></replica>"
      i=$((i + 1))
    done
    echo "    </shard>"
  done
  echo "  </$CLUSTER></remote_servers>"
}

write_node_config() {
  local i=$1 shards replicas shard replica dir="$XDIR/node-$1"
  read -r shards replicas < <(topology)
  shard=$(((i - 1) / replicas + 1)); replica=$(((i - 1) % replicas + 1))
  mkdir -p "$dir"/{data,tmp,user_files,format_schemas,log}
  cat >"$dir/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$dir/log/server.log</log><errorlog>$dir/log/error.log</errorlog><size>20M</size><count>2</count></logger>
  <listen_host>$TIDEMARK_HOST</listen_host>
  <tcp_port>$(node_port "$i")</tcp_port>
  <interserver_http_port>$(inter_port "$i")</interserver_http_port>
  <interserver_http_host>$TIDEMARK_HOST</interserver_http_host>
  <path>$dir/data/</path>
  <tmp_path>$dir/tmp/</tmp_path>
  <user_files_path>$dir/user_files/</user_files_path>
  <format_schema_path>$dir/format_schemas/</format_schema_path>
  <users_config>$XDIR/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>67108864</mark_cache_size>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <max_concurrent_queries>100</max_concurrent_queries>
  <builtin_dictionaries_reload_interval>3600</builtin_dictionaries_reload_interval>
  <zookeeper><node><host>$TIDEMARK_HOST</host><port>$ZK_PORT</port></node><session_timeout_ms>20000</session_timeout_ms></zookeeper>
  <macros><shard>$(printf %02d "$shard")</shard><replica>s$(printf %02d "$shard")r$replica</replica></macros>
  <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>
$(remote_servers)
</yandex>
XML
}

write_users() {
  cat >"$XDIR/users.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <profiles>
    <default><max_memory_usage>2000000000</max_memory_usage><load_balancing>in_order</load_balancing></default>
  </profiles>
  <users>
    <default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default>
  </users>
  <quotas>
    <default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default>
  </quotas>
</yandex>
XML
}

node_ready() { clickhouse-client --host "$TIDEMARK_HOST" --port "$(node_port "$1")" -q 'SELECT 1' >/dev/null 2>&1; }

start_node() {
  local i=$1 dir="$XDIR/node-$1"
  if pid_alive "$dir/pid"; then node_ready "$i" || die "ClickHouse node $i does not answer on $(node_port "$i")"; return 0; fi
  [[ -f "$dir/config.xml" ]] || die "node $i has no config: run 'chcluster.sh start' first"
  require_free_port "$(node_port "$i")" "ClickHouse node $i native protocol (TIDEMARK_CHCLUSTER_PORT/_NODE_PORTS)"
  require_free_port "$(inter_port "$i")" "ClickHouse node $i interserver HTTP (TIDEMARK_CHCLUSTER_INTERSERVER_PORT/_PORTS)"
  setsid clickhouse-server --config-file="$dir/config.xml" >"$dir/log/stdout.log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
  if ! wait_serving 60 "ClickHouse node $i" "$dir/pid" "$(node_port "$i")" node_ready "$i"; then
    tail -n 20 "$dir/log/error.log" "$dir/log/stdout.log" >&2 2>/dev/null || true
    return 1
  fi
}

cluster_ready() {
  # Every node sees ZooKeeper (system.zookeeper answers) and the whole cluster in system.clusters.
  local i n want
  n=$(nodes)
  for ((i = 1; i <= n; i++)); do
    want=$(clickhouse-client --host "$TIDEMARK_HOST" --port "$(node_port "$i")" -q \
      "SELECT count() FROM system.clusters WHERE cluster = '$CLUSTER'" 2>/dev/null) || return 1
    [[ $want == "$n" ]] || return 1
    clickhouse-client --host "$TIDEMARK_HOST" --port "$(node_port "$i")" -q \
      "SELECT count() FROM system.zookeeper WHERE path = '/'" >/dev/null 2>&1 || return 1
  done
}

start() {
  local shards=1 replicas=2 i n
  while [[ $# -gt 0 ]]; do
    case $1 in
      --shards) shards=$2; shift 2 ;;
      --replicas) replicas=$2; shift 2 ;;
      *) die "chcluster.sh start: unknown argument $1" ;;
    esac
  done
  [[ $shards =~ ^[1-9]$ && $replicas =~ ^[1-9]$ ]] || die "chcluster.sh start: --shards and --replicas take 1..9"
  if pid_alive "$XDIR/zookeeper/pid"; then
    [[ "$(topology)" == "$shards $replicas" ]] || die "a cluster of $(topology | tr ' ' x) (shards x replicas) is running; 'chcluster.sh stop' first"
    n=$(nodes)
    for ((i = 1; i <= n; i++)); do start_node "$i" || { stop; die "ClickHouse node $i did not become ready"; }; done
    log "ClickHouse cluster $CLUSTER already running"
    return 0
  fi
  install
  # Fresh data every start, like the single server: tests create their own databases.
  rm -rf "$XDIR"; mkdir -p "$XDIR"
  echo "$shards $replicas" >"$XDIR/topology"
  start_zk
  write_users
  n=$(nodes)
  for ((i = 1; i <= n; i++)); do write_node_config "$i"; done
  for ((i = 1; i <= n; i++)); do start_node "$i" || { stop; die "ClickHouse node $i did not become ready; logs in $XDIR/node-$i/log"; }; done
  wait_until 60 "cluster $CLUSTER (ZooKeeper sessions, system.clusters)" cluster_ready || { stop; die "cluster $CLUSTER did not become ready"; }
  log "ClickHouse cluster $CLUSTER ($shards shard(s) x $replicas replica(s)) ready on $(addrs) with ZooKeeper $TIDEMARK_HOST:$ZK_PORT"
}

addrs() {
  local i n out=()
  n=$(nodes)
  for ((i = 1; i <= n; i++)); do out+=("$TIDEMARK_HOST:$(node_port "$i")"); done
  (IFS=,; echo "${out[*]}")
}

stop_node() { stop_pidfile "$XDIR/node-$1/pid" "clickhouse node $1"; }

stop() {
  local i
  for d in "$XDIR"/node-*; do [[ -d $d ]] && stop_node "${d##*-}"; done
  stop_pidfile "$XDIR/zookeeper/pid" zookeeper
}

env_lines() {
  pid_alive "$XDIR/zookeeper/pid" || return 0
  local shards replicas
  read -r shards replicas < <(topology)
  echo "export TIDEMARK_CHCLUSTER_ADDRS=$(addrs)"
  echo "export TIDEMARK_CHCLUSTER_NAME=$CLUSTER"
  echo "export TIDEMARK_CHCLUSTER_SHARDS=$shards"
  echo "export TIDEMARK_CHCLUSTER_REPLICAS=$replicas"
  echo "export TIDEMARK_ZOOKEEPER_ADDR=$TIDEMARK_HOST:$ZK_PORT"
}

case "${1:-}" in
  install) install ;;
  start) shift; start "$@" ;;
  stop) stop ;;
  stop-node) [[ -n ${2:-} ]] || die "usage: chcluster.sh stop-node I"; stop_node "$2" ;;
  start-node) [[ -n ${2:-} ]] || die "usage: chcluster.sh start-node I"; start_node "$2" || die "ClickHouse node $2 did not become ready" ;;
  env) env_lines ;;
  *) die "usage: chcluster.sh install|start [--shards S] [--replicas R]|stop|stop-node I|start-node I|env" ;;
esac
