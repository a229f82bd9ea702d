#!/usr/bin/env bash
# The small Kafka Streams application (streams-app/) the real-broker tests run as a streams group (KIP-1071).
#
#   streams.sh install   resolve kafka-streams from Maven Central and compile the app into the cache (once per
#                        Kafka version and source; no jar is built or committed)
#   streams.sh env       print the export line of its classpath (TIDEMARK_STREAMS_APP_CP)
#
# Run it: java -cp "$TIDEMARK_STREAMS_APP_CP" dev.tidemark.lagapp.LagStreamsApp BOOTSTRAP APP_ID IN OUT STATE_DIR [DELAY_MS]
# Env: TIDEMARK_KAFKA_VERSION (4.4.0), TIDEMARK_CACHE_DIR.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KAFKA_VERSION="${TIDEMARK_KAFKA_VERSION:-4.4.0}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/streams-app"
# keyed by the sources too, so an edit of the app rebuilds it
KEY=$(cat "$SRC/pom.xml" "$SRC"/src/main/java/dev/tidemark/lagapp/*.java | sha256sum | cut -c1-12)
WORK="$TIDEMARK_CACHE_DIR/streams-app-$KAFKA_VERSION-$KEY"

install() {
  if [[ -f "$WORK/.complete" ]]; then return 0; fi
  command -v javac >/dev/null || die "javac not found: the streams test app needs a JDK 17+ (Debian: apt-get install openjdk-17-jdk-headless)"
  command -v mvn >/dev/null || die "mvn not found: needed once to fetch kafka-streams $KAFKA_VERSION (Debian: apt-get install maven)"
  rm -rf "$WORK"
  mkdir -p "$WORK/classes"
  cp "$SRC/pom.xml" "$WORK/pom.xml"
  log "fetching kafka-streams $KAFKA_VERSION from Maven Central into $WORK/lib"
  if ! (cd "$WORK" && mvn -q -B dependency:copy-dependencies -Dkafka.version="$KAFKA_VERSION" \
        -DoutputDirectory=lib -DincludeScope=runtime >"$WORK/mvn.log" 2>&1); then
    die "download of kafka-streams $KAFKA_VERSION failed (see $WORK/mvn.log)"
  fi
  javac -nowarn -d "$WORK/classes" -cp "$WORK/lib/*" "$SRC"/src/main/java/dev/tidemark/lagapp/*.java \
    || die "compiling the streams test app failed"
  cat >"$WORK/classes/log4j2.properties" <<'CFG'
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
CFG
  touch "$WORK/.complete"
}

env_lines() {
  [[ -f "$WORK/.complete" ]] || return 0
  echo "export TIDEMARK_STREAMS_APP_CP=$WORK/classes:$WORK/lib/*"
}

case "${1:-}" in
  install) install ;;
  env) env_lines ;;
  *) die "usage: streams.sh install|env" ;;
esac
