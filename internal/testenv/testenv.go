// Package testenv is the test harness for Tidemark's integration tests: it hands tests the addresses of the REAL Kafka
// brokers, ClickHouse server and Jaeger that deploy/local started (through environment variables the Makefile
// sets), unique names for topics, groups and databases, and helpers to create topics with configs.
//
// Environment:
//
//	TIDEMARK_KAFKA_BROKERS     comma-separated bootstrap addresses, e.g. 127.0.0.1:19092,127.0.0.1:19093
//	TIDEMARK_CLICKHOUSE_ADDR   host:port of ClickHouse's native protocol, e.g. 127.0.0.1:19000
//	TIDEMARK_PROMETHEUS_ADDR   host:port of a Prometheus server (only for scrape/rule tests)
//	TIDEMARK_KAFKA_LIB         directory of Kafka's cached jars (its command-line tools and Java clients, java.go)
//	TIDEMARK_STREAMS_APP_CP    classpath of the Kafka Streams test app (deploy/local/streams.sh)
//	TIDEMARK_JAEGER_OTLP_GRPC  host:port of Jaeger's OTLP/gRPC receiver (stack.sh up --jaeger; tracing tests)
//	TIDEMARK_JAEGER_OTLP_HTTP  host:port of its OTLP/HTTP receiver
//	TIDEMARK_JAEGER_QUERY      http://host:port of its query API and UI
//	CI                         when "true", a missing server fails the test instead of skipping it
//
// testenv is test-only code; it talks to the servers directly (sarama, clickhouse-go) so that it does not depend on the
// adapters it is used to test.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
)

// InCI reports whether the run is a CI run (CI=true), where a missing server is a failure, not a skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// require fails (under CI) or skips the test when the environment variable env is unset, naming the command that
// starts the stack (or reuses the running one) and sets its environment in the shell.
func require(t testing.TB, env, what string) string {
	t.Helper()
	return requireStartedBy(t, env, what, "`eval \"$(make -s up)\"` in this shell")
}

// requireStartedBy is require for a server that `start` starts (a command, quoted), besides `make test`.
func requireStartedBy(t testing.TB, env, what, start string) string {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(env))
	if v != "" {
		return v
	}
	msg := what + " is not running (" + env + " unset): run " + start + " (or `make test`, which starts it)"
	if InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_]+`)

// Name returns a name unique to this test run and test, safe as a Kafka topic, consumer group or ClickHouse database
// name: prefix_<test name>_<8 hex>. Topic names are limited to 249 characters; the test-name part is cut at 60.
func Name(t testing.TB, prefix string) string {
	t.Helper()
	base := strings.ToLower(unsafeName.ReplaceAllString(t.Name(), "_"))
	if len(base) > 60 {
		base = base[:60]
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random name suffix: %v", err)
	}
	return prefix + "_" + strings.Trim(base, "_") + "_" + hex.EncodeToString(b[:])
}
