#!/usr/bin/env bash
# The local stack's secure side (stack.sh up --secure): a CA and certificates, a small OIDC issuer, and one Tidemark
# config file per Kafka authentication mechanism.
#
#   secure.sh certs      make the CA, broker, ClickHouse and client certificates into STATE/tls (once; kept)
#   secure.sh start      build and start the OIDC issuer (deploy/local/oidc-issuer) and wait for its JWKS
#   secure.sh configs    write STATE/secure/{scram,oauth,mtls}.yaml (kafka: and clickhouse: blocks for each)
#   secure.sh stop       stop the issuer
#   secure.sh env        print the export lines (config paths, CA, issuer URL, secure addresses)
#
# Ports: TIDEMARK_OIDC_PORT (default TIDEMARK_KAFKA_PORT + 800 = 19892). The Kafka and ClickHouse secure ports are
# kafka.sh's and clickhouse.sh's (see there). Credentials (local test values, readable in STATE/secure): SCRAM and
# PLAIN user `tidemark`; OAuth clients `tidemark` (1 h tokens), `tidemark-short` (20 s tokens) and
# `tidemark-expired` (tokens that have already expired).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/ports.sh"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TLS_DIR="$TIDEMARK_STATE_DIR/tls"
SDIR="$TIDEMARK_STATE_DIR/secure"
ODIR="$TIDEMARK_STATE_DIR/oidc"

# The local stack's credentials. They protect nothing (loopback only, test data); tests read them from the files.
SCRAM_PASSWORD=tidemark-scram-secret
OIDC_SECRET=tidemark-oidc-secret

issue_cert() { # issue NAME CN SAN: a 2048-bit RSA key (PKCS #8) and a certificate signed by the CA
  local name=$1 cn=$2 san=$3
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$TLS_DIR/$name.key" 2>/dev/null
  openssl req -new -key "$TLS_DIR/$name.key" -subj "/CN=$cn" -out "$TLS_DIR/$name.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n%s' \
    "${san:+subjectAltName=$san}" >"$TLS_DIR/$name.ext"
  openssl x509 -req -in "$TLS_DIR/$name.csr" -CA "$TLS_DIR/ca.pem" -CAkey "$TLS_DIR/ca.key" -CAcreateserial \
    -days 825 -sha256 -extfile "$TLS_DIR/$name.ext" -out "$TLS_DIR/$name.pem" 2>/dev/null
  rm -f "$TLS_DIR/$name.csr" "$TLS_DIR/$name.ext"
  chmod 600 "$TLS_DIR/$name.key"
}

certs() {
  command -v openssl >/dev/null || apt_install openssl
  if [[ -f "$TLS_DIR/.complete" ]]; then return 0; fi
  rm -rf "$TLS_DIR"; mkdir -p "$TLS_DIR"
  log "making a local CA and certificates in $TLS_DIR"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TLS_DIR/ca.key" -out "$TLS_DIR/ca.pem" -days 3650 -sha256 \
    -subj "/CN=Tidemark local CA" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  chmod 600 "$TLS_DIR/ca.key"
  issue_cert broker "kafka broker" "IP:$TIDEMARK_HOST,DNS:localhost"
  issue_cert clickhouse clickhouse "IP:$TIDEMARK_HOST,DNS:localhost"
  issue_cert client tidemark-client ""
  # Kafka's PEM keystore: the private key followed by the certificate chain, in one file.
  cat "$TLS_DIR/broker.key" "$TLS_DIR/broker.pem" >"$TLS_DIR/broker-keystore.pem"
  chmod 600 "$TLS_DIR/broker-keystore.pem"
  touch "$TLS_DIR/.complete"
}

# The SCRAM users kafka.sh adds when it formats the storage.
scram_args() {
  printf '%s\n' --add-scram "SCRAM-SHA-256=[name=tidemark,password=$SCRAM_PASSWORD]" \
    --add-scram "SCRAM-SHA-512=[name=tidemark,password=$SCRAM_PASSWORD]"
}

issuer_url() { echo "http://$TIDEMARK_HOST:$OIDC_PORT"; }

jwks_ready() { (exec 3<>"/dev/tcp/$TIDEMARK_HOST/$OIDC_PORT" && printf 'GET /jwks HTTP/1.0\r\n\r\n' >&3 && grep -q ' 200 ' <(head -1 <&3)); }

