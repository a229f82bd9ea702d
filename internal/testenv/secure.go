package testenv

import (
	"path/filepath"
	"strings"
	"testing"
)

// Secure is the secure side of the local stack (`stack.sh up --secure`): Kafka's SASL_SSL (SCRAM-SHA-256/512,
// PLAIN), OAUTHBEARER and mTLS listeners, the local OIDC issuer, ClickHouse's secure native port, the CA and
// certificates, and one Tidemark config file per mechanism.
//
// Environment (printed by `stack.sh env`):
//
//	TIDEMARK_KAFKA_SASL_BROKERS, TIDEMARK_KAFKA_OAUTH_BROKERS, TIDEMARK_KAFKA_MTLS_BROKERS   bootstrap lists
//	TIDEMARK_KAFKA_SCRAM_CONFIG, TIDEMARK_KAFKA_OAUTH_CONFIG, TIDEMARK_KAFKA_MTLS_CONFIG     config file paths
//	TIDEMARK_TLS_DIR                 ca.pem, client.pem/.key (trusted client certificate), broker.pem, clickhouse.pem
//	TIDEMARK_OIDC_URL                the issuer (token endpoint URL + "/token")
//	TIDEMARK_CLICKHOUSE_SECURE_ADDR  host:port of ClickHouse's secure native port
type Secure struct {
	SASLBrokers, OAuthBrokers, MTLSBrokers []string
	SCRAMConfig, OAuthConfig, MTLSConfig   string
	TLSDir, OIDCURL, ClickHouseSecureAddr  string
}

// Local credentials of the secure stack (deploy/local/secure.sh); they protect nothing but loopback test servers.
const (
	SecureUser         = "tidemark"
	SecureSCRAMPass    = "tidemark-scram-secret"
	SecureOIDCSecret   = "tidemark-oidc-secret"
	SecureClickHousePW = "tidemark"
)

// SecureStack returns the secure side's addresses and files. It skips the test, or fails it under CI=true, when their
// variables are unset (the stack is not running, or its environment is not in the shell).
func SecureStack(t testing.TB) Secure {
	t.Helper()
	split := func(env string) []string {
		return strings.Split(require(t, env, "the secure Kafka stack"), ",")
	}
	one := func(env string) string { return require(t, env, "the secure stack") }
	return Secure{
		SASLBrokers: split("TIDEMARK_KAFKA_SASL_BROKERS"), OAuthBrokers: split("TIDEMARK_KAFKA_OAUTH_BROKERS"),
		MTLSBrokers: split("TIDEMARK_KAFKA_MTLS_BROKERS"),
		SCRAMConfig: one("TIDEMARK_KAFKA_SCRAM_CONFIG"), OAuthConfig: one("TIDEMARK_KAFKA_OAUTH_CONFIG"),
		MTLSConfig: one("TIDEMARK_KAFKA_MTLS_CONFIG"), TLSDir: one("TIDEMARK_TLS_DIR"), OIDCURL: one("TIDEMARK_OIDC_URL"),
		ClickHouseSecureAddr: one("TIDEMARK_CLICKHOUSE_SECURE_ADDR"),
	}
}

// CA returns the path of the local CA's certificate.
func (s Secure) CA() string { return filepath.Join(s.TLSDir, "ca.pem") }

// ClientCert returns the paths of the client certificate and key the CA signed (trusted by the mTLS listener and
// ClickHouse's secure port).
func (s Secure) ClientCert() (cert, key string) {
	return filepath.Join(s.TLSDir, "client.pem"), filepath.Join(s.TLSDir, "client.key")
}
