#!/usr/bin/env bash
# The plain Kafka application (otel-app/: kafka-clients, no Tidemark code) the spans-path tests run under the
# OpenTelemetry Java agent.
#
#   otel-app.sh install   resolve kafka-clients and the agent from Maven Central and compile the app into the cache
#                         (once per version and source; no jar is built or committed)
#   otel-app.sh env       print the export lines (TIDEMARK_OTEL_APP_CP, TIDEMARK_OTEL_JAVAAGENT)
#
# Run it: java -javaagent:"$TIDEMARK_OTEL_JAVAAGENT" -Dotel.exporter.otlp.traces.endpoint=... \
#           -cp "$TIDEMARK_OTEL_APP_CP" dev.tidemark.otelapp.SpansApp BOOTSTRAP TOPIC GROUP N PROC_MS
# Env: TIDEMARK_KAFKA_VERSION (4.4.0), TIDEMARK_OTEL_AGENT_VERSION (2.31.1), TIDEMARK_CACHE_DIR.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KAFKA_VERSION="${TIDEMARK_KAFKA_VERSION:-4.4.0}"
AGENT_VERSION="${TIDEMARK_OTEL_AGENT_VERSION:-2.31.1}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/otel-app"
# keyed by the sources too, so an edit of the app rebuilds it
KEY=$(cat "$SRC/pom.xml" "$SRC"/src/main/java/dev/tidemark/otelapp/*.java | sha256sum | cut -c1-12)
WORK="$TIDEMARK_CACHE_DIR/otel-app-$KAFKA_VERSION-$AGENT_VERSION-$KEY"

install() {
  if [[ -f "$WORK/.complete" ]]; then return 0; fi
  command -v javac >/dev/null || die "javac not found: the OpenTelemetry test app needs a JDK 17+ (Debian: apt-get install openjdk-17-jdk-headless)"
  command -v mvn >/dev/null || die "mvn not found: needed once to fetch kafka-clients and the agent (Debian: apt-get install maven)"
  rm -rf "$WORK"
  mkdir -p "$WORK/classes" "$WORK/agent"
  cp "$SRC/pom.xml" "$WORK/pom.xml"
  log "fetching kafka-clients $KAFKA_VERSION and opentelemetry-javaagent $AGENT_VERSION from Maven Central into $WORK"
  if ! (cd "$WORK" && mvn -q -B dependency:copy-dependencies -Dkafka.version="$KAFKA_VERSION" \
        -DoutputDirectory=lib -DincludeScope=runtime >"$WORK/mvn.log" 2>&1); then
    die "download of kafka-clients $KAFKA_VERSION failed (see $WORK/mvn.log)"
  fi
  if ! (cd "$WORK" && mvn -q -B dependency:copy -Dartifact="io.opentelemetry.javaagent:opentelemetry-javaagent:$AGENT_VERSION" \
        -DoutputDirectory=agent >>"$WORK/mvn.log" 2>&1); then
    die "download of opentelemetry-javaagent $AGENT_VERSION failed (see $WORK/mvn.log)"
  fi
  javac -nowarn -d "$WORK/classes" -cp "$WORK/lib/*" "$SRC"/src/main/java/dev/tidemark/otelapp/*.java \
    || die "compiling the OpenTelemetry test app failed"
  touch "$WORK/.complete"
}

env_lines() {
  [[ -f "$WORK/.complete" ]] || return 0
  echo "export TIDEMARK_OTEL_APP_CP=$WORK/classes:$WORK/lib/*"
  echo "export TIDEMARK_OTEL_JAVAAGENT=$WORK/agent/opentelemetry-javaagent-$AGENT_VERSION.jar"
}

case "${1:-}" in
  install) install ;;
  env) env_lines ;;
  *) die "usage: otel-app.sh install|env" ;;
esac