start() {
  if pid_alive "$ODIR/pid"; then
    jwks_ready || die "the OIDC issuer (pid $(cat "$ODIR/pid")) does not answer on $OIDC_PORT; run 'make down' and retry"
    return 0
  fi
  require_free_port "$OIDC_PORT" "OIDC issuer (TIDEMARK_OIDC_PORT)"
  mkdir -p "$ODIR" "$TIDEMARK_CACHE_DIR/bin"
  local bin="$TIDEMARK_CACHE_DIR/bin/oidc-issuer"
  # go build is incremental (the build cache): seconds the first time, instant after.
  (cd "$REPO" && go build -o "$bin" ./deploy/local/oidc-issuer) || die "building deploy/local/oidc-issuer failed"
  cat >"$ODIR/clients.json" <<JSON
[{"id": "tidemark", "secret": "$OIDC_SECRET", "ttl": 3600000000000, "scope": "kafka"},
 {"id": "tidemark-short", "secret": "$OIDC_SECRET", "ttl": 20000000000, "scope": "kafka"},
 {"id": "tidemark-expired", "secret": "$OIDC_SECRET", "ttl": -60000000000, "scope": "kafka"}]
JSON
  # The command line names the state directory (pid_alive's check that the pid is ours).
  setsid "$bin" -listen "$TIDEMARK_HOST:$OIDC_PORT" -key "$ODIR/key.pem" -clients "$ODIR/clients.json" \
    -audience kafka >"$ODIR/issuer.log" 2>&1 </dev/null &
  echo $! >"$ODIR/pid"
  if ! wait_until 20 "OIDC issuer" jwks_ready; then tail -n 5 "$ODIR/issuer.log" >&2; stop; die "the OIDC issuer did not start"; fi
  log "OIDC issuer ready: $(issuer_url)"
}

stop() { stop_pidfile "$ODIR/pid" oidc-issuer; }

# tls_block INDENT CERT: a tls: block with the local CA (and the client certificate when CERT=1).
tls_block() {
  local in=$1
  echo "${in}tls:"
  echo "${in}  enabled: true"
  echo "${in}  ca_file: $TLS_DIR/ca.pem"
  if [[ $2 -eq 1 ]]; then
    echo "${in}  cert_file: $TLS_DIR/client.pem"
    echo "${in}  key_file: $TLS_DIR/client.key"
  fi
}

# brokers BASE: the bootstrap list of every broker's listener at BASE + i - 1.
brokers() {
  local n out="" i
  n=$(cat "$TIDEMARK_STATE_DIR/kafka/brokers" 2>/dev/null || echo 1)
  for i in $(seq 1 "$n"); do out+="${out:+, }$TIDEMARK_HOST:$(($1 + i - 1))"; done
  echo "[$out]"
}

clickhouse_block() {
  echo "clickhouse:"
  echo "  addr: [$TIDEMARK_HOST:$CH_SECURE_PORT]"
  echo "  user: tidemark"
  echo "  password_file: $SDIR/clickhouse-password"
  tls_block "  " 1
}

configs() {
  mkdir -p "$SDIR"
  printf '%s\n' "$SCRAM_PASSWORD" >"$SDIR/scram-password"
  printf '%s\n' "$OIDC_SECRET" >"$SDIR/oidc-client-secret"
  printf '%s\n' tidemark >"$SDIR/clickhouse-password"
  chmod 600 "$SDIR"/*-password "$SDIR/oidc-client-secret"
  {
    echo "# SASL_SSL with SCRAM-SHA-512 (written by deploy/local/secure.sh)"
    echo "kafka:"
    echo "  brokers: $(brokers "$SASL_PORT")"
    tls_block "  " 0
    echo "  sasl:"
    echo "    mechanism: SCRAM-SHA-512"
    echo "    user: tidemark"
    echo "    password_file: $SDIR/scram-password"
    clickhouse_block
  } >"$SDIR/scram.yaml"
  {
    echo "# SASL_SSL with OAUTHBEARER: client-credentials tokens from the local OIDC issuer (written by deploy/local/secure.sh)"
    echo "kafka:"
    echo "  brokers: $(brokers "$OAUTH_PORT")"
    tls_block "  " 0
    echo "  sasl:"
    echo "    mechanism: OAUTHBEARER"
    echo "    oauth:"
    echo "      token_url: $(issuer_url)/token"
    echo "      client_id: tidemark"
    echo "      client_secret_file: $SDIR/oidc-client-secret"
    echo "      scopes: [kafka]"
    clickhouse_block
  } >"$SDIR/oauth.yaml"
  {
    echo "# SSL with a client certificate (mutual TLS) (written by deploy/local/secure.sh)"
    echo "kafka:"
    echo "  brokers: $(brokers "$MTLS_PORT")"
    tls_block "  " 1
    clickhouse_block
  } >"$SDIR/mtls.yaml"
}

env_lines() {
  pid_alive "$ODIR/pid" || return 0
  [[ -f "$SDIR/scram.yaml" ]] || return 0
  echo "export TIDEMARK_KAFKA_SCRAM_CONFIG=$SDIR/scram.yaml"
  echo "export TIDEMARK_KAFKA_OAUTH_CONFIG=$SDIR/oauth.yaml"
  echo "export TIDEMARK_KAFKA_MTLS_CONFIG=$SDIR/mtls.yaml"
  echo "export TIDEMARK_TLS_DIR=$TLS_DIR"
  echo "export TIDEMARK_OIDC_URL=$(issuer_url)"
}

case "${1:-}" in
  certs) certs ;;
  scram-args) scram_args ;;
  scram-password) echo "$SCRAM_PASSWORD" ;;
  start) start ;;
  configs) configs ;;
  stop) stop ;;
  env) env_lines ;;
  *) die "usage: secure.sh certs|start|configs|stop|env" ;;
esac
