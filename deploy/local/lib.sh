# shellcheck shell=bash
# Shared helpers for deploy/local/*.sh: state and cache directories, one-line errors, port checks, pid files.
# Everything listens on 127.0.0.1 only. State lives outside the repository.

set -euo pipefail

TIDEMARK_STATE_DIR="${TIDEMARK_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/tidemark/local}"
TIDEMARK_CACHE_DIR="${TIDEMARK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark}"
TIDEMARK_HOST=127.0.0.1

log() { printf '%s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# port_in_use PORT: true when something accepts connections on 127.0.0.1:PORT.
port_in_use() { (exec 3<>"/dev/tcp/$TIDEMARK_HOST/$1") 2>/dev/null; }

# require_free_port PORT WHAT: one clear line and exit 1 when the port is taken.
require_free_port() {
  if port_in_use "$1"; then die "port $1 (for $2) is already in use on $TIDEMARK_HOST; pick another with the env var documented in deploy/local/README.md"; fi
}

# pid_alive FILE: the pid recorded in FILE is a live process that we started: its command line names our state
# directory (every server here is started with a config file inside it), so a pid reused after a reboot or a killed
# session is never mistaken for ours.
pid_alive() {
  local pid
  [[ -f "$1" ]] || return 1
  pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$TIDEMARK_STATE_DIR"
}

# pid_running FILE: the process recorded in FILE, started by this script a moment ago, has not exited. Until the
# fork has exec'd the server (seconds, on a loaded machine) its command line is the starting shell's, which
# pid_alive would not recognise as ours, so a start-up wait asks only whether the process exists.
pid_running() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# listens_on FILE PORT: the process recorded in FILE (pid_alive) is the one listening on PORT. A readiness probe alone
# cannot tell: when tests pick free ports, another test's server may take the port between the pick and our server's
# bind, our server then exits with "Address already in use", and the other server answers our probe.
listens_on() {
  pid_alive "$1" || return 1
  command -v ss >/dev/null || return 0 # iproute2 is in every Debian install; without it, trust pid_alive
  ss -Hltnp "sport = :$2" 2>/dev/null | grep -qF "pid=$(cat "$1"),"
}

# wait_serving SECONDS DESCRIPTION PIDFILE PORT CMD...: wait_until CMD succeeds and the process in PIDFILE listens on
# PORT; returns 1 at once if that process has exited (its log says why, e.g. the port was taken).
wait_serving() {
  local secs=$1 what=$2 pidfile=$3 port=$4; shift 4
  local deadline=$((SECONDS + secs))
  while ((SECONDS < deadline)); do
    if ! pid_running "$pidfile"; then
      if port_in_use "$port"; then
        log "$what exited while starting: port $port is already in use (another process took it first)"
      else
        log "$what exited while starting"
      fi
      return 1
    fi
    if "$@" >/dev/null 2>&1 && listens_on "$pidfile" "$port"; then return 0; fi
    sleep 0.3
  done
  log "timed out after ${secs}s waiting for $what"
  return 1
}

# stop_pidfile FILE NAME: TERM the recorded process (and its process group), wait up to 20 s, then KILL; remove FILE.
# Only processes these scripts started are ever signalled: they are found by pid file, never by name.
stop_pidfile() {
  local f=$1 name=$2 pid
  [[ -f "$f" ]] || return 0
  pid=$(cat "$f")
  if pid_alive "$f"; then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; sleep 0.2; fi
  fi
  rm -f "$f"
}

# apt_install PKG...: installs missing Debian packages (runs apt-get update once per call when something is missing).
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get to install them"
  local sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  log "installing ${missing[*]} from Debian"
  $sudo apt-get update -qq >&2 || die "apt-get update failed; cannot install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2 || die "apt-get install ${missing[*]} failed"
}

# wait_until SECONDS DESCRIPTION CMD...: polls CMD every 0.3 s; returns 1 on timeout.
wait_until() {
  local secs=$1 what=$2; shift 2
  local deadline=$((SECONDS + secs))
  while ((SECONDS < deadline)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.3
  done
  log "timed out after ${secs}s waiting for $what"
  return 1
}
