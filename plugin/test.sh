#!/usr/bin/env bash
# Frontend checks for the Grafana plugin: install exactly the lockfile (once per lockfile change), type-check, lint,
# unit tests, then a build of the frontend bundle and a check of its shape, then the shipped dashboards drawn from the
# backend's frames after a short real load (deploy/screenshots/run.sh into a temporary directory): every panel of the
# Tidemark and Prometheus datasources must draw something (or say why not). That last step needs the local stack (make test runs this script inside
# it); without it the step is skipped, and under CI=true it fails. The Go backend's tests run with the rest
# of the module's (go test ./plugin/...).
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=plugin/npm-deps.sh
source ./npm-deps.sh
npm_deps
npm run --silent typecheck
npm run --silent lint
npm test --silent
# the bundle Grafana would load: one AMD module with the shared packages external (esbuild, a second or two)
npm run --silent build
npm run --silent check-dist

if [[ -n ${TIDEMARK_KAFKA_BROKERS:-} && -n ${TIDEMARK_CLICKHOUSE_ADDR:-} ]]; then
  shots=$(mktemp -d /tmp/tidemark-shots-test.XXXXXX)
  # 45 s: past the collector's 30 s clock warm-up, which lets few end-to-end samples through (docs/plugin.md)
  SHOTS_SECONDS=${SHOTS_SECONDS:-45} bash ../deploy/screenshots/run.sh "$shots"
  rm -rf "$shots"
elif [[ ${CI:-} == true ]]; then
  echo "plugin/test.sh: CI=true and no local stack (TIDEMARK_KAFKA_BROKERS, TIDEMARK_CLICKHOUSE_ADDR): cannot draw the dashboards" >&2
  exit 1
else
  echo "plugin/test.sh: no local stack, skipping the dashboards drawn from real data (run inside make test or make screenshots)" >&2
fi
