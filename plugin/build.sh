#!/usr/bin/env bash
# Builds the plugin into plugin/dist: the frontend bundle and plugin.json (scripts/build.mjs) and the Go backend
# binary gpx_tidemark_<os>_<arch> that plugin.json's "executable" names. Grafana loads the folder as it is.
# GOOS/GOARCH select the backend target (default: this machine).
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=plugin/npm-deps.sh
source ./npm-deps.sh
npm_deps
rm -rf dist
npm run --silent build
goos=${GOOS:-$(go env GOOS)}
goarch=${GOARCH:-$(go env GOARCH)}
CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -ldflags '-s -w' -o "dist/gpx_tidemark_${goos}_${goarch}" ./pkg
echo "plugin built in $(pwd)/dist"
