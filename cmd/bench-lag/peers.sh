#!/usr/bin/env bash
# Builds the lag exporters bench-lag measures beside Tidemark, from their repositories' pinned commits, with the Go
# module proxy, into DIR (default $TIDEMARK_CACHE_DIR/bench-peers or ~/.cache/tidemark/bench-peers), and prints one
# "name version commit path" line per peer.
#
#   peers.sh [DIR]
#
# Each repository is read from a local git mirror when KMINION_GIT or KAFKA_EXPORTER_GIT names a bare git directory,
# else cloned (bare) from GitHub into DIR once. A binary already built at its pinned commit
# is reused.
set -euo pipefail

KMINION_COMMIT=4f3867a4400b731feda1f17f2e96dea36158d2ab        # v2.3.5 + 2026-08-17 (redpanda-data/kminion)
KAFKA_EXPORTER_COMMIT=953e2f1745b90101f331ad629f10be5239845f69 # v1.9.0-15-g953e2f1 (danielqsj/kafka_exporter)

out="${1:-${TIDEMARK_CACHE_DIR:-$HOME/.cache/tidemark}/bench-peers}"
mkdir -p "$out"

# build NAME GITDIR URL COMMIT PKG LDFLAGS
build() {
  local name=$1 git=$2 url=$3 commit=$4 pkg=$5 ldflags=$6 bin="$out/$1-${4:0:12}" src
  if [[ ! -x $bin ]]; then
    if [[ -z $git || ! -d $git ]]; then
      git="$out/$name.git"
      [[ -d $git ]] || git clone --quiet --bare "$url" "$git"
    fi
    src=$(mktemp -d)
    git --git-dir="$git" archive "$commit" | tar -x -C "$src"
    (cd "$src" && GOFLAGS=-mod=mod GOTOOLCHAIN=auto go build -trimpath -ldflags "$ldflags" -o "$bin" "$pkg") >&2
    rm -rf "$src"
  fi
  echo "$name $(git --git-dir="$git" describe --tags "$commit" 2>/dev/null || echo "${commit:0:12}") $commit $bin"
}

build kminion "${KMINION_GIT:-}" https://github.com/redpanda-data/kminion \
  "$KMINION_COMMIT" . ""
build kafka_exporter "${KAFKA_EXPORTER_GIT:-}" \
  https://github.com/danielqsj/kafka_exporter "$KAFKA_EXPORTER_COMMIT" . \
  "-X github.com/prometheus/common/version.Version=1.9.0-15-g953e2f1 -X github.com/prometheus/common/version.Revision=$KAFKA_EXPORTER_COMMIT"
