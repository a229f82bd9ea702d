#!/usr/bin/env bash
# Real ClickHouse server from Debian's package (18.16 on bookworm), with its own minimal config, on loopback.
#
#   clickhouse.sh install   apt-get install clickhouse-server clickhouse-client when missing
#   clickhouse.sh start [--secure]
#                           start (idempotent: a running server of ours is reused); --secure adds the secure native
#                           port (TLS with the certificate from secure.sh certs; clients must present a certificate
#                           from the same CA)
#   clickhouse.sh stop      stop the server this script started (pid file)
#   clickhouse.sh env       print export lines for a running server
#
# Env: TIDEMARK_CLICKHOUSE_PORT (native protocol, 19000), TIDEMARK_CLICKHOUSE_HTTP_PORT (18123),
#      TIDEMARK_CLICKHOUSE_SECURE_PORT (secure native protocol, PORT + 440 = 19440), TIDEMARK_STATE_DIR.
# Users: `default` (no password) and `tidemark` (password `tidemark`), both from 127.0.0.1 only.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/ports.sh"
CDIR="$TIDEMARK_STATE_DIR/clickhouse"

install() {
  if command -v clickhouse-server >/dev/null && command -v clickhouse-client >/dev/null; then return 0; fi
  apt_install clickhouse-server clickhouse-client
}

# secure_config: the secure native port and the server's TLS (Poco's openSSL block; "strict" requires a client
# certificate signed by the CA).
secure_config() {
  local tls="$TIDEMARK_STATE_DIR/tls"
  cat <<XML
  <tcp_port_secure>$CH_SECURE_PORT</tcp_port_secure>
  <openSSL>
    <server>
      <certificateFile>$tls/clickhouse.pem</certificateFile>
      <privateKeyFile>$tls/clickhouse.key</privateKeyFile>
      <caConfig>$tls/ca.pem</caConfig>
      <verificationMode>strict</verificationMode>
      <loadDefaultCAFile>false</loadDefaultCAFile>
      <cacheSessions>true</cacheSessions>
      <disableProtocols>sslv2,sslv3,tlsv1,tlsv1_1</disableProtocols>
      <preferServerCiphers>true</preferServerCiphers>
    </server>
  </openSSL>
XML
}

write_config() {
  local secure=$1 extra=""
  [[ $secure -eq 1 ]] && extra=$(secure_config)
  mkdir -p "$CDIR"/{data,tmp,user_files,format_schemas,log}
  cat >"$CDIR/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$CDIR/log/server.log</log><errorlog>$CDIR/log/error.log</errorlog><size>20M</size><count>2</count></logger>
  <listen_host>$TIDEMARK_HOST</listen_host>
  <tcp_port>$CH_PORT</tcp_port>
  <http_port>$CH_HTTP_PORT</http_port>
$extra
  <path>$CDIR/data/</path>
  <tmp_path>$CDIR/tmp/</tmp_path>
  <user_files_path>$CDIR/user_files/</user_files_path>
  <format_schema_path>$CDIR/format_schemas/</format_schema_path>
  <users_config>$CDIR/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>268435456</mark_cache_size>
  <uncompressed_cache_size>268435456</uncompressed_cache_size>
  <max_concurrent_queries>100</max_concurrent_queries>
  <builtin_dictionaries_reload_interval>3600</builtin_dictionaries_reload_interval>
  <!-- The server's own evidence for performance work (docs/performance.md): every query's duration, rows, bytes and
       settings, and every part an INSERT or merge created. Flushed every 7.5 s (the default). -->
  <query_log><database>system</database><table>query_log</table><flush_interval_milliseconds>7500</flush_interval_milliseconds></query_log>
  <part_log><database>system</database><table>part_log</table><flush_interval_milliseconds>7500</flush_interval_milliseconds></part_log>
</yandex>
XML
  cat >"$CDIR/users.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <profiles>
    <default><max_memory_usage>8000000000</max_memory_usage><load_balancing>random</load_balancing><log_queries>1</log_queries></default>
  </profiles>
  <users>
    <default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default>
    <tidemark><password>tidemark</password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></tidemark>
  </users>
  <quotas>
    <default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default>
  </quotas>
</yandex>
XML
}

ready() { clickhouse-client --host "$TIDEMARK_HOST" --port "$CH_PORT" -q 'SELECT 1' >/dev/null 2>&1; }

start() {
  local secure=0
  [[ ${1:-} == --secure ]] && secure=1
  if pid_alive "$CDIR/pid"; then
    if [[ $secure -eq 1 && ! -f "$CDIR/secure" ]]; then die "ClickHouse is already running without its secure port, asked for --secure: run 'make down' first"; fi
    ready || die "ClickHouse process $(cat "$CDIR/pid") does not answer on $CH_PORT; run 'make down' and retry"
    log "ClickHouse already running on $TIDEMARK_HOST:$CH_PORT"
    return 0
  fi
  install
  require_free_port "$CH_PORT" "ClickHouse native protocol (TIDEMARK_CLICKHOUSE_PORT)"
  require_free_port "$CH_HTTP_PORT" "ClickHouse HTTP (TIDEMARK_CLICKHOUSE_HTTP_PORT)"
  if [[ $secure -eq 1 ]]; then
    require_free_port "$CH_SECURE_PORT" "ClickHouse secure native protocol (TIDEMARK_CLICKHOUSE_SECURE_PORT)"
    [[ -f "$TIDEMARK_STATE_DIR/tls/.complete" ]] || die "no certificates: run 'deploy/local/secure.sh certs' (stack.sh up --secure does)"
  fi
  # Fresh data every start, like Kafka: tests create their own databases.
  rm -rf "$CDIR"
  write_config "$secure"
  [[ $secure -eq 1 ]] && touch "$CDIR/secure"
  setsid clickhouse-server --config-file="$CDIR/config.xml" >"$CDIR/log/stdout.log" 2>&1 </dev/null &
  echo $! >"$CDIR/pid"
  if ! wait_until 30 "ClickHouse" ready; then
    tail -n 20 "$CDIR/log/error.log" "$CDIR/log/stdout.log" >&2 2>/dev/null || true
    stop
    die "ClickHouse did not become ready; logs are in $CDIR/log"
  fi
  if [[ $secure -eq 1 ]] && ! wait_until 10 "ClickHouse secure port" port_in_use "$CH_SECURE_PORT"; then
    tail -n 20 "$CDIR/log/error.log" >&2 2>/dev/null || true
    stop
    die "ClickHouse did not open its secure port $CH_SECURE_PORT; logs are in $CDIR/log"
  fi
  log "ClickHouse $(clickhouse-client --port "$CH_PORT" -q 'SELECT version()') ready on $TIDEMARK_HOST:$CH_PORT"
}

stop() { stop_pidfile "$CDIR/pid" clickhouse; }

env_lines() {
  pid_alive "$CDIR/pid" || return 0
  echo "export TIDEMARK_CLICKHOUSE_ADDR=$TIDEMARK_HOST:$CH_PORT"
  if [[ -f "$CDIR/secure" ]]; then echo "export TIDEMARK_CLICKHOUSE_SECURE_ADDR=$TIDEMARK_HOST:$CH_SECURE_PORT"; fi
}

case "${1:-}" in
  install) install ;;
  start) shift; start "$@" ;;
  stop) stop ;;
  env) env_lines ;;
  *) die "usage: clickhouse.sh install|start [--secure]|stop|env" ;;
esac
