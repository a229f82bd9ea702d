#!/usr/bin/env bash
# Real Alertmanager from Debian's package (prometheus-alertmanager), started only when asked (alert routing tests).
#
#   alertmanager.sh install | start [--webhook URL] | stop | env
#
# start routes every alert, one notification per alert (group_by: ['...']), to the webhook URL with resolved
# notifications on (send_resolved): a new alert at once (group_wait 0s), a change of it 1 s later at the latest
# (group_interval); without --webhook alerts go nowhere. High-availability gossip is off (one instance).
# Env: TIDEMARK_ALERTMANAGER_PORT (19793), TIDEMARK_STATE_DIR.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

AM_PORT="${TIDEMARK_ALERTMANAGER_PORT:-19793}"
ADIR="$TIDEMARK_STATE_DIR/alertmanager"

install() {
  command -v prometheus-alertmanager >/dev/null && return 0
  apt_install prometheus-alertmanager
}

ready() { (exec 3<>"/dev/tcp/$TIDEMARK_HOST/$AM_PORT" && printf 'GET /-/ready HTTP/1.0\r\n\r\n' >&3 && grep -q '200' <(head -1 <&3)); }
# serving: ready, and the answer is ours (the port may be taken by another server between the check and our bind).
serving() { ready && listens_on "$ADIR/pid" "$AM_PORT"; }

start() {
  local webhook=""
  while [[ $# -gt 0 ]]; do
    case $1 in
      --webhook) webhook=$2; shift 2 ;;
      *) die "alertmanager.sh start: unknown argument $1" ;;
    esac
  done
  if pid_alive "$ADIR/pid"; then log "Alertmanager already running on $TIDEMARK_HOST:$AM_PORT"; return 0; fi
  install
  require_free_port "$AM_PORT" "Alertmanager (TIDEMARK_ALERTMANAGER_PORT)"
  rm -rf "$ADIR"; mkdir -p "$ADIR/data"
  {
    echo "route:"
    echo "  receiver: default"
    echo "  group_by: ['...']"
    echo "  group_wait: 0s"
    echo "  group_interval: 1s"
    echo "  repeat_interval: 24h"
    echo "receivers:"
    echo "  - name: default"
    if [[ -n $webhook ]]; then
      echo "    webhook_configs: [{url: \"$webhook\", send_resolved: true}]"
    fi
  } >"$ADIR/alertmanager.yml"
  setsid prometheus-alertmanager --config.file="$ADIR/alertmanager.yml" --storage.path="$ADIR/data" \
    --web.listen-address="$TIDEMARK_HOST:$AM_PORT" --cluster.listen-address= >"$ADIR/alertmanager.log" 2>&1 </dev/null &
  echo $! >"$ADIR/pid"
  if ! wait_until 30 "Alertmanager" serving; then
    tail -n 20 "$ADIR/alertmanager.log" >&2; stop; die "Alertmanager did not become ready"
  fi
  log "Alertmanager ready on $TIDEMARK_HOST:$AM_PORT"
}

stop() { stop_pidfile "$ADIR/pid" alertmanager; }

env_lines() { pid_alive "$ADIR/pid" && echo "export TIDEMARK_ALERTMANAGER_ADDR=$TIDEMARK_HOST:$AM_PORT"; return 0; }

case "${1:-}" in
  install) install ;;
  start) shift; start "$@" ;;
  stop) stop ;;
  env) env_lines ;;
  *) die "usage: alertmanager.sh install|start [--webhook URL]|stop|env" ;;
esac
