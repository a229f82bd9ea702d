#!/usr/bin/env bash
# Frontend checks for the Grafana plugin: install exactly the lockfile (once per lockfile change), type-check, lint,
# unit tests, then a build of the frontend bundle and a check of its shape. The Go backend's tests run with the rest
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
