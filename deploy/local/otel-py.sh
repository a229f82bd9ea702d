#!/usr/bin/env bash
# The plain Python Kafka application (otel-py/spans_app.py: confluent-kafka, no Tidemark code) the spans-path tests
# run under OpenTelemetry's confluent-kafka instrumentation.
#
#   otel-py.sh install   make a venv in the cache with the pinned confluent-kafka and OpenTelemetry packages from PyPI
#                        (once per version set and app source)
#   otel-py.sh env       print the export lines (TIDEMARK_OTEL_PY: the venv's python, TIDEMARK_OTEL_PY_APP: the app)
#
# Run it: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://HOST:PORT/v1/traces OTEL_SERVICE_NAME=... HOST_NAME=... \
#           "$TIDEMARK_OTEL_PY" "$TIDEMARK_OTEL_PY_APP" BOOTSTRAP TOPIC GROUP N PROC_MS
# Env: TIDEMARK_CACHE_DIR. The OpenTelemetry SDK is 1.45.1, the release whose semantic conventions (0.66b1)
# opentelemetry-instrumentation-confluent-kafka 0.66b1 pins; SDK 1.45.2 pins 0.66b2 and cannot be installed with it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PACKAGES=(confluent-kafka==2.16.1 opentelemetry-sdk==1.45.1 opentelemetry-exporter-otlp-proto-http==1.45.1
  opentelemetry-instrumentation-confluent-kafka==0.66b1)
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/otel-py"
# keyed by the packages and the app's source, so an edit of either makes a new venv
KEY=$({ printf '%s\n' "${PACKAGES[@]}"; cat "$SRC"/*.py; } | sha256sum | cut -c1-12)
WORK="$TIDEMARK_CACHE_DIR/otel-py-$KEY"

install() {
  if [[ -f "$WORK/.complete" ]]; then return 0; fi
  command -v python3 >/dev/null || apt_install python3
  python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
  rm -rf "$WORK"
  mkdir -p "$WORK"
  log "making a Python venv with ${PACKAGES[*]} in $WORK"
  python3 -m venv "$WORK/venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  if ! "$WORK/venv/bin/pip" install -q "${PACKAGES[@]}" >"$WORK/pip.log" 2>&1; then
    die "pip install of ${PACKAGES[*]} failed (see $WORK/pip.log)"
  fi
  cp "$SRC"/*.py "$WORK/"
  "$WORK/venv/bin/python" -c 'import confluent_kafka, opentelemetry.instrumentation.confluent_kafka, opentelemetry.exporter.otlp.proto.http.trace_exporter' \
    || die "the venv in $WORK cannot import the instrumentation"
  touch "$WORK/.complete"
}

env_lines() {
  [[ -f "$WORK/.complete" ]] || return 0
  echo "export TIDEMARK_OTEL_PY=$WORK/venv/bin/python"
  echo "export TIDEMARK_OTEL_PY_APP=$WORK/spans_app.py"
}

case "${1:-}" in
  install) install ;;
  env) env_lines ;;
  *) die "usage: otel-py.sh install|env" ;;
esac
