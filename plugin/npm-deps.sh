# npm_deps runs `npm ci` unless node_modules already holds exactly package-lock.json (a stamp of its hash), so
# repeated `make test` runs do not reinstall. Sourced by test.sh and build.sh.
npm_deps() {
  local want have=""
  want=$(sha256sum package-lock.json | cut -d' ' -f1)
  [[ -f node_modules/.lock-sha256 ]] && have=$(cat node_modules/.lock-sha256)
  if [[ "$want" != "$have" ]]; then
    npm ci --no-audit --no-fund --loglevel=error
    echo "$want" > node_modules/.lock-sha256
  fi
}
